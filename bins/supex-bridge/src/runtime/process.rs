//! One Ruby process running the driver: starting it with its three pipes,
//! routing its replies to the calls waiting for them, and killing it.
//!
//! Pipes: requests go to the child's stdin; replies come back on fd 3 (a pipe
//! of their own); stdout and stderr share one pipe that feeds the console log.
//! The process itself is an `rpc_core::child` process: it leads a process group
//! of its own, so that a timeout or a reset also kills whatever it started
//! (`system("sleep 100")`), a Ctrl-C meant for the daemon in a terminal does
//! not reach it directly, and nothing it started outlives the daemon, even a
//! SIGKILLed one.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use rpc_core::Frame;
use rpc_core::child::{ChildCommand, ChildProcess, ChildStdin, Exit, Stderr, Stdin, Stdout};
use rpc_core::codec::NdjsonCodec;
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;

use super::console::ConsoleLog;
use super::protocol::{DRIVER_SOURCE, PROTOCOL_VERSION, Ready, Reply, Request};

/// Longest reply line read from the driver. It caps `value` at 4 MiB and
/// `output` and an exception's message at 1 MiB, so this leaves room for
/// escaping; a longer line is dropped and fails its evaluation
/// ([`NoReply::Unusable`]).
const REPLY_LIMIT: usize = 64 * 1024 * 1024;

/// The driver writes its replies to this descriptor.
const REPLY_FD: i32 = 3;

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

/// A live (or just-exited) Ruby process. Dropping it kills its process group.
pub struct RubyProcess {
    pub info: ProcessInfo,
    /// When it started, for telling a crash loop from a crash after a long life.
    pub started: Instant,
    link: Arc<Link>,
    /// The reply pipe. There is no reader task: whoever waits for a reply
    /// takes this lock and reads, handing other callers' replies to them, so
    /// a reply reaches the task waiting for it without a hop through another.
    replies: tokio::sync::Mutex<Replies>,
    child: ChildProcess,
    kill_reason: Mutex<Option<KillReason>>,
}

/// A request that was sent; [`RubyProcess::wait`] gets its reply.
pub struct PendingReply {
    rx: oneshot::Receiver<Result<Reply, NoReply>>,
}

/// Why a call got no reply.
#[derive(Clone, Debug)]
pub enum NoReply {
    /// The process ended, and how.
    Exited(Exit),
    /// Its reply came but could not be read (longer than [`REPLY_LIMIT`], or
    /// not JSON) and was dropped; the process goes on, its state intact.
    Unusable(String),
}

/// What callers share with each other and with the task that fails their
/// calls when the process ends.
struct Link {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Mutex<Pending>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct Pending {
    calls: HashMap<u64, oneshot::Sender<Result<Reply, NoReply>>>,
    exited: Option<Exit>,
    /// The evaluation sent and not answered (they run one at a time): the
    /// call an unusable reply is failed for, since only an evaluation's
    /// reply can be large and its id cannot be read from a dropped line.
    evaluating: Option<u64>,
}

impl Link {
    /// Takes the child's stdin; calls still waiting when the process ends
    /// fail with how it ended.
    fn start(child: &mut ChildProcess) -> Arc<Link> {
        let link = Arc::new(Link {
            stdin: tokio::sync::Mutex::new(child.take_stdin()),
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
        });
        let exited = child.exited();
        let failing = link.clone();
        tokio::spawn(async move { failing.fail_all(&exited.await) });
        link
    }

    fn fail_all(&self, exited: &Exit) {
        let calls = {
            let mut pending = self.pending.lock();
            pending.exited = Some(exited.clone());
            std::mem::take(&mut pending.calls)
        };
        for (_, tx) in calls {
            let _ = tx.send(Err(NoReply::Exited(exited.clone())));
        }
    }

    /// A reply line could not be used: the evaluation waiting fails now,
    /// rather than at its timeout (which would kill the runtime for it).
    /// The pipe is in step again at the next line, so the process goes on.
    fn fail_evaluation(&self, pid: u32, why: String) {
        let waiter = {
            let mut pending = self.pending.lock();
            pending.evaluating.take().and_then(|id| pending.calls.remove(&id))
        };
        tracing::warn!(pid, %why, failed_an_evaluation = waiter.is_some(), "unusable reply from the runtime");
        if let Some(tx) = waiter {
            let _ = tx.send(Err(NoReply::Unusable(why)));
        }
    }

    /// Hands a reply line to the call waiting for it.
    fn dispatch(&self, line: &[u8], pid: u32) {
        let reply: Reply = match serde_json::from_slice(line) {
            Ok(reply) => reply,
            Err(e) => return self.fail_evaluation(pid, format!("its reply was not valid JSON ({e})")),
        };
        let Some(id) = reply.id else {
            tracing::warn!(pid, error = ?reply.error, "the runtime could not read a request");
            return;
        };
        let waiter = {
            let mut pending = self.pending.lock();
            if pending.evaluating == Some(id) {
                pending.evaluating = None;
            }
            pending.calls.remove(&id)
        };
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

fn io_error(what: &str, e: io::Error) -> StartError {
    StartError(format!("{what}: {e}"))
}

impl RubyProcess {
    /// Starts `command -e <driver>` and waits (at most `startup`) for the
    /// driver's ready line.
    pub async fn spawn(
        command: &[String],
        console: &Arc<ConsoleLog>,
        startup: Duration,
    ) -> Result<RubyProcess, StartError> {
        let shown = command.join(" ");
        let pipes = Pipes::new()?;
        let console_seq = console.seq();
        console.mark(&format!("starting {shown}"));
        let spawned = ChildCommand::new(&command[0])
            .name("ruby")
            .args(&command[1..])
            .arg("-e")
            .arg(DRIVER_SOURCE)
            // Code evaluated in the runtime, and whatever it starts, is not
            // handed the token that guards the bridge.
            .env_remove("SUPEX_AUTH_TOKEN")
            .stdin(Stdin::Piped)
            .stdout(Stdout::Fd(pipes.console_write))
            .stderr(Stderr::Fd(pipes.console_write_2))
            .fd(pipes.reply_write, REPLY_FD)
            .spawn();
        let mut child = spawned.map_err(|e| StartError(spawn_failure(&command[0], &e)))?;
        let pid = child.pid();
        let console_done = drain_console(console, pipes.console_read, pid)?;
        let link = Link::start(&mut child);
        let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(pipes.reply_read)
            .map_err(|e| io_error("reading the reply pipe", e))?;
        let mut replies = FramedRead::new(receiver, NdjsonCodec::new(REPLY_LIMIT));

        let first = tokio::select! {
            frame = replies.next() => frame,
            _ = child.exited() => None,
            _ = tokio::time::sleep(startup) => {
                child.kill();
                return Err(StartError(format!(
                    "`{shown}` did not start the driver within {startup:?}"
                )));
            }
        };
        let ready = match &first {
            Some(Ok(Frame::Message(line))) => serde_json::from_slice::<Ready>(line).ok(),
            _ => None,
        };
        let Some(ready) = ready.filter(|r| r.ready && r.protocol == PROTOCOL_VERSION) else {
            let said_something = first.is_some();
            return Err(not_started(&shown, &child, said_something, console, console_seq, console_done).await);
        };

        console.mark(&format!("runtime started: pid {pid}, {}", ready.ruby_description));
        Ok(RubyProcess {
            info: ProcessInfo {
                pid: ready.pid,
                started_at: SystemTime::now(),
                ruby_version: ready.ruby_version,
                ruby_description: ready.ruby_description,
            },
            started: Instant::now(),
            link,
            replies: tokio::sync::Mutex::new(replies),
            child,
            kill_reason: Mutex::new(None),
        })
    }

    /// Sends a request. If the process is gone, the reply is already the
    /// error saying how it ended.
    pub async fn request<'a>(&self, request: impl FnOnce(u64) -> Request<'a>) -> PendingReply {
        let id = self.link.next_id.fetch_add(1, Ordering::Relaxed);
        let request = request(id);
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.link.pending.lock();
            if let Some(exited) = &pending.exited {
                let _ = tx.send(Err(NoReply::Exited(exited.clone())));
                return PendingReply { rx };
            }
            pending.calls.insert(id, tx);
            if matches!(request, Request::Eval { .. }) {
                pending.evaluating = Some(id);
            }
        }
        let mut line = serde_json::to_vec(&request).expect("requests always serialise");
        line.push(b'\n');
        let mut stdin = self.link.stdin.lock().await;
        let written = match stdin.as_mut() {
            Some(pipe) => pipe.write_all(&line).await,
            None => Err(io::ErrorKind::BrokenPipe.into()),
        };
        if let Err(e) = written {
            // The process is going away; the call fails once it is reaped.
            tracing::debug!(pid = self.info.pid, error = %e, "writing to the runtime failed");
        }
        PendingReply { rx }
    }

    /// Waits for the reply to `pending`, reading the reply pipe while nobody
    /// else does. Cancel-safe: the pipe's buffered bytes stay in the reader.
    pub async fn wait(&self, pending: &mut PendingReply) -> Result<Reply, NoReply> {
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
                            Some(Ok(Frame::TooLarge(_))) => self.link.fail_evaluation(
                                pid,
                                format!("its reply was longer than {} MiB", REPLY_LIMIT >> 20),
                            ),
                            Some(Ok(other)) => tracing::warn!(pid, ?other, "unusable reply from the runtime"),
                            // The pipe closed: the process is gone, and every
                            // waiting call fails once it is reaped.
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
            Err(_) => Err(NoReply::Exited(self.exited().await)),
        }
    }

    /// Sends a request and waits for its reply, or for the process to end.
    pub async fn call<'a>(&self, request: impl FnOnce(u64) -> Request<'a>) -> Result<Reply, NoReply> {
        let mut pending = self.request(request).await;
        self.wait(&mut pending).await
    }

    /// Kills the process group at once (SIGKILL), remembering why.
    pub fn kill(&self, reason: KillReason) {
        self.kill_reason.lock().get_or_insert(reason);
        self.child.kill();
    }

    /// Why the daemon killed the process, if it did.
    pub fn kill_reason(&self) -> Option<KillReason> {
        *self.kill_reason.lock()
    }

    /// Closes the request pipe: the driver's reader sees EOF and exits.
    pub async fn close_stdin(&self) {
        self.link.stdin.lock().await.take();
    }

    /// Waits until the process has ended and been reaped (and with it
    /// whatever else was left of its group). The future owns what it needs,
    /// so a task can await it without keeping the process alive.
    pub fn exited(&self) -> impl Future<Output = Exit> + Send + 'static {
        self.child.exited()
    }

    pub fn has_exited(&self) -> bool {
        self.child.has_exited()
    }
}

impl Drop for RubyProcess {
    fn drop(&mut self) {
        self.kill(KillReason::Shutdown);
    }
}

/// The pipes of a process about to start: replies come back on their own
/// pipe; stdout and stderr share the console pipe (its write end twice).
struct Pipes {
    reply_read: OwnedFd,
    reply_write: OwnedFd,
    console_read: OwnedFd,
    console_write: OwnedFd,
    console_write_2: OwnedFd,
}

impl Pipes {
    fn new() -> Result<Pipes, StartError> {
        let (reply_read, reply_write) = pipe().map_err(|e| io_error("creating the reply pipe", e))?;
        let (console_read, console_write) = pipe().map_err(|e| io_error("creating the console pipe", e))?;
        let console_write_2 = console_write.try_clone().map_err(|e| io_error("creating the console pipe", e))?;
        Ok(Pipes { reply_read, reply_write, console_read, console_write, console_write_2 })
    }
}

/// Copies what the process prints into the console log, on a thread of its
/// own (the pipe is read with blocking reads). The receiver hears when the
/// pipe has been read to its end.
fn drain_console(console: &Arc<ConsoleLog>, read: OwnedFd, pid: u32) -> Result<oneshot::Receiver<()>, StartError> {
    let (done_tx, done) = oneshot::channel();
    let console = console.clone();
    let pipe = std::fs::File::from(read);
    std::thread::Builder::new()
        .name(format!("ruby-console-{pid}"))
        .spawn(move || {
            console.drain(pipe);
            let _ = done_tx.send(());
        })
        .map_err(|e| io_error("starting the console reader", e))?;
    Ok(done)
}

/// Why a process did not start the driver, with what it printed: a program
/// that closed the pipe is ending, so it is let end and its own exit status
/// reported (a kill now could still overtake it); one that wrote something
/// else would go on, so it is killed.
async fn not_started(
    shown: &str,
    child: &ChildProcess,
    said_something: bool,
    console: &ConsoleLog,
    console_seq: u64,
    console_done: oneshot::Receiver<()>,
) -> StartError {
    if said_something || tokio::time::timeout(Duration::from_secs(1), child.exited()).await.is_err() {
        child.kill();
    }
    let status = child.exited().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), console_done).await;
    let said: Vec<String> =
        console.since(console_seq).into_iter().filter(|l| !l.starts_with("-- supex-bridge:")).take(10).collect();
    let how = if said_something { "it sent something else first".to_owned() } else { status.to_string() };
    StartError(format!(
        "`{shown}` did not start the Ruby driver ({how}){}",
        if said.is_empty() { String::new() } else { format!("; it printed: {}", said.join(" | ")) }
    ))
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
