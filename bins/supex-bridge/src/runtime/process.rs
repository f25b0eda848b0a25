//! One Ruby process running the driver: spawning it with its three pipes,
//! routing its replies to the calls waiting for them, and killing it.
//!
//! Pipes: requests go to the child's stdin; replies come back on fd 3 (a pipe
//! of their own); stdout and stderr share one pipe that feeds the console log.
//! The child leads a process group of its own, so that a timeout or a reset
//! also kills whatever it started (`system("sleep 100")`), and a Ctrl-C meant
//! for the daemon in a terminal does not reach it directly.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rpc_core::Frame;
use rpc_core::codec::NdjsonCodec;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{oneshot, watch};
use tokio_util::codec::FramedRead;

use super::console::ConsoleLog;
use super::protocol::{DRIVER_SOURCE, PROTOCOL_VERSION, Ready, Reply, Request};

/// Longest reply line read from the driver. It caps `value` at 4 MiB and
/// `output` at 1 MiB, so this leaves room for escaping.
const REPLY_LIMIT: usize = 64 * 1024 * 1024;

/// How the process ended, in words (`exit status: 1`, `signal: 9 (SIGKILL)`).
#[derive(Clone, Debug, PartialEq)]
pub struct Exited(pub String);

impl fmt::Display for Exited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Facts about a running process, for `runtime_info`.
#[derive(Clone, Debug)]
pub struct ProcessInfo {
    pub pid: u32,
    pub started_at: SystemTime,
    pub ruby_version: String,
    pub ruby_description: String,
}

/// Why the daemon killed a process (a process that died without one crashed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    Timeout,
    Reset,
    Shutdown,
}

type Replies = FramedRead<tokio::net::unix::pipe::Receiver, NdjsonCodec>;

/// A live (or just-exited) Ruby process. Dropping it kills the process.
pub struct RubyProcess {
    pub info: ProcessInfo,
    link: Arc<Link>,
    /// The reply pipe. There is no reader task: whoever waits for a reply
    /// takes this lock and reads, handing other callers' replies to them, so
    /// a reply reaches the task waiting for it without a hop through another.
    replies: tokio::sync::Mutex<Replies>,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    kill_reason: Mutex<Option<KillReason>>,
    exit: watch::Receiver<Option<Exited>>,
}

/// A request that was sent; [`RubyProcess::wait`] gets its reply.
pub struct PendingReply {
    rx: oneshot::Receiver<Result<Reply, Exited>>,
}

/// What the reader and watcher tasks share with callers.
struct Link {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Mutex<Pending>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Pending {
    calls: HashMap<u64, oneshot::Sender<Result<Reply, Exited>>>,
    exited: Option<Exited>,
}

impl Link {
    fn fail_all(&self, exited: &Exited) {
        let calls = {
            let mut pending = self.pending.lock().unwrap();
            pending.exited = Some(exited.clone());
            std::mem::take(&mut pending.calls)
        };
        for (_, tx) in calls {
            let _ = tx.send(Err(exited.clone()));
        }
    }

    /// Hands a reply line to the call waiting for it.
    fn dispatch(&self, line: &[u8], pid: u32) {
        let reply: Reply = match serde_json::from_slice(line) {
            Ok(reply) => reply,
            Err(e) => {
                tracing::warn!(pid, error = %e, "unreadable reply from the runtime");
                return;
            }
        };
        let Some(id) = reply.id else {
            tracing::warn!(pid, error = ?reply.error, "the runtime could not read a request");
            return;
        };
        let waiter = self.pending.lock().unwrap().calls.remove(&id);
        match waiter {
            Some(tx) => {
                let _ = tx.send(Ok(reply));
            }
            // Its caller gave up (a client that disconnected).
            None => tracing::debug!(pid, id, "reply to no waiting call"),
        }
    }
}

/// Starting the interpreter failed; the text says what to do about it.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

impl RubyProcess {
    /// Starts `command -e <driver>` and waits (at most `startup`) for the
    /// driver's ready line.
    pub async fn spawn(
        command: &[String],
        console: &Arc<ConsoleLog>,
        startup: Duration,
    ) -> Result<RubyProcess, StartError> {
        let shown = command.join(" ");
        let io_error = |what: &str, e: io::Error| StartError(format!("{what}: {e}"));
        let (reply_read, reply_write) = pipe().map_err(|e| io_error("creating the reply pipe", e))?;
        let (console_read, console_write) = pipe().map_err(|e| io_error("creating the console pipe", e))?;
        let console_write_2 = console_write.try_clone().map_err(|e| io_error("creating the console pipe", e))?;

        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .arg("-e")
            .arg(DRIVER_SOURCE)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(console_write))
            .stderr(Stdio::from(console_write_2))
            .process_group(0)
            .kill_on_drop(true);
        set_up_child(&mut cmd, reply_write.as_raw_fd());
        let console_seq = console.seq();
        console.mark(&format!("starting {shown}"));
        let spawned = cmd.spawn();
        // The child has its copies now; ours must go, or EOF never comes.
        drop(cmd);
        drop(reply_write);
        let mut child = spawned.map_err(|e| StartError(spawn_failure(&command[0], &e)))?;
        let pid = child.id().unwrap_or_default();

        let (console_done_tx, console_done) = oneshot::channel();
        let drain_console = console.clone();
        let console_pipe = std::fs::File::from(console_read);
        std::thread::Builder::new()
            .name(format!("ruby-console-{pid}"))
            .spawn(move || {
                drain_console.drain(console_pipe);
                let _ = console_done_tx.send(());
            })
            .map_err(|e| io_error("starting the console reader", e))?;

        let link = Arc::new(Link {
            stdin: tokio::sync::Mutex::new(child.stdin.take()),
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
        });
        let (kill_tx, kill_rx) = oneshot::channel();
        let (exit_tx, mut exit) = watch::channel(None);
        tokio::spawn(watch_child(child, pid, kill_rx, exit_tx, link.clone()));

        let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(reply_read)
            .map_err(|e| io_error("reading the reply pipe", e))?;
        let mut replies = FramedRead::new(receiver, NdjsonCodec::new(REPLY_LIMIT));

        let first = tokio::select! {
            frame = replies.next() => frame,
            _ = exit.wait_for(Option::is_some) => None,
            _ = tokio::time::sleep(startup) => {
                let _ = kill_tx.send(());
                return Err(StartError(format!(
                    "`{shown}` did not start the driver within {startup:?}"
                )));
            }
        };
        let ready = match first {
            Some(Ok(Frame::Message(line))) => serde_json::from_slice::<Ready>(&line).ok(),
            _ => None,
        };
        let Some(ready) = ready.filter(|r| r.ready && r.protocol == PROTOCOL_VERSION) else {
            let _ = kill_tx.send(());
            let status = exit.wait_for(Option::is_some).await.ok().and_then(|s| s.clone());
            let _ = tokio::time::timeout(Duration::from_secs(1), console_done).await;
            let said: Vec<String> = console
                .since(console_seq)
                .into_iter()
                .filter(|l| !l.starts_with("-- supex-bridge:"))
                .take(10)
                .collect();
            return Err(StartError(format!(
                "`{shown}` did not start the Ruby driver ({}){}",
                status.map_or_else(|| "it sent something else first".to_owned(), |s| s.0),
                if said.is_empty() { String::new() } else { format!("; it printed: {}", said.join(" | ")) }
            )));
        };

        console.mark(&format!("runtime started: pid {pid}, {}", ready.ruby_description));
        Ok(RubyProcess {
            info: ProcessInfo {
                pid: ready.pid,
                started_at: SystemTime::now(),
                ruby_version: ready.ruby_version,
                ruby_description: ready.ruby_description,
            },
            link,
            replies: tokio::sync::Mutex::new(replies),
            kill: Mutex::new(Some(kill_tx)),
            kill_reason: Mutex::new(None),
            exit,
        })
    }

    /// Sends a request. If the process is gone, the reply is already the
    /// error saying how it ended.
    pub async fn request<'a>(&self, request: impl FnOnce(u64) -> Request<'a>) -> PendingReply {
        let id = self.link.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.link.pending.lock().unwrap();
            if let Some(exited) = &pending.exited {
                let _ = tx.send(Err(exited.clone()));
                return PendingReply { rx };
            }
            pending.calls.insert(id, tx);
        }
        let mut line = serde_json::to_vec(&request(id)).expect("requests always serialise");
        line.push(b'\n');
        let mut stdin = self.link.stdin.lock().await;
        let written = match stdin.as_mut() {
            Some(pipe) => pipe.write_all(&line).await,
            None => Err(io::ErrorKind::BrokenPipe.into()),
        };
        if let Err(e) = written {
            // The process is going away; its watcher fails the call once it is reaped.
            tracing::debug!(pid = self.info.pid, error = %e, "writing to the runtime failed");
        }
        PendingReply { rx }
    }

    /// Waits for the reply to `pending`, reading the reply pipe while nobody
    /// else does. Cancel-safe: the pipe's buffered bytes stay in the reader.
    pub async fn wait(&self, pending: &mut PendingReply) -> Result<Reply, Exited> {
        let pid = self.info.pid;
        let settled = 'wait: {
            tokio::select! {
                biased;
                reply = &mut pending.rx => break 'wait reply,
                mut replies = self.replies.lock() => loop {
                    tokio::select! {
                        biased;
                        reply = &mut pending.rx => break 'wait reply,
                        frame = replies.next() => match frame {
                            Some(Ok(Frame::Message(line))) => self.link.dispatch(&line, pid),
                            Some(Ok(other)) => tracing::warn!(pid, ?other, "unusable reply from the runtime"),
                            // The pipe closed: the process is gone, and its
                            // watcher fails every waiting call once it is reaped.
                            Some(Err(_)) | None => {
                                drop(replies);
                                break 'wait (&mut pending.rx).await;
                            }
                        },
                    }
                },
            }
        };
        match settled {
            Ok(reply) => reply,
            Err(_) => Err(self.exited().await),
        }
    }

    /// Sends a request and waits for its reply, or for the process to end.
    pub async fn call<'a>(&self, request: impl FnOnce(u64) -> Request<'a>) -> Result<Reply, Exited> {
        let mut pending = self.request(request).await;
        self.wait(&mut pending).await
    }

    /// Kills the process group at once (SIGKILL), remembering why.
    pub fn kill(&self, reason: KillReason) {
        self.kill_reason.lock().unwrap().get_or_insert(reason);
        if let Some(kill) = self.kill.lock().unwrap().take() {
            let _ = kill.send(());
        }
    }

    /// Why the daemon killed the process, if it did.
    pub fn kill_reason(&self) -> Option<KillReason> {
        *self.kill_reason.lock().unwrap()
    }

    /// Closes the request pipe: the driver's reader sees EOF and exits.
    pub async fn close_stdin(&self) {
        self.link.stdin.lock().await.take();
    }

    /// Waits until the process has ended and been reaped.
    pub async fn exited(&self) -> Exited {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(status) => status.clone().unwrap_or_else(|| Exited("exited".into())),
            Err(_) => Exited("exited".into()),
        }
    }

    pub fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }
}

impl Drop for RubyProcess {
    fn drop(&mut self) {
        self.kill(KillReason::Shutdown);
    }
}

/// Reaps the child, killing its group first when asked (or when the
/// [`RubyProcess`] is dropped), then whatever of the group is left, and fails
/// the calls still waiting.
async fn watch_child(
    mut child: Child,
    pid: u32,
    kill: oneshot::Receiver<()>,
    exit: watch::Sender<Option<Exited>>,
    link: Arc<Link>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        _ = kill => {
            kill_group(pid);
            child.wait().await
        }
    };
    // Background processes the code started die with the runtime: they belong
    // to its state, which is gone.
    kill_group(pid);
    let exited = Exited(match status {
        Ok(status) => describe(status),
        Err(e) => format!("could not be waited for: {e}"),
    });
    link.fail_all(&exited);
    let _ = exit.send(Some(exited));
}

fn kill_group(pid: u32) {
    // The group keeps the leader's pid as its id while any member lives, so
    // this cannot reach an unrelated process even after the leader was reaped.
    if let Ok(pid) = i32::try_from(pid)
        && pid > 0
    {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(name) => format!("killed by {name}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        _ => status.to_string(),
    }
}

/// A pipe whose ends are closed on exec: only what is dup'ed onto the
/// child's fds 0-3 reaches it.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(target_os = "linux")]
    {
        Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        // macOS has no pipe2. The window between pipe() and fcntl() only
        // matters to a fork in another thread, and the daemon forks only here.
        use nix::fcntl::{FcntlArg, FdFlag, fcntl};
        let (read, write) = nix::unistd::pipe()?;
        for end in [&read, &write] {
            fcntl(end, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        }
        Ok((read, write))
    }
}

fn spawn_failure(program: &str, error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => format!(
            "Ruby is not available: `{program}` was not found. Install Ruby \
             (Debian/Ubuntu: sudo apt install ruby; macOS: brew install ruby) or point \
             SUPEX_RUBY at an interpreter; the next call uses it, no restart needed"
        ),
        io::ErrorKind::PermissionDenied => {
            format!("Ruby is not available: `{program}` is not executable; check SUPEX_RUBY")
        }
        _ => {
            format!("Ruby is not available: starting `{program}` failed: {error}; check SUPEX_RUBY")
        }
    }
}

/// Runs in the child between fork and exec: puts the reply pipe on fd 3 and,
/// on Linux, asks the kernel to SIGKILL the child if the daemon dies.
#[allow(unsafe_code)]
fn set_up_child(cmd: &mut Command, reply_fd: i32) {
    #[cfg(target_os = "linux")]
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe operations are allowed. It makes nothing but direct
    // system calls (dup2, fcntl, prctl, getppid) through nix's thin wrappers:
    // no allocation, no locks, no panics on the success path, and errors are
    // returned as io::Error values made from an errno (no allocation either).
    // `reply_fd` is the write end of a pipe we own and keep open until
    // `spawn` returns, so it is valid in the child. It is at least 3 because
    // Rust's runtime keeps fds 0-2 open; if it is exactly 3 dup2 would be a
    // no-op that leaves close-on-exec set, so the flag is cleared instead.
    unsafe {
        cmd.pre_exec(move || {
            use nix::fcntl::{FcntlArg, FdFlag, fcntl};
            use std::os::fd::{BorrowedFd, IntoRawFd};
            const REPLY_FD: i32 = 3;
            let source = BorrowedFd::borrow_raw(reply_fd);
            if reply_fd == REPLY_FD {
                fcntl(source, FcntlArg::F_SETFD(FdFlag::empty()))?;
            } else {
                // dup2 clears close-on-exec on the new descriptor; the OwnedFd it
                // returns is turned back into a raw fd so nothing closes it.
                let _ = nix::unistd::dup2_raw(source, REPLY_FD)?.into_raw_fd();
            }
            #[cfg(target_os = "linux")]
            {
                // The death signal follows the *thread* that forked. Ruby is
                // spawned from tasks on the daemon's single runtime thread,
                // which lives as long as the daemon does (never from the
                // blocking pool, whose threads retire when idle).
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                // The daemon may have died before the line above: then nobody
                // would ever send the signal.
                if nix::unistd::getppid() != parent {
                    return Err(nix::errno::Errno::ESRCH.into());
                }
            }
            Ok(())
        });
    }
}
