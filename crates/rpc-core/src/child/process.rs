//! The running child: [`ChildProcess`] (its exit, seen at once, and its
//! group, stopped and killed as one) and [`Exit`].

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{mpsc, watch};

use super::stderr::LineRing;

/// How a child ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// Its status could not be read (the wait failed, or the runtime that
    /// watched it shut down).
    Unknown(String),
}

impl Exit {
    fn from_wait(status: io::Result<std::process::ExitStatus>) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match status {
            Ok(status) => match (status.code(), status.signal()) {
                (Some(code), _) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal(signal),
                _ => Exit::Unknown(status.to_string()),
            },
            Err(e) => Exit::Unknown(format!("could not be waited for: {e}")),
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit status {code}"),
            Exit::Signal(signal) => match Signal::try_from(*signal) {
                Ok(name) => write!(f, "killed by {name}"),
                Err(_) => write!(f, "killed by signal {signal}"),
            },
            Exit::Unknown(why) => f.write_str(why),
        }
    }
}

/// A started child and its process group. Dropping it kills the group.
#[derive(Debug)]
pub struct ChildProcess {
    pub(super) name: String,
    pub(super) pid: u32,
    pub(super) stdin: Option<ChildStdin>,
    pub(super) stdout: Option<ChildStdout>,
    pub(super) stderr: Option<LineRing>,
    /// Signals for the watcher to send to the group; closing it kills the group.
    pub(super) signals: mpsc::UnboundedSender<Signal>,
    pub(super) exit: watch::Receiver<Option<Exit>>,
    /// `exit` is set: one load for [`ChildProcess::has_exited`], which health
    /// checks call on every ping, where the watch takes a lock.
    pub(super) reaped: Arc<AtomicBool>,
}

impl ChildProcess {
    /// The program's pid, which is also its process group's id; on a
    /// terminal (see the module doc), the group's id, which is the pid of
    /// the leader that started its session.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The write end of the child's stdin, if it was piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    /// The read end of the child's stdout, if it was piped and not taken yet.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// The last lines of stderr, if it goes to a ring.
    pub fn stderr_lines(&self) -> Option<&LineRing> {
        self.stderr.as_ref()
    }

    /// Resolves once the child has ended and been reaped, with how it ended.
    /// This comes from waiting on the process, not from its pipes, so a
    /// grandchild that keeps them open does not delay it. The future owns
    /// what it needs: move it into a task to act on the exit.
    pub fn exited(&self) -> impl Future<Output = Exit> + Send + 'static {
        let mut exit = self.exit.clone();
        async move {
            match exit.wait_for(Option::is_some).await {
                Ok(exit) => exit.clone().unwrap_or_else(|| Exit::Unknown("exited".into())),
                Err(_) => Exit::Unknown("the runtime watching it shut down".into()),
            }
        }
    }

    /// Whether the child has ended and been reaped.
    pub fn has_exited(&self) -> bool {
        self.reaped.load(Ordering::Acquire)
    }

    /// Kills the program, its group and every descendant that left the
    /// group, at once. Does nothing once it has exited.
    /// A program that was just exiting on its own may then be reported
    /// `killed by SIGKILL`: on Linux the kill can reach the leader before it
    /// has passed the program's own status on.
    pub fn kill(&self) {
        let _ = self.signals.send(Signal::SIGKILL);
    }

    /// Stops the whole group: SIGTERM, then SIGKILL if the child has not
    /// exited after `grace`. Returns how it ended.
    pub async fn stop(&self, grace: Duration) -> Exit {
        let exited = self.exited();
        tokio::pin!(exited);
        let _ = self.signals.send(Signal::SIGTERM);
        if let Ok(exit) = tokio::time::timeout(grace, &mut exited).await {
            return exit;
        }
        tracing::debug!(child = %self.name, pid = self.pid, ?grace, "child ignored SIGTERM; killing its group");
        self.kill();
        exited.await
    }
}

/// Reaps the child, signalling its group when asked; then kills whatever is
/// left of the group and publishes the exit. Only this task signals the
/// group, and only until the reap completes, so a signal can never reach a
/// recycled group id: an unreaped leader keeps its pid (and so the group id)
/// reserved, and after the reap any surviving member still does.
///
/// `killer` is an argument, not a local, so that it is dropped (and kills the
/// group) even if the task is dropped before it was ever polled: a runtime
/// shutting down drops its tasks, and a dropped `Child` is not killed.
pub(super) async fn watch_child(
    mut child: Child,
    killer: KillGroupOnDrop,
    name: String,
    mut requests: mpsc::UnboundedReceiver<Signal>,
    (exit, reaped): (watch::Sender<Option<Exit>>, Arc<AtomicBool>),
) {
    let group = killer.0;
    let leader = child.id();
    // Set when a kill is asked for: the group's SIGKILL if the leader has not
    // ended everything by then. Until then, and after it fired, far away.
    let far = || tokio::time::Instant::now() + Duration::from_secs(365 * 86_400);
    let mut backstop = std::pin::pin!(tokio::time::sleep_until(far()));
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = &mut backstop => {
                let _ = killpg(group, Signal::SIGKILL);
                backstop.as_mut().reset(far());
            }
            request = requests.recv() => match request {
                Some(Signal::SIGKILL) => {
                    end_now(leader, group);
                    backstop.as_mut().reset(tokio::time::Instant::now() + KILL_BACKSTOP);
                }
                Some(signal) => {
                    let _ = killpg(group, signal);
                }
                // The ChildProcess was dropped.
                None => {
                    end_now(leader, group);
                    match tokio::time::timeout(KILL_BACKSTOP, child.wait()).await {
                        Ok(status) => break status,
                        Err(_) => {
                            let _ = killpg(group, Signal::SIGKILL);
                            break child.wait().await;
                        }
                    }
                }
            },
        }
    };
    // What the program started belongs to it and goes with it.
    drop(killer);
    let status = Exit::from_wait(status);
    tracing::debug!(child = %name, pid = group.as_raw(), %status, "child process exited");
    reaped.store(true, Ordering::Release);
    exit.send_replace(Some(status));
}

/// How long the leader has to end everything after a kill request before
/// the group is SIGKILLed from here (the leader with it).
const KILL_BACKSTOP: Duration = Duration::from_secs(2);

/// Has the program and everything it started killed at once. On Linux the
/// leader does it (see `leader::END_NOW`): SIGKILLing the group from here
/// would kill the leader too, and a descendant that left the group would
/// then be handed to init instead of to it. Elsewhere, the group.
fn end_now(leader: Option<u32>, group: Pid) {
    #[cfg(target_os = "linux")]
    if let Some(leader) = leader.and_then(|pid| i32::try_from(pid).ok())
        && nix::sys::signal::kill(Pid::from_raw(leader), super::leader::END_NOW).is_ok()
    {
        return;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = leader;
    let _ = killpg(group, Signal::SIGKILL);
}

/// SIGKILLs the group when dropped.
pub(super) struct KillGroupOnDrop(pub(super) Pid);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if self.0.as_raw() > 0 {
            let _ = killpg(self.0, Signal::SIGKILL);
        }
    }
}
