//! The hermes-host fixture: a config file with test extensions, the daemon
//! on a socket in a temporary directory, and a control client.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use integration_tests::{Daemon, PortTaken, eventually};
use serde_json::{Value, json};

pub fn ext_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hermes_host/ext.py")
}

/// One `[[extensions]]` entry running ext.py with `env`.
pub fn py_extension(name: &str, env: &[(&str, &str)]) -> String {
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {}", toml_str(v))).collect();
    format!(
        "[[extensions]]\nname = {}\ncommand = {}\nenv = {{ {} }}\n",
        toml_str(name),
        toml_str(&format!("python3 {}", ext_py().display())),
        env.join(", ")
    )
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

pub struct Host {
    pub dir: tempfile::TempDir,
    pub daemon: Daemon,
    pub socket: PathBuf,
}

impl Host {
    /// Starts the daemon with `config` (TOML text) and waits for its socket.
    pub fn start(config: &str) -> Host {
        Self::start_with(config, &[])
    }

    pub fn start_with(config: &str, args: &[&str]) -> Host {
        Self::start_with_env(config, args, &[])
    }

    /// Starts the daemon with extra environment (`RUST_LOG`, say).
    pub fn start_with_env(config: &str, args: &[&str], env: &[(&str, &str)]) -> Host {
        let mut host = Self::spawn(config, args, env);
        let socket = &host.socket;
        let daemon = &mut host.daemon;
        let up = eventually(Duration::from_secs(20), || UnixStream::connect(socket).is_ok() || daemon.has_exited());
        assert!(up && !daemon.has_exited(), "no control socket:\n{}", daemon.stderr());
        host
    }

    /// [`Host::start_with`] with the page on `127.0.0.1:port`, and the page's
    /// address once the host has written it. [`PortTaken`] if the host
    /// stopped because another process had the port.
    pub fn try_start_with_page(config: &str, port: u16) -> Result<(Host, String), PortTaken> {
        let mut host = Self::spawn(config, &["--http", &format!("127.0.0.1:{port}")], &[]);
        host.daemon.listening_on(([127, 0, 0, 1], port).into())?;
        let url_file = host.socket.with_extension("url");
        let written = eventually(Duration::from_secs(30), || url_file.exists());
        assert!(written, "no {}:\n{}", url_file.display(), host.daemon.stderr());
        let url = std::fs::read_to_string(&url_file).unwrap().trim().to_owned();
        Ok((host, url))
    }

    /// The daemon started on `config` in a directory of its own.
    fn spawn(config: &str, args: &[&str], env: &[(&str, &str)]) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("config.toml");
        std::fs::write(&config_path, config).unwrap();
        let socket = dir.path().join("run/hermes.sock");
        let data = dir.path().join("data");
        let mut all = vec![
            "serve".to_owned(),
            "--config".into(),
            config_path.display().to_string(),
            "--socket".into(),
            socket.display().to_string(),
            "--data-dir".into(),
            data.display().to_string(),
        ];
        // The page's default port is one for the whole machine: a test that
        // wants the page gives its own (`--http`).
        if !args.contains(&"--http") {
            all.extend(["--http".into(), "off".into()]);
        }
        all.extend(args.iter().map(|a| a.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let daemon = Daemon::start("hermes-host", &all, env);
        Host { dir, daemon, socket }
    }

    pub fn client(&self) -> Control {
        Control::connect(&self.socket)
    }

    /// Calls a control method on a fresh connection; the whole response.
    pub fn call(&self, method: &str, params: Value) -> Value {
        self.client().call(method, params)
    }

    pub fn result(&self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    pub fn extension(&self, name: &str) -> Value {
        let list = self.result("extensions/list", json!({}));
        list["extensions"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned().unwrap_or(Value::Null)
    }

    /// Waits until `name` is in `state`; returns its listing.
    pub fn wait_state(&self, name: &str, state: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let e = self.extension(name);
            if e["state"] == state {
                return e;
            }
            if Instant::now() > deadline {
                panic!("{name} not {state} within {timeout:?}: {e}\n{}", self.daemon.stderr());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn logs(&self, name: &str) -> Vec<String> {
        let logs = self.result("extensions/logs", json!({"name": name, "lines": 1000}));
        logs["lines"].as_array().unwrap().iter().map(|l| l["line"].as_str().unwrap().to_owned()).collect()
    }

    /// Waits for a log line of `name` starting with `prefix` after the
    /// first `skip` such lines; returns the rest of it.
    pub fn wait_log(&self, name: &str, prefix: &str, skip: usize, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let found: Vec<String> = self.logs(name).into_iter().filter(|l| l.starts_with(prefix)).collect();
            if let Some(line) = found.get(skip) {
                return line[prefix.len()..].trim().to_owned();
            }
            if Instant::now() > deadline {
                panic!("no {prefix:?} line from {name} within {timeout:?}: {:?}", self.logs(name));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Has extension `name` (ext.py, EXT_CALL_FILE set to `call.json` in
    /// the fixture's directory) send `method` to the host; its response.
    pub fn ext_call(&self, name: &str, method: &str, params: Value) -> Value {
        let before = self.logs(name).iter().filter(|l| l.starts_with("RESULT ")).count();
        std::fs::write(self.call_file(), json!({"method": method, "params": params}).to_string()).unwrap();
        let run = self.call("command/execute", json!({"command": "test/call"}));
        assert!(run.get("error").is_none(), "{run}");
        let line = self.wait_log(name, "RESULT ", before, Duration::from_secs(20));
        serde_json::from_str(&line).unwrap()
    }

    pub fn call_file(&self) -> PathBuf {
        self.dir.path().join("call.json")
    }
}

/// A blocking NDJSON client on the control socket.
pub struct Control {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next: u64,
}

impl Control {
    pub fn connect(path: &Path) -> Control {
        let stream = UnixStream::connect(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Control { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream, next: 1 }
    }

    pub fn send(&mut self, value: &Value) {
        let mut line = serde_json::to_vec(value).unwrap();
        line.push(b'\n');
        self.writer.write_all(&line).unwrap();
    }

    pub fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).unwrap();
        assert!(n > 0, "the host closed the control connection");
        serde_json::from_str(&line).unwrap()
    }

    /// The next message within `timeout`; `None` if none came (a line cut
    /// short by the timeout is lost: for the end of a test). Used by the soak.
    #[allow(dead_code)]
    pub fn recv_within(&mut self, timeout: Duration) -> Option<Value> {
        self.writer.set_read_timeout(Some(timeout)).unwrap();
        let mut line = String::new();
        let read = self.reader.read_line(&mut line);
        self.writer.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        match read {
            Ok(0) => panic!("the host closed the control connection"),
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => None,
            Err(e) => panic!("reading from the control socket: {e}"),
        }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.recv();
            if message["id"] == id {
                return message;
            }
        }
    }
}

pub const ADT: &str = "MSH|^~\\&|APP|FAC|||20231215120000||ADT^A01|123|P|2.5.1\rPID|1||12345^^^HOSP^MR~999^^^SSA^SS||DOE^JOHN||19800101|M";
