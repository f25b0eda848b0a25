//! One run of the agent: its command line (a preset or `--agent-cmd`), and
//! the run itself on a pseudo-terminal, with its output streamed line by line
//! into the session as it appears.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::pty::{OpenptyResult, Winsize, openpty};
use rpc_core::child::{ChildCommand, ChildProcess, Exit};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::output::{LineSplitter, OutputWatch, Piece, plain};
use crate::state::Session;
use crate::terminal::TerminalWriter;

mod claim;
mod command;

use claim::ClaimCheck;
use command::Delivery;
pub use command::{AgentCommand, PRESETS};

/// How long a line still being written waits before it is published as it is (a prompt, echoed keys).
const PARTIAL_AFTER: Duration = Duration::from_millis(50);
/// How long the agent's process group gets after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// After the agent exits, how long output still in the terminal may take to arrive.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);
/// After a confirmed completion claim, how long the agent gets to exit by itself.
const EXIT_AFTER_COMPLETE: Duration = Duration::from_secs(10);
/// The terminal's size: wide, so that agents do not wrap what they print.
const SIZE: Winsize = Winsize { ws_row: 50, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
/// What the loop needs to start one run.
#[derive(Debug)]
pub struct RunSpec<'a> {
    pub command: &'a AgentCommand,
    pub prompt: &'a str,
    pub prompt_file: PathBuf,
    pub project_root: &'a Path,
    pub iteration: u32,
    pub story_id: &'a str,
}

/// How one run went.
#[derive(Debug)]
pub struct RunReport {
    pub exit: Exit,
    /// The loop stopped the agent (a forced stop, a signal, a confirmed completion).
    pub stopped_by_us: bool,
}

/// Why the loop asks a running agent to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// SIGTERM to its group, SIGKILL after [`STOP_GRACE`].
    Stop,
    /// SIGKILL at once (a second signal).
    Kill,
}

/// Runs the agent once on a new pseudo-terminal. `interrupts` tells it to
/// stop early. Output goes to the session as events and recent lines, and
/// through `watch`.
pub async fn run(
    session: &Arc<Session>,
    spec: RunSpec<'_>,
    watch: &mut OutputWatch,
    interrupts: &mut mpsc::UnboundedReceiver<Interrupt>,
) -> std::io::Result<RunReport> {
    let delivery = spec.command.delivery();
    let (handed, to_file) = spec.command.hand_over(spec.prompt, &spec.prompt_file);
    if to_file {
        write_prompt_file(&spec.prompt_file, spec.prompt)?;
    }
    if to_file && delivery != Delivery::File {
        tracing::info!(
            bytes = spec.prompt.len(),
            file = %spec.prompt_file.display(),
            "the prompt cannot be passed as it is; the agent is told to read its file"
        );
    }
    let argv = spec.command.argv(&handed, &spec.prompt_file);
    let pty = open_terminal()?;
    let mut command = ChildCommand::new(&argv[0])
        .name(format!("agent ({})", spec.command.name))
        .args(&argv[1..])
        .current_dir(spec.project_root)
        .env("RALPH_TASK_DIR", &session.task_dir)
        .env("RALPH_ITERATION", spec.iteration.to_string())
        .env("RALPH_STORY_ID", spec.story_id)
        .terminal(pty.slave);
    if std::env::var_os("TERM").is_none() {
        command = command.env("TERM", "xterm-256color");
    }
    let child = command.spawn().map_err(|e| std::io::Error::new(e.kind(), format!("cannot start {}: {e}", argv[0])))?;
    let child = Arc::new(child);
    tracing::info!(pid = child.pid(), agent = %spec.command.name, iteration = spec.iteration, "agent started");

    let master = Arc::new(register(pty.master)?);
    let typed = (delivery == Delivery::Terminal).then(|| {
        // The terminal echoes what is typed (the prompt, or the pointer in its
        // place): that echo must not use up the prompt's own allowance, which
        // is for an agent that prints its prompt back.
        watch.expect_echo(&handed);
        let mut typed = handed.into_owned();
        if !typed.ends_with('\n') {
            typed.push('\n');
        }
        // Ctrl-D at the start of a line: end of input for the agent's read.
        typed.push('\x04');
        Bytes::from(typed)
    });
    let (input, writer) = TerminalWriter::start(master.clone(), typed);
    session.attach_terminal(Some(input));
    let report = stream(session, &child, &master, &writer, watch, interrupts).await;
    session.attach_terminal(None);
    Ok(report)
}

/// Reads the terminal until the agent has exited and its output is drained.
async fn stream(
    session: &Arc<Session>,
    child: &Arc<ChildProcess>,
    master: &AsyncFd<OwnedFd>,
    writer: &TerminalWriter,
    watch: &mut OutputWatch,
    interrupts: &mut mpsc::UnboundedReceiver<Interrupt>,
) -> RunReport {
    let exited = child.exited();
    tokio::pin!(exited);
    let mut run = Streaming::new(session, child, writer, watch);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let drain_deadline = run.drain_until.unwrap_or_else(far);
        tokio::select! {
            ready = master.readable() => {
                let Ok(mut guard) = ready else { break };
                match guard.try_io(|fd| nix::unistd::read(fd.get_ref(), &mut buf).map_err(std::io::Error::from)) {
                    Ok(Ok(0)) | Ok(Err(_)) => break, // EIO: nothing holds the terminal any more
                    Ok(Ok(n)) => run.read(&buf[..n]),
                    Err(_would_block) => continue,
                }
            }
            status = &mut exited, if run.exit.is_none() => run.exited(status),
            _ = tokio::time::sleep_until(run.partial_at) => run.flush_partial(),
            _ = tokio::time::sleep_until(drain_deadline) => break,
            _ = tokio::time::sleep_until(run.complete_deadline.unwrap_or_else(far)), if run.stopping.is_none() => {
                tracing::info!("agent claimed completion but did not exit; stopping it");
                run.stop(Interrupt::Stop);
            }
            interrupt = interrupts.recv(), if run.exit.is_none() => {
                let Some(interrupt) = interrupt else { continue };
                run.stop(interrupt);
            }
            confirmed = run.claim.verdict() => run.judged(confirmed),
        }
    }
    run.finish();
    let exit = match run.exit {
        Some(exit) => exit,
        None => exited.await,
    };
    // Its own lines (the prompt's echo not counted), for a surprising iteration.
    let findings = &run.watch.findings;
    let prd_reads = run.claim.reads();
    tracing::info!(%exit, lines = findings.own_lines, claimed = findings.claimed, prd_reads, "agent exited");
    RunReport { exit, stopped_by_us: run.stopped_by_us }
}

/// A deadline that never comes, for a timer that is off.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600 * 24 * 365)
}

/// What [`stream`] keeps while it reads: the lines being cut, the agent's
/// exit once seen, and the deadlines it waits for.
struct Streaming<'a> {
    session: &'a Arc<Session>,
    child: &'a Arc<ChildProcess>,
    /// What is still to be typed is abandoned once the agent exits or is stopped.
    writer: &'a TerminalWriter,
    watch: &'a mut OutputWatch,
    /// Claims of completion, checked against prd.json off this path.
    claim: ClaimCheck,
    lines: LineSplitter,
    pieces: Vec<Piece>,
    exit: Option<Exit>,
    /// Once the agent has exited: how long its last output may still take.
    drain_until: Option<Instant>,
    /// When the line being written is published as it is, so far.
    partial_at: Instant,
    /// Once a claim of completion is confirmed: when the agent is stopped
    /// if it has not exited by itself.
    complete_deadline: Option<Instant>,
    /// The loop stopped the agent (a request, a signal, a confirmed claim).
    stopped_by_us: bool,
    stopping: Option<tokio::task::JoinHandle<()>>,
}

impl<'a> Streaming<'a> {
    fn new(
        session: &'a Arc<Session>,
        child: &'a Arc<ChildProcess>,
        writer: &'a TerminalWriter,
        watch: &'a mut OutputWatch,
    ) -> Self {
        Streaming {
            session,
            child,
            writer,
            watch,
            claim: ClaimCheck::new(session.task_dir.clone()),
            lines: LineSplitter::default(),
            pieces: Vec::new(),
            exit: None,
            drain_until: None,
            partial_at: far(),
            complete_deadline: None,
            stopped_by_us: false,
            stopping: None,
        }
    }

    /// Bytes from the terminal: whole lines published now, the rest after
    /// [`PARTIAL_AFTER`] of quiet.
    fn read(&mut self, bytes: &[u8]) {
        self.lines.feed(bytes, &mut self.pieces);
        if publish(self.session, &mut self.pieces, self.watch) {
            self.claim.claimed();
        }
        self.partial_at = Instant::now() + PARTIAL_AFTER;
    }

    /// A claim was checked: confirmed, the agent gets [`EXIT_AFTER_COMPLETE`] to exit.
    fn judged(&mut self, confirmed: bool) {
        if confirmed && self.complete_deadline.is_none() {
            self.complete_deadline = Some(Instant::now() + EXIT_AFTER_COMPLETE);
        }
    }

    fn exited(&mut self, status: Exit) {
        self.writer.stop();
        self.exit = Some(status);
        self.drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
    }

    /// A line that has not ended after a quiet while (a prompt, echoed keys).
    fn flush_partial(&mut self) {
        if let Some(Piece::Partial(text)) = self.lines.flush_partial() {
            self.session.remember_partial(&plain(&self.lines.published()));
            self.session.publish_output([(text.as_str(), true)]);
        }
        self.partial_at = far();
    }

    /// Stops the agent `how`, in place of a stop already under way.
    fn stop(&mut self, how: Interrupt) {
        self.writer.stop();
        self.stopped_by_us = true;
        if let Some(previous) = self.stopping.take() {
            previous.abort();
        }
        self.stopping = Some(spawn_stop(self.child, how));
    }

    /// The last line, if it never ended.
    fn finish(&mut self) {
        if let Some(piece) = self.lines.finish() {
            self.pieces.push(piece);
            publish(self.session, &mut self.pieces, self.watch);
        }
    }
}

/// Publishes the pieces read, as one batch (one wake-up of the subscribers
/// a read, however many lines it held); returns whether one of them claimed
/// completion (to be checked against prd.json, not here: see [`ClaimCheck`]).
fn publish(session: &Arc<Session>, pieces: &mut Vec<Piece>, watch: &mut OutputWatch) -> bool {
    let mut claimed = false;
    for piece in pieces.iter() {
        if let Piece::Line { whole, .. } | Piece::Cut { whole, .. } = piece {
            let plain = plain(whole);
            session.remember_line(&plain);
            claimed |= watch.line(&plain, session.interactive());
        }
    }
    session.publish_output(pieces.iter().map(|piece| match piece {
        Piece::Partial(text) | Piece::Cut { text, .. } => (text.as_str(), true),
        Piece::Line { text, .. } => (text.as_str(), false),
    }));
    pieces.clear();
    claimed
}

/// A new pseudo-terminal, its master side non-blocking for the reactor.
fn open_terminal() -> std::io::Result<OpenptyResult> {
    let pty = openpty(Some(&SIZE), None)?;
    // openpty's descriptors are inherited by default: the agent would hold
    // the master (and so could any process it leaves behind, keeping the
    // terminal open after it exits). It gets the slave as its stdio only.
    for end in [&pty.master, &pty.slave] {
        fcntl(end, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    }
    let flags = OFlag::from_bits_truncate(fcntl(&pty.master, FcntlArg::F_GETFL)?);
    fcntl(&pty.master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(pty)
}

/// Stops the agent's group in a task of its own, so output keeps being read meanwhile.
fn spawn_stop(child: &Arc<ChildProcess>, how: Interrupt) -> tokio::task::JoinHandle<()> {
    let child = child.clone();
    tokio::spawn(async move {
        match how {
            Interrupt::Kill => child.kill(),
            Interrupt::Stop => {
                child.stop(STOP_GRACE).await;
            }
        }
    })
}

/// The terminal's master side in the runtime's reactor.
#[allow(unsafe_code)]
fn register(master: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `OwnedFd` owns an open descriptor and is moved into the
    // `AsyncFd`, so it stays open, with the same number, until the `AsyncFd`
    // is dropped; nothing else closes it.
    unsafe { AsyncFd::register(master) }.map_err(std::io::Error::from)
}

/// The prompt file, written whole before the agent starts (0600: prompts may be private).
fn write_prompt_file(path: &Path, prompt: &str) -> std::io::Result<()> {
    crate::files::replace(path, prompt.as_bytes(), 0o600)
}
