//! Starting each daemon the smallest way these tests need, with its stderr
//! as they choose, and talking to it over its own socket.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use integration_tests::{Daemon, LogReader, eventually, on_free_ports};
use serde_json::{Value, json};

/// How each test's daemon writes its log.
#[derive(Clone, Copy, Debug)]
pub enum Log {
    /// Captured, as in the other tests.
    Read,
    Failing(LogReader),
}

fn start(bin: &str, args: &[&str], env: &[(&str, &str)], cwd: Option<&Path>, log: Log) -> Daemon {
    match log {
        Log::Read => Daemon::start_in(bin, args, env, cwd),
        Log::Failing(reader) => Daemon::start_with_log(bin, args, env, cwd, reader),
    }
}

/// A line-delimited JSON-RPC client on a Unix socket.
pub struct UnixClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl UnixClient {
    pub fn connect(path: &Path) -> UnixClient {
        let stream = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        UnixClient { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream }
    }

    pub fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        let mut line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).unwrap();
        loop {
            let mut reply = String::new();
            assert!(self.reader.read_line(&mut reply).unwrap() > 0, "closed while waiting for {method}");
            let reply: Value = serde_json::from_str(&reply).unwrap();
            // Events (ralph's subscriptions) may come first.
            if reply.get("id") == Some(&json!(id)) {
                return reply;
            }
        }
    }
}

fn wait_for_socket(daemon: &mut Daemon, path: &Path) {
    let up = eventually(Duration::from_secs(20), || UnixStream::connect(path).is_ok() || daemon.has_exited());
    assert!(up && !daemon.has_exited(), "{} never opened {}:\n{}", daemon.name, path.display(), daemon.stderr());
}

pub struct Broker {
    pub daemon: Daemon,
    pub addr: SocketAddr,
}

pub fn broker(env: &[(&str, &str)], log: Log) -> Broker {
    on_free_ports(|[port]| {
        let mut daemon = start("btcp-broker", &["serve", "--port", &port.to_string()], env, None, log);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        daemon.listening_on(addr)?;
        Ok(Broker { daemon, addr })
    })
}

pub struct Bridge {
    pub daemon: Daemon,
    pub addr: SocketAddr,
    pub root: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn bridge(env: &[(&str, &str)], log: Log) -> Bridge {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("project");
    std::fs::create_dir_all(&root).unwrap();
    let logs = dir.path().join("logs").display().to_string();
    let (daemon, addr) = on_free_ports(|[port, repl_port]| {
        let (port_text, repl_text) = (port.to_string(), repl_port.to_string());
        let mut all: Vec<(&str, &str)> =
            vec![("SUPEX_PORT", &port_text), ("SUPEX_REPL_PORT", &repl_text), ("SUPEX_LOG_DIR", &logs)];
        all.extend_from_slice(env);
        let mut daemon = start("supex-bridge", &[], &all, Some(&root), log);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        daemon.listening_on(addr)?;
        Ok((daemon, addr))
    });
    Bridge { daemon, addr, root, _dir: dir }
}

pub fn hello() -> Value {
    json!({"name": "bounds-test", "version": "1", "agent": "test", "pid": std::process::id()})
}

pub struct Host {
    pub daemon: Daemon,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

/// hermes-host with `config` (TOML) as its config file.
pub fn host(config: &str, env: &[(&str, &str)], log: Log) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.toml");
    std::fs::write(&config_path, config).unwrap();
    let socket = dir.path().join("run/hermes.sock");
    let (config_text, socket_text) = (config_path.display().to_string(), socket.display().to_string());
    let data = dir.path().join("data").display().to_string();
    let args = ["serve", "--config", &config_text, "--socket", &socket_text, "--data-dir", &data];
    let mut daemon = start("hermes-host", &args, env, None, log);
    wait_for_socket(&mut daemon, &socket);
    Host { daemon, socket, _dir: dir }
}

pub fn ext_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hermes_host/ext.py")
}

/// One `[[extensions]]` entry running `command`.
pub fn extension(name: &str, command: &str) -> String {
    format!("[[extensions]]\nname = {}\ncommand = {}\n", json!(name), json!(command))
}

pub struct Loop {
    pub daemon: Daemon,
    pub task: PathBuf,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

/// `ralph-server run` on a one-story task whose agent is `agent`, held at its
/// start (the `hold` file of the scripted agent) when it is that agent.
pub fn ralph_loop(agent: &str, env: &[(&str, &str)], log: Log) -> Loop {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("bounds");
    std::fs::create_dir(&task).unwrap();
    let prd = r#"{"project": "demo", "branchName": "ralph/demo", "userStories": [
  {"id": "US-001", "title": "Story 1", "priority": 1, "passes": false}
]}
"#;
    std::fs::write(task.join("prd.json"), prd).unwrap();
    std::fs::write(task.join("hold"), "").unwrap();
    let sockets = dir.path().join("sockets");
    let socket = sockets.join("bounds.sock");
    let (task_text, sockets_text) = (task.display().to_string(), sockets.display().to_string());
    let mut all: Vec<(&str, &str)> = vec![("RALPH_SOCKET_DIR", &sockets_text)];
    all.extend_from_slice(env);
    let args = ["run", &task_text, "--agent-cmd", agent, "--retry-delay", "0"];
    let mut daemon = start("ralph-server", &args, &all, None, log);
    wait_for_socket(&mut daemon, &socket);
    Loop { daemon, task, socket, _dir: dir }
}

pub fn fake_agent() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ralph_server/fake-agent.sh").display().to_string()
}

/// A mark no other process carries: the `$0` of a shell a test starts.
pub fn marker(what: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("bounds-test-{what}-{}-{n}", std::process::id())
}

/// A shell script that leaves its process group for a session of its own
/// (`setsid`), where a shell carrying `marker` runs a sleep.
pub fn escaping(marker: &str) -> String {
    format!(r#"setsid sh -c 'sleep 300; :' {marker} &"#)
}
