//! Headless Chromium for the tests that need a real browser: its own profile
//! and its own temporary directory (Chromium leaves `org.chromium.Chromium.*`
//! directories in `$TMPDIR`), both removed when it is dropped, and its own
//! process group, killed with every helper process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct Chromium {
    child: Child,
    /// DevTools' port, when opened with [`Chromium::with_devtools`].
    devtools_port: Option<u16>,
    _scratch: tempfile::TempDir,
}

impl Chromium {
    /// Opens `url` in headless Chromium.
    pub fn open(url: &str) -> Chromium {
        Chromium::start(url, &[]).0
    }

    /// Opens `url` at 1280x800 without scrollbars, with DevTools on a port of
    /// its choosing ([`Chromium::page_socket`]).
    pub fn with_devtools(url: &str) -> Chromium {
        let (mut chromium, port) =
            Chromium::start(url, &["--hide-scrollbars", "--window-size=1280,800", "--remote-debugging-port=0"]);
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
        let port = port.recv_timeout(Duration::from_secs(30)).ok().flatten();
        chromium.devtools_port = port;
        assert!(port.is_some(), "chromium did not open DevTools within 30 s");
        chromium
    }

    /// Starts Chromium; the receiver gets DevTools' port if it says one.
    fn start(url: &str, extra: &[&str]) -> (Chromium, std::sync::mpsc::Receiver<Option<u16>>) {
        let scratch = tempfile::tempdir().unwrap();
        let (profile, tmp) = (scratch.path().join("profile"), scratch.path().join("tmp"));
        std::fs::create_dir(&tmp).unwrap();
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                // Without these it tries to reach the network.
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-dev-shm-usage",
                &format!("--user-data-dir={}", profile.display()),
            ])
            .args(extra)
            .arg(url)
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("starting chromium");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (found, port) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    let _ = found.send(digits.parse::<u16>().ok());
                }
            }
        });
        (Chromium { child, devtools_port: None, _scratch: scratch }, port)
    }

    /// The DevTools WebSocket of the page showing `url_part`.
    pub fn page_socket(&self, url_part: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let targets = self.get_json("/json/list");
            let page = targets
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.contains(url_part)));
            if let Some(socket) = page.and_then(|p| p["webSocketDebuggerUrl"].as_str()) {
                return socket.to_owned();
            }
            assert!(Instant::now() < deadline, "no page for {url_part} in {targets}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// GET from DevTools' HTTP server, which keeps HTTP/1.1 connections open:
    /// the body is read by its Content-Length.
    fn get_json(&self, path: &str) -> Value {
        let port = self.devtools_port.expect("opened with_devtools");
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // DevTools names its WebSocket URLs after the Host header.
        write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        serde_json::from_slice(&body).unwrap_or(json!([]))
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}
