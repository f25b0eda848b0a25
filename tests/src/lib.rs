//! Harness for the integration tests: start the real daemon binaries on free
//! ports, wait for them to listen, talk to them over real sockets, and stop them.
//!
//! The binaries are found next to the test executable's `deps/` directory
//! (`target/<profile>/`). Each daemon package has an integration test of its own,
//! which makes `cargo test` (and nextest) build its binary first.

pub mod browser;
mod ports;
mod wait;

use ports::Wait;
pub use ports::{
    HeldPort, PortTaken, distinct_free_ports, free_port, free_ports, on_free_port_list, on_free_ports, says_port_taken,
};
pub use wait::eventually;

use parking_lot::Mutex;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Path of a workspace binary built alongside this test.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let path = profile_dir.join(name);
    assert!(path.exists(), "{} is not built; run the tests with `cargo test` (or `cargo build` first)", path.display());
    path
}

/// Whether an external program the test needs is installed. Missing: the test
/// should return early after this reported the skip (see [`skip`]); under
/// `CI=true` a missing tool is a failure instead, because CI installs it.
pub fn require_tool(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        skip(&format!("`{tool}` is not installed"), &format!("install {tool} (README, \"Run the tests\")"));
    }
    found
}

/// Reports that the running test skips itself because `missing` (with how
/// to get it), where a person sees it: straight to the terminal, past the
/// test harness's capture (a skipped test still reports `ok`), and in
/// `target/skipped-tests/<test binary>.txt`, one line a test, for whoever
/// runs the tests another way (nextest captures stderr). Under `CI=true` it
/// panics instead: CI installs everything, so there a skip is a failure.
pub fn skip(missing: &str, how: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: {missing} and CI=true: {how} (see .ci/run)");
    }
    let line = format!("SKIP {test}: {missing}; {how}\n");
    // Not eprintln!: libtest captures that, and shows it only for a failure.
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(file) = skip_list() {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// This test binary's list of skipped tests, emptied at its first skip.
fn skip_list() -> Option<&'static Path> {
    static LIST: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        let exe = std::env::current_exe().ok()?;
        // target/<profile>/deps/<binary>-<hash>
        let target = exe.parent()?.parent()?.parent()?;
        let binary = exe.file_name()?.to_string_lossy();
        let binary = binary.rsplit_once('-').map_or(binary.as_ref(), |(name, _)| name).to_owned();
        let dir = target.join("skipped-tests");
        std::fs::create_dir_all(&dir).ok()?;
        let file = dir.join(format!("{binary}.txt"));
        std::fs::write(&file, "").ok()?;
        Some(file)
    })
    .as_deref()
}

/// What reads a daemon's stderr, for the tests of a log reader that fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogReader {
    /// The pipe's read end is closed at once: every write to it fails (EPIPE),
    /// as after `daemon 2>&1 | grep x` once grep is gone.
    Gone,
    /// The read end stays open and is never read: once the pipe is full every
    /// write to it would block, as with a paused pager or a stuck journald.
    Stalled,
}

/// A daemon process started for one test; killed when dropped.
pub struct Daemon {
    child: Option<Child>,
    /// The read end of a stderr pipe nobody reads ([`LogReader::Stalled`]).
    _unread_log: Option<std::os::fd::OwnedFd>,
    stderr: Arc<Mutex<String>>,
    /// Signalled when the stderr reader has read to the end of the pipe (in
    /// a mutex so that a `Daemon` can be shared with load threads).
    stderr_done: Mutex<std::sync::mpsc::Receiver<()>>,
    pub name: String,
    /// Where the daemon's data and configuration directories are ([`command`]).
    home: tempfile::TempDir,
}

impl Daemon {
    /// The daemon's data directory (`XDG_DATA_HOME`), of its own.
    pub fn data_dir(&self) -> PathBuf {
        self.home.path().join("data")
    }

    /// Starts `bin` with `args` and extra `env`, capturing stderr for diagnostics.
    pub fn start(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::start_in(bin, args, env, None)
    }

    pub fn start_in(bin: &str, args: &[&str], env: &[(&str, &str)], cwd: Option<&Path>) -> Daemon {
        let home = tempfile::tempdir().unwrap();
        let log_level = std::env::var("TEST_DAEMON_LOG").unwrap_or_else(|_| "info".into());
        let mut cmd = command(bin, args, &[&[("RUST_LOG", log_level.as_str())][..], env].concat(), cwd, home.path());
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("starting {bin}: {e}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let (done, stderr_done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            let _ = done.send(());
        });
        Daemon {
            child: Some(child),
            _unread_log: None,
            stderr,
            stderr_done: Mutex::new(stderr_done),
            name: bin.to_owned(),
            home,
        }
    }

    /// Starts `bin` with its stderr on a pipe whose reader fails as `log`
    /// says. Nothing of its log is seen: wait for it on its sockets.
    pub fn start_with_log(
        bin: &str,
        args: &[&str],
        env: &[(&str, &str)],
        cwd: Option<&Path>,
        log: LogReader,
    ) -> Daemon {
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        // The smallest pipe the kernel makes (a page): a stalled reader's pipe
        // is full after a few lines, not after 64 KiB of them.
        let _ = nix::fcntl::fcntl(&write_end, nix::fcntl::FcntlArg::F_SETPIPE_SZ(4096));
        let home = tempfile::tempdir().unwrap();
        let mut cmd = command(bin, args, &[&[("RUST_LOG", "debug")][..], env].concat(), cwd, home.path());
        cmd.stdout(Stdio::null()).stderr(Stdio::from(write_end));
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {bin}: {e}"));
        drop(cmd);
        let unread = match log {
            LogReader::Gone => None,
            LogReader::Stalled => Some(read_end),
        };
        let (done, stderr_done) = std::sync::mpsc::channel();
        let _ = done.send(());
        Daemon {
            child: Some(child),
            _unread_log: unread,
            stderr: Arc::default(),
            stderr_done: Mutex::new(stderr_done),
            name: bin.to_owned(),
            home,
        }
    }

    /// Whether the process has exited (and is reaped), without waiting.
    pub fn has_exited(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_some()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Everything the daemon wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().clone()
    }

    /// Waits until the daemon itself listens on `addr`, or panics with its log.
    pub fn wait_for_port(&mut self, addr: SocketAddr) {
        if self.listening_on(addr).is_err() {
            panic!("{} exited: another process had {addr}:\n{}", self.name, self.stderr());
        }
    }

    /// Waits until the daemon itself listens on `addr` (a listening socket
    /// that is one of its own descriptors: another process accepting there
    /// does not count). [`PortTaken`] if it exited because another process
    /// had the port (for [`on_free_ports`] to choose again); panics with its
    /// log if it exited for another reason or never listened.
    pub fn listening_on(&mut self, addr: SocketAddr) -> Result<(), PortTaken> {
        match ports::wait_listening(self.child.as_mut().unwrap(), addr.port(), Duration::from_secs(20)) {
            Wait::Listening => Ok(()),
            Wait::Exited { status, taken } => Err(self.exited_before("listening", status, taken)),
            Wait::TimedOut => panic!("{} did not listen on {addr} within 20 s:\n{}", self.name, self.stderr()),
        }
    }

    /// The daemon exited before `what`: [`PortTaken`] if that was because
    /// another process had its port (`taken`, or its log says so); panics
    /// with its log otherwise.
    fn exited_before(&self, what: &str, status: ExitStatus, taken: bool) -> PortTaken {
        // Its last lines, which may say why (a failing log reader has none).
        let _ = self.stderr_done.lock().recv_timeout(Duration::from_secs(2));
        if taken || says_port_taken(&self.stderr()) {
            return PortTaken;
        }
        panic!("{} exited with {status} before {what}:\n{}", self.name, self.stderr());
    }

    /// Waits until the daemon's stderr contains `needle`.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.stderr().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Sends a signal to the daemon.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    /// Waits for the daemon to exit on its own, and for its last stderr lines.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                // A grandchild still holding the pipe must not hang the test.
                let _ = self.stderr_done.lock().recv_timeout(Duration::from_secs(2));
                return status;
            }
            if Instant::now() > deadline {
                panic!("{} did not exit within {timeout:?}:\n{}", self.name, self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then wait for exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(Duration::from_secs(15))
    }
}

/// `bin ARGS` with `env` (after the defaults here), in `cwd`, with data and
/// configuration directories of its own under `home` (`XDG_DATA_HOME`,
/// `XDG_CONFIG_HOME`, unless `env` sets them): a test never writes to the
/// real home (supex-bridge's logs) nor reads its settings from it.
fn command(bin: &str, args: &[&str], env: &[(&str, &str)], cwd: Option<&Path>, home: &Path) -> Command {
    let mut cmd = Command::new(bin_path(bin));
    cmd.args(args).stdin(Stdio::null());
    cmd.env("XDG_DATA_HOME", home.join("data")).env("XDG_CONFIG_HOME", home.join("config"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    cmd
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- {} stderr ----\n{}", self.name, self.stderr());
        }
    }
}

/// Runs a binary to completion (client subcommands), returning status, stdout, stderr.
pub fn run(bin: &str, args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String, String) {
    let home = tempfile::tempdir().unwrap();
    let out = command(bin, args, env, None, home.path()).output();
    let out = out.unwrap_or_else(|e| panic!("running {bin}: {e}"));
    (out.status, String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A blocking NDJSON client for tests: one JSON value per line each way.
pub struct LineClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl LineClient {
    pub fn connect(addr: SocketAddr) -> LineClient {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        stream.set_nodelay(true).unwrap();
        LineClient { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream }
    }

    pub fn set_timeout(&self, timeout: Duration) {
        self.writer.set_read_timeout(Some(timeout)).unwrap();
    }

    /// Sends raw bytes as they are (add the `\n` yourself).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    pub fn send(&mut self, value: &Value) {
        let mut line = serde_json::to_vec(value).unwrap();
        line.push(b'\n');
        self.writer.write_all(&line).unwrap();
    }

    /// The next line, raw; `None` on EOF.
    pub fn recv_line(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(line),
            Err(e) => panic!("reading a reply: {e}"),
        }
    }

    pub fn recv(&mut self) -> Value {
        let line = self.recv_line().expect("connection closed while waiting for a reply");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {line}"))
    }

    /// Sends a request and returns its reply.
    pub fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.recv()
    }

    /// Whether the server closed the connection (EOF or reset) within `timeout`.
    pub fn is_closed_within(&mut self, timeout: Duration) -> bool {
        self.set_timeout(timeout);
        let mut buf = String::new();
        matches!(self.reader.read_line(&mut buf), Ok(0) | Err(_)) && buf.is_empty()
    }

    pub fn shutdown_write(&self) {
        self.writer.shutdown(std::net::Shutdown::Write).unwrap();
    }
}

/// Lists the pids of live processes whose command line contains `needle`.
pub fn pids_matching(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if cmdline.contains(needle) && !zombie {
            pids.push(pid);
        }
    }
    pids
}

/// A stand-in for systemd's notification socket: point a daemon's
/// `NOTIFY_SOCKET` at `path()` and wait for what it reports.
pub struct NotifySocket {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    socket: std::os::unix::net::UnixDatagram,
}

impl Default for NotifySocket {
    fn default() -> Self {
        Self::new()
    }
}

impl NotifySocket {
    pub fn new() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        NotifySocket { _dir: dir, path, socket }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits (at most 20 s) for the daemon's `READY=1`.
    pub fn expect_ready(&self) {
        self.socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 64];
        let n = self.socket.recv(&mut buf).expect("no READY=1 within 20 s");
        assert_eq!(&buf[..n], b"READY=1");
    }

    /// Waits (at most 20 s) for `daemon`'s `READY=1`; [`PortTaken`] if it
    /// exited first because another process had its port (for
    /// [`on_free_ports`] to choose again), a panic with its log if it exited
    /// for another reason.
    pub fn ready_from(&self, daemon: &mut Daemon) -> Result<(), PortTaken> {
        self.socket.set_nonblocking(true).unwrap();
        let (mut buf, mut ready, mut exited) = ([0u8; 64], None, None);
        eventually(Duration::from_secs(20), || {
            // Read before the socket is: a daemon gone by then had sent all it would.
            exited = daemon.child.as_mut().unwrap().try_wait().unwrap();
            match self.socket.recv(&mut buf) {
                Ok(n) => ready = Some(buf[..n].to_vec()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("reading the notify socket: {e}"),
            }
            ready.is_some() || exited.is_some()
        });
        self.socket.set_nonblocking(false).unwrap();
        match (ready, exited) {
            (Some(message), _) => {
                assert_eq!(message, b"READY=1");
                Ok(())
            }
            (None, Some(status)) => Err(daemon.exited_before("READY=1", status, false)),
            (None, None) => panic!("no READY=1 within 20 s:\n{}", daemon.stderr()),
        }
    }
}

/// A daemon started the way systemd's socket activation starts it:
/// `systemd-socket-activate` holds a listening socket on [`port`](Self::port)
/// (and on any other port given) and execs the daemon with them from fd 3 on
/// (`LISTEN_FDS`) at the first connection.
pub struct SocketActivated {
    child: Child,
    _dir: tempfile::TempDir,
    log: PathBuf,
    pub port: u16,
}

impl SocketActivated {
    /// On a free port (chosen again if another process had it). `fd_name` is
    /// the socket's `FileDescriptorName=`; `env` is passed with `-E`.
    pub fn start(bin: &str, fd_name: Option<&str>, env: &[(&str, &str)]) -> SocketActivated {
        on_free_ports(|[port]| Self::try_start(bin, &[], &[port], fd_name, env))
    }

    /// `bin` with `args`, a listening socket on each of `ports` (the first is
    /// [`port`](Self::port)); [`PortTaken`] if another process has one.
    pub fn try_start(
        bin: &str,
        args: &[&str],
        ports: &[u16],
        fd_name: Option<&str>,
        env: &[(&str, &str)],
    ) -> Result<Self, PortTaken> {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("daemon.log");
        let mut cmd = Command::new("systemd-socket-activate");
        for port in ports {
            cmd.args(["-l", &format!("127.0.0.1:{port}")]);
        }
        if let Some(name) = fd_name {
            cmd.arg(format!("--fdname={name}"));
        }
        // The daemon's data and configuration directories in the scratch
        // directory, as [`command`] gives every daemon.
        let (data, config) = (dir.path().join("data"), dir.path().join("config"));
        let homes = [("XDG_DATA_HOME", data.to_str().unwrap()), ("XDG_CONFIG_HOME", config.to_str().unwrap())];
        for (k, v) in [("RUST_LOG", "info")].iter().chain(&homes).chain(env) {
            cmd.args(["-E", &format!("{k}={v}")]);
        }
        let child = cmd
            .arg(bin_path(bin))
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut activated = SocketActivated { child, _dir: dir, log, port: ports[0] };
        // One line a socket ("Listening on 127.0.0.1:port as 3.").
        let listening = |log: &str| log.matches("Listening on").count() == ports.len();
        let settled = eventually(Duration::from_secs(10), || {
            listening(&activated.log()) || activated.child.try_wait().is_ok_and(|exit| exit.is_some())
        });
        let log = activated.log();
        if listening(&log) {
            return Ok(activated);
        }
        // It says so twice ("Failed to listen on ...: Address already in use").
        assert!(settled && says_port_taken(&log), "systemd-socket-activate did not listen:\n{log}");
        Err(PortTaken)
    }

    /// What the launcher and the daemon wrote to stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM (to the daemon, which the launcher exec'd into), then its exit
    /// status; panics if it has not stopped within 15 s.
    pub fn terminate(mut self) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let mut status = None;
        eventually(Duration::from_secs(15), || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap_or_else(|| panic!("still running 15 s after SIGTERM:\n{}", self.log()))
    }
}

impl Drop for SocketActivated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The resident set size of a process, in bytes (`VmRSS` in /proc).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The RSS of `pid` sampled every 50 ms for `window`.
fn rss_samples(pid: u32, window: Duration) -> Vec<u64> {
    let deadline = Instant::now() + window;
    let mut samples = Vec::new();
    while Instant::now() < deadline {
        samples.push(rss_bytes(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    samples
}

/// The highest RSS of `pid` seen while sampling it every 50 ms for `window`.
pub fn peak_rss(pid: u32, window: Duration) -> u64 {
    rss_samples(pid, window).into_iter().max().unwrap_or(0)
}

/// The lowest RSS of `pid` over `window`: what it holds once the moment's
/// buffers are gone, where [`peak_rss`] includes them.
pub fn settled_rss(pid: u32, window: Duration) -> u64 {
    rss_samples(pid, window).into_iter().min().unwrap_or(u64::MAX)
}

/// How much `pid` grew, in MiB, at its peak over `window` from `before` bytes;
/// prints the figures with `what` (the reading a test's closing note quotes).
pub fn rss_growth_mib(pid: u32, before: u64, window: Duration, what: &str) -> u64 {
    const MIB: u64 = 1024 * 1024;
    let peak = peak_rss(pid, window);
    let grown = peak.saturating_sub(before) / MIB;
    eprintln!("RSS: {} MiB before, {} MiB peak (+{grown} MiB) for {what}", before / MIB, peak / MIB);
    grown
}

/// An MCP client from the official Python SDK (`tests/mcp/driver.py`), driven
/// one JSON command per line. `None` (after a skip line) when python3 or the
/// `mcp` package is missing; under `CI=true` that is a failure instead.
pub struct McpClient {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl McpClient {
    pub fn start() -> Option<McpClient> {
        if !require_tool("python3") {
            return None;
        }
        let has_sdk = Command::new("python3")
            .args(["-c", "import mcp, mcp_types"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_sdk {
            skip("the MCP Python SDK is not installed", "`pip install mcp==2.3.0`");
            return None;
        }
        let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/driver.py");
        let mut child = Command::new("python3")
            .arg(driver)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Some(McpClient { child, stdin, stdout })
    }

    /// Sends one command and returns the driver's answer (`{"ok": ...}` or
    /// `{"error": ...}`).
    pub fn send(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("the MCP driver reads commands");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("the MCP driver answers");
        assert!(!line.is_empty(), "the MCP driver exited while answering {command}");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("driver answer {line:?}: {e}"))
    }

    /// Sends one command that must succeed; returns its result.
    pub fn ok(&mut self, command: Value) -> Value {
        let answer = self.send(command.clone());
        match answer.get("ok") {
            Some(result) => result.clone(),
            None => panic!("{command} failed: {answer}"),
        }
    }

    /// Starts an MCP server command (`[program, args...]`) over stdio with extra
    /// environment, in `mode` (`auto`: the SDK probes `server/discover`;
    /// `legacy`: the `initialize` handshake). Returns the negotiated session info.
    pub fn open_stdio(&mut self, command: &[&str], env: &[(&str, &str)], mode: &str, listen: Value) -> Value {
        let env: serde_json::Map<String, Value> =
            env.iter().map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned()))).collect();
        let mut env = env;
        // The SDK passes only a default environment to the server; PATH and HOME
        // matter to the daemons' client commands.
        for key in ["PATH", "HOME", "XDG_RUNTIME_DIR"] {
            if let Ok(value) = std::env::var(key) {
                env.entry(key.to_owned()).or_insert(Value::String(value));
            }
        }
        self.ok(serde_json::json!({
            "op": "open",
            "server": {"command": command[0], "args": &command[1..], "env": env},
            "mode": mode,
            "listen": listen,
        }))
    }

    /// The next change notification within `timeout`, or `None`.
    pub fn next_change(&mut self, timeout: Duration) -> Option<Value> {
        let change = self.ok(serde_json::json!({"op": "next_change", "timeout": timeout.as_secs_f64()}));
        (!change["change"].is_null()).then_some(change)
    }

    /// The text of a tool result's first content block.
    pub fn text(result: &Value) -> &str {
        result["content"][0]["text"].as_str().unwrap_or_default()
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", serde_json::json!({"op": "close"}));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the official MCP Inspector's CLI (`npm ci --prefix tests/mcp`)
/// headless with `args` (e.g. `[server command..., "--method", "tools/list"]`)
/// and returns its JSON output. `None` (after a skip line) when it is not
/// installed; under `CI=true` that is a failure instead.
pub fn mcp_inspector(args: &[&str]) -> Option<Value> {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/node_modules/.bin/mcp-inspector");
    if !cli.exists() {
        skip("the MCP Inspector is not installed", "`npm ci --prefix tests/mcp`");
        return None;
    }
    let output = Command::new(cli).arg("--cli").args(args).stdin(Stdio::null()).output().expect("the inspector runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "mcp-inspector {args:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("mcp-inspector printed {stdout:?}: {e}")))
}

/// A real `nats-server` with JetStream for the broker's cluster tests, on a
/// free port with its store in a temporary directory; killed when dropped.
/// `NATS_SERVER` names another binary (a newer release) than the one on PATH.
pub struct NatsServer {
    child: Option<Child>,
    pub port: u16,
    /// The port it listens on for its cluster's routes, if it is in one.
    route: Option<u16>,
    args: Vec<String>,
    _store: tempfile::TempDir,
}

impl NatsServer {
    /// The binary the tests run (check it with [`require_tool`]).
    pub fn binary() -> String {
        std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into())
    }

    /// One server, alone.
    pub fn start() -> NatsServer {
        on_free_ports(|[port]| Self::start_with(port, None, &[]))
    }

    /// Servers joined in one NATS cluster by routes, each with JetStream and
    /// the server name and cluster name JetStream clustering asks for. All
    /// are started again on other ports if another process had one of them.
    pub fn start_cluster(count: usize) -> Vec<NatsServer> {
        on_free_port_list(2 * count, |ports| {
            let (route_ports, client_ports) = ports.split_at(count);
            let routes: Vec<String> = route_ports.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect();
            let routes = routes.join(",");
            // The first server that lost a port ends the collection, and
            // those started before it are dropped (killed).
            (0..count)
                .map(|i| {
                    let name = format!("n{i}");
                    let listen = format!("nats://127.0.0.1:{}", route_ports[i]);
                    let extra = ["-n", &name, "--cluster_name", "btcp-test", "--cluster", &listen, "--routes", &routes];
                    Self::start_with(client_ports[i], Some(route_ports[i]), &extra)
                })
                .collect()
        })
    }

    fn start_with(port: u16, route: Option<u16>, extra: &[&str]) -> Result<NatsServer, PortTaken> {
        let store = tempfile::tempdir().unwrap();
        let mut args: Vec<String> =
            ["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd", &store.path().display().to_string()]
                .iter()
                .map(|s| s.to_string())
                .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = NatsServer { child: None, port, route, args, _store: store };
        server.spawn()?;
        Ok(server)
    }

    /// Starts the server and waits until it listens on its port itself;
    /// [`PortTaken`] if it exited while another process had the port (or
    /// its route port).
    fn spawn(&mut self) -> Result<(), PortTaken> {
        let child = Command::new(Self::binary())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", Self::binary()));
        match ports::wait_listening(self.child.insert(child), self.port, Duration::from_secs(10)) {
            Wait::Listening => Ok(()),
            Wait::Exited { taken, .. } if taken || self.route.is_some_and(ports::anyone_listens_on) => Err(PortTaken),
            other => panic!("nats-server did not listen on 127.0.0.1:{}: {other:?}", self.port),
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its JetStream store stays for [`NatsServer::restart`]).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port with the same store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn().unwrap_or_else(|PortTaken| panic!("another process took port {} while it was down", self.port));
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster member whose route port another process has is told apart
    /// (for [`NatsServer::start_cluster`] to choose all ports again), as one
    /// whose client port is taken is.
    #[test]
    fn a_nats_server_whose_route_port_is_taken_is_told_apart() {
        if !require_tool(&NatsServer::binary()) {
            return;
        }
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let route = taken.local_addr().unwrap().port();
        let listen = format!("nats://127.0.0.1:{route}");
        let extra = ["-n", "n0", "--cluster_name", "btcp-test", "--cluster", &listen];
        let client = HeldPort::new().release();
        assert!(NatsServer::start_with(client, Some(route), &extra).is_err(), "route port {route} is taken");
    }
}
