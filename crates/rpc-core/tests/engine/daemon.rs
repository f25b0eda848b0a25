//! The start-up path in a real process: a daemon serving on a Unix socket
//! through `Daemon`, stopped by signals. The test binary re-executes itself
//! as that daemon (`daemon_child`, with `RPC_CORE_DAEMON_CHILD` set).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rpc_core::Router;
use rpc_core::daemon::Daemon;
use rpc_core::listen::NdjsonLimits;
use rpc_core::shutdown::Stopped;

const CHILD_ENV: &str = "RPC_CORE_DAEMON_CHILD";

/// The daemon, when this binary runs as the child of a test below: serves
/// `sleep [ms]` on the Unix socket named by `RPC_CORE_DAEMON_CHILD` and exits
/// with the code its stop asks for, after `run` returned.
#[test]
fn daemon_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let stopped = runtime.block_on(async {
        let mut daemon = Daemon::start("test-daemon", Duration::from_secs(10)).unwrap();
        let listener = daemon.listen_unix(None, Path::new(&path), "TEST_SOCKET").unwrap();
        let router = Router::<()>::new()
            .method("sleep", |_, ms: [u64; 1]| async move {
                tokio::time::sleep(Duration::from_millis(ms[0])).await;
                Ok(ms[0])
            })
            .build()
            .unwrap();
        daemon.serve_ndjson(listener, "test", NdjsonLimits::default(), router, || ());
        daemon.run().await
    });
    drop(runtime);
    std::process::exit(match stopped {
        Stopped::Clean => 0,
        Stopped::Forced => 1,
    });
}

struct Served {
    child: Child,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start() -> Served {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/daemon.sock");
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "daemon::daemon_child", "--nocapture"])
            .env(CHILD_ENV, &path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Served { child, path, _dir: dir }
    }

    fn connect(&self) -> UnixStream {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(stream) = UnixStream::connect(&self.path) {
                stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return stream;
            }
            assert!(Instant::now() < deadline, "the daemon never listened on {}", self.path.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the daemon did not exit within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `sleep [ms]` and waits until the daemon has surely started it.
fn hold_a_request(stream: &mut UnixStream, ms: u64) {
    stream
        .write_all(format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"sleep\",\"params\":[{ms}]}}\n").as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn one_sigterm_lets_the_request_finish_exits_0_and_removes_the_socket_file() {
    let mut daemon = Served::start();
    let mut stream = daemon.connect();
    hold_a_request(&mut stream, 500);
    daemon.signal(Signal::SIGTERM);
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).unwrap();
    assert_eq!(reply.trim(), r#"{"jsonrpc":"2.0","id":1,"result":500}"#);
    let status = daemon.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(!daemon.path.exists(), "the socket file is left behind");
}

#[test]
fn a_second_sigterm_stops_at_once_with_exit_1_and_still_removes_the_socket_file() {
    let mut daemon = Served::start();
    let mut stream = daemon.connect();
    // Far longer than the test waits: only a forced stop ends it in time.
    hold_a_request(&mut stream, 60_000);
    daemon.signal(Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(50));
    let forced_at = Instant::now();
    daemon.signal(Signal::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(1), "{status}");
    assert!(forced_at.elapsed() < Duration::from_secs(2), "took {:?} after the second signal", forced_at.elapsed());
    assert!(!daemon.path.exists(), "the socket file is left behind");
}
