//! The processes the suite starts (daemons, baselines, B6's echo and
//! extension): where their binaries are, starting them pinned, waiting for
//! their ports, and stopping them when they go out of scope.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::pin;

/// A process started for the suite; stopped (SIGTERM, so it can stop its own
/// children) when dropped.
pub(crate) struct Daemon {
    child: Child,
}

impl Daemon {
    pub(crate) fn spawn(command: &mut Command, cpu: Option<usize>) -> Result<Daemon> {
        let program = command.get_program().to_owned();
        let child = pin::spawn_on(command, cpu).with_context(|| format!("starting {}", program.display()))?;
        Ok(Daemon { child })
    }

    /// Its process id, to read its memory from /proc.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Kills it at once (SIGKILL: no goodbye to anyone) and reaps it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its stdin and stdout, if they were piped, to wire to another process.
    pub(crate) fn pipes(&mut self) -> Option<(Stdio, Stdio)> {
        Some((self.child.stdin.take()?.into(), self.child.stdout.take()?.into()))
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        if self.wait_exit(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A port nobody listens on now, for a server about to start.
pub(crate) fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// A binary of the suite's own directory (the release build).
pub(crate) fn sibling(bin: &str) -> Result<PathBuf> {
    let dir = std::env::current_exe()?.parent().context("binary directory")?.to_owned();
    let path = dir.join(bin);
    if !path.exists() {
        bail!("{} is not built (run `cargo build --release --workspace --bins`)", path.display());
    }
    Ok(path)
}

/// Starts a binary from the suite's own directory, pinned to `cpu`.
pub(crate) fn start_on(bin: &str, env: &[(&str, String)], args: &[&str], cpu: Option<usize>) -> Result<Daemon> {
    let mut cmd = Command::new(sibling(bin)?);
    cmd.args(args).env("RUST_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Daemon::spawn(&mut cmd, cpu)
}

/// Waits (up to 20 s) until something accepts connections on `addr`.
pub(crate) fn wait_for(addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listening on {addr} after 20 s")
}
