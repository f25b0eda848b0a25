//! The broker's demo page as a newcomer sees it at 1280 px: the commands it
//! offers, with a 36-character session id in them, fit the page rather than
//! hiding their ends behind a scrollbar. Headless Chromium lays the page out;
//! the test reads the layout over the DevTools protocol.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use integration_tests::{Daemon, free_port, require_tool};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// Headless Chromium at 1280x800 with DevTools on a port of its choosing, in
/// its own process group (killed with its helpers when dropped).
struct Chromium {
    child: Child,
    devtools_port: u16,
    _profile: tempfile::TempDir,
}

impl Chromium {
    fn open(url: &str) -> Chromium {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--window-size=1280,800",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.path().display()),
                url,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("starting chromium");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
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
        let devtools_port = port.recv_timeout(Duration::from_secs(30)).ok().flatten();
        let chromium = Chromium { child, devtools_port: devtools_port.unwrap_or(0), _profile: profile };
        assert!(devtools_port.is_some(), "chromium did not open DevTools within 30 s");
        chromium
    }

    /// The DevTools WebSocket of the page showing `url_part`.
    fn page_socket(&self, url_part: &str) -> String {
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
}

impl Chromium {
    /// GET from DevTools' HTTP server, which keeps HTTP/1.1 connections open:
    /// the body is read by its Content-Length.
    fn get_json(&self, path: &str) -> Value {
        let mut stream = TcpStream::connect(("127.0.0.1", self.devtools_port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // DevTools names its WebSocket URLs after the Host header.
        let host = format!("127.0.0.1:{}", self.devtools_port);
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
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

/// What the page shows in its "try it" box, and whether it overflows.
const LAYOUT: &str = r#"(() => {
  const box = document.getElementById("try");
  return JSON.stringify({
    session: document.body.dataset.sessionId || null,
    text: box.textContent,
    scrollWidth: box.scrollWidth,
    clientWidth: box.clientWidth,
    innerWidth: window.innerWidth,
  });
})()"#;

#[tokio::test]
async fn the_demo_page_shows_whole_commands_with_a_long_session_id_at_1280_px() {
    if !require_tool("chromium") {
        return;
    }
    let port = free_port();
    let mut broker = Daemon::start("btcp-broker", &["serve", "--port", &port.to_string()], &[]);
    broker.wait_for_port(format!("127.0.0.1:{port}").parse().unwrap());
    let session = "5f0c6a1e-9b2d-4c7a-8e31-d4b2a9f07c65";
    assert_eq!(session.len(), 36);
    let chromium = Chromium::open(&format!("http://127.0.0.1:{port}/?sessionId={session}"));
    let socket = chromium.page_socket(session);
    let (mut devtools, _) = tokio_tungstenite::connect_async(&socket).await.unwrap_or_else(|e| panic!("{socket}: {e}"));

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut id = 0;
    let layout = loop {
        id += 1;
        let request = json!({"id": id, "method": "Runtime.evaluate",
                             "params": {"expression": LAYOUT, "returnByValue": true}});
        devtools.send(Message::text(request.to_string())).await.unwrap();
        let reply = loop {
            let message = tokio::time::timeout(Duration::from_secs(10), devtools.next()).await;
            let text = match message {
                Ok(Some(Ok(Message::Text(text)))) => text,
                Ok(Some(Ok(_))) => continue,
                other => panic!("DevTools went away: {other:?}"),
            };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply["id"] == id {
                break reply;
            }
        };
        let layout: Value =
            reply["result"]["result"]["value"].as_str().and_then(|v| serde_json::from_str(v).ok()).unwrap_or(json!({}));
        // Connected: the page has put the session id into its commands.
        if layout["session"] == session {
            break layout;
        }
        assert!(Instant::now() < deadline, "the page did not connect within 30 s: {reply}\n{}", broker.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(layout["text"].as_str().unwrap().contains(&format!("btcp-broker call {session} click")), "{layout}");
    assert!(layout["innerWidth"].as_u64().unwrap() <= 1280, "{layout}");
    assert!(
        layout["scrollWidth"].as_u64() <= layout["clientWidth"].as_u64(),
        "the commands overflow their box at 1280 px (hidden behind a scrollbar): {layout}"
    );
}
