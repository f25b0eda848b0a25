//! The Ruby runtime: one long-lived `ruby` process shared by both servers.
//!
//! Evaluations take turns on a fair lock (tokio's `Mutex` queues waiters in
//! arrival order), so they run one at a time, first come first served,
//! whichever server they came from; the caller's own task then writes the
//! request and reads the reply, with no hop through another task on the way.
//! Everything else (`complete`, `runtime_info`, `ping`) reads shared state or
//! talks to the driver's reader thread directly and never waits for a turn.
//!
//! The turn's holder enforces its timeout by killing the process and starts
//! the next one; a keeper task restarts a process that dies between
//! evaluations (see [`crash_policy`]), and `stop` ends it with the daemon.

mod console;
mod process;
mod protocol;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rpc_core::child::{CrashHistory, CrashPolicy, Restart};
use tokio::sync::{OwnedMutexGuard, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use console::ConsoleLog;
pub use process::ProcessInfo;
use process::{KillReason, PendingReply, RubyProcess};
use protocol::{Reply, Request};
pub use protocol::{RubyException, Scope, Show};

/// How long the interpreter gets to load the driver.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the driver gets to exit after its request pipe closed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// When the keeper restarts a runtime that exited on its own between
/// evaluations: after 0.2 s, doubling up to 10 s while it keeps dying within
/// 10 s of starting. At rpc-core's default cut-off, 3 such exits within 5
/// minutes, it stops: something outside any one evaluation is wrong (a broken
/// `SUPEX_RUBY` wrapper, a thread that keeps calling `exit!`), and restarting
/// it forever in the background would only burn CPU and flood the console.
/// The runtime is then reported unavailable, saying why, and the next
/// evaluation or `reset_runtime` starts it on demand, so nobody is locked out.
/// Timeouts, resets and crashes during an evaluation are restarted at once
/// and are not counted: a caller is waiting, and its error says it restarted.
fn crash_policy() -> CrashPolicy {
    CrashPolicy {
        first_delay: Duration::from_millis(200),
        max_delay: Duration::from_secs(10),
        healthy_after: Duration::from_secs(10),
        ..CrashPolicy::default()
    }
}

#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The interpreter and its leading arguments (`SUPEX_RUBY`, split).
    pub command: Vec<String>,
}

/// One evaluation.
#[derive(Debug)]
pub struct Eval {
    pub code: String,
    pub scope: Scope,
    /// Name for backtraces (`(eval)`, `(repl)`, a file path).
    pub file: Option<String>,
    pub show: Show,
    pub timeout: Duration,
}

/// What an evaluation printed, and its value or the exception it raised.
#[derive(Debug)]
pub struct Evaluated {
    pub result: Result<String, RubyException>,
    pub output: String,
}

/// Why the runtime could not evaluate (as opposed to the code raising).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "Ruby evaluation timed out after {}; the runtime was killed and restarted, \
         so its state (globals, constants, methods, REPL locals) was lost",
        humantime::format_duration(*after)
    )]
    Timeout { after: Duration },
    #[error(
        "the Ruby runtime exited during the evaluation ({exited}); it was restarted \
         and its state was lost"
    )]
    Crashed { exited: String },
    #[error("{message}")]
    Unavailable { message: String },
    #[error("the Ruby runtime was reset during the evaluation; its state was lost")]
    Reset,
    #[error("supex-bridge is shutting down; the Ruby runtime is stopped")]
    Stopped,
}

/// The runtime as `runtime_info` reports it.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// `starting`, `running`, `unavailable` or `stopped`.
    pub state: &'static str,
    pub process: Option<ProcessInfo>,
    /// Why the runtime is unavailable.
    pub problem: Option<String>,
    pub evals: u64,
    pub restarts: u64,
}

#[derive(Clone)]
enum State {
    Starting,
    Running(Arc<RubyProcess>),
    Unavailable(String),
    Stopped,
}

#[derive(Default)]
struct Counters {
    evals: AtomicU64,
    restarts: AtomicU64,
}

/// What the holder of the turn may change.
struct Slot {
    process: Option<Arc<RubyProcess>>,
    /// Whether a process ever ran: every later start is a restart.
    ran_before: bool,
    /// Processes that exited on their own between evaluations.
    crashes: CrashHistory,
}

impl Slot {
    fn new() -> Slot {
        Slot { process: None, ran_before: false, crashes: CrashHistory::new(crash_policy()) }
    }
}

struct Inner {
    command: Vec<String>,
    console: Arc<ConsoleLog>,
    turn: Arc<tokio::sync::Mutex<Slot>>,
    state: watch::Sender<State>,
    /// While `state` is `Running` with a live process, that process's
    /// generation (never 0); otherwise 0. Health checks read this one word
    /// instead of taking the state's lock; it is cleared when the process
    /// exits, as the state would then read "starting".
    running: Arc<AtomicU64>,
    generations: AtomicU64,
    counters: Counters,
    stop: CancellationToken,
    /// Shutdown began: no evaluation starts any more.
    draining: CancellationToken,
}

/// The handle every server shares.
pub struct Runtime {
    inner: Arc<Inner>,
    keeper: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Runtime {
    /// Starts Ruby in the background.
    pub fn start(config: RuntimeConfig, console: Arc<ConsoleLog>) -> Runtime {
        let inner = Arc::new(Inner {
            command: config.command,
            console,
            turn: Arc::new(tokio::sync::Mutex::new(Slot::new())),
            state: watch::Sender::new(State::Starting),
            running: Arc::new(AtomicU64::new(0)),
            generations: AtomicU64::new(0),
            counters: Counters::default(),
            stop: CancellationToken::new(),
            draining: CancellationToken::new(),
        });
        let keeper = tokio::spawn(keep(inner.clone()));
        Runtime { inner, keeper: tokio::sync::Mutex::new(Some(keeper)) }
    }

    /// Waits for its turn, evaluates, and returns what the code printed and
    /// its value or exception. A caller that gives up before its turn leaves
    /// the queue; one that gives up during its turn leaves the evaluation to
    /// finish (or time out) before the next one starts.
    pub async fn eval(&self, eval: Eval) -> Result<Evaluated, RuntimeError> {
        let inner = &self.inner;
        // Waiting for the turn ends when the daemon starts shutting down: only
        // the evaluation already running gets the grace period.
        let mut slot = tokio::select! {
            slot = inner.turn.clone().lock_owned() => slot,
            () = inner.draining.cancelled() => return Err(RuntimeError::Stopped),
        };
        if inner.stop.is_cancelled() || inner.draining.is_cancelled() {
            return Err(RuntimeError::Stopped);
        }
        let process = inner.ensure_running(&mut slot).await?;
        inner.counters.evals.fetch_add(1, Ordering::Relaxed);
        let pending = process
            .request(|id| Request::Eval {
                id,
                code: &eval.code,
                scope: eval.scope,
                file: eval.file.as_deref(),
                show: eval.show,
            })
            .await;
        let mut flight = InFlight {
            inner: inner.clone(),
            slot: Some(slot),
            process,
            pending: Some(pending),
            deadline: Instant::now() + eval.timeout,
            timeout: eval.timeout,
        };
        flight.finish().await
    }

    /// Whether `code` is a complete expression. Answered by the driver's reader
    /// thread, so it does not wait for a running evaluation.
    pub async fn complete(&self, code: &str) -> Result<bool, RuntimeError> {
        let process = self.running().await?;
        let reply = process
            .call(|id| Request::Complete { id, code })
            .await
            .map_err(|exited| RuntimeError::Crashed { exited: exited.to_string() })?;
        Ok(reply.complete.unwrap_or(true))
    }

    /// Kills the process at once (failing a running evaluation) and waits for
    /// the next one to start. Returns its pid.
    pub async fn reset(&self) -> Result<u32, RuntimeError> {
        let inner = &self.inner;
        let mut state = inner.state.subscribe();
        let current = match &*state.borrow_and_update() {
            State::Running(p) if !p.has_exited() => Some(p.clone()),
            _ => None,
        };
        let Some(old) = current else {
            // Nothing running to kill: start one in turn.
            let mut slot = inner.turn.lock().await;
            if let Some(process) = slot.process.take() {
                process.kill(KillReason::Reset);
                process.exited().await;
            }
            return inner.start(&mut slot).await.map(|p| p.info.pid);
        };
        old.kill(KillReason::Reset);
        // The evaluation that was running, or the keeper, starts the next one.
        let next = tokio::time::timeout(
            STARTUP_TIMEOUT + STOP_GRACE,
            state.wait_for(|s| match s {
                State::Running(p) => !Arc::ptr_eq(p, &old),
                State::Starting => false,
                State::Unavailable(_) | State::Stopped => true,
            }),
        )
        .await;
        let Ok(settled) = next else {
            return Err(RuntimeError::Unavailable {
                message: "the Ruby runtime did not come back after the reset".into(),
            });
        };
        match settled.as_deref() {
            Ok(State::Running(p)) => Ok(p.info.pid),
            Ok(State::Unavailable(message)) => Err(RuntimeError::Unavailable { message: message.clone() }),
            _ => Err(RuntimeError::Stopped),
        }
    }

    /// The runtime's state and, when unavailable, why; for health checks,
    /// which must not allocate for a running runtime (see [`Snapshot`]). A
    /// process that exited and waits for the keeper's restart is `starting`.
    pub fn health(&self) -> (&'static str, Option<String>) {
        if self.inner.running.load(Ordering::Acquire) != 0 {
            return ("running", None);
        }
        health_of(&self.inner.state.borrow())
    }

    /// [`Runtime::health`], after waiting up to `settle` for a runtime that is
    /// starting to run or to fail: right after the daemon starts, a health
    /// check should get the verdict rather than "starting".
    pub async fn settled_health(&self, settle: Duration) -> (&'static str, Option<String>) {
        let mut state = self.inner.state.subscribe();
        let _ = tokio::time::timeout(settle, state.wait_for(|s| health_of(s).0 != "starting")).await;
        self.health()
    }

    pub fn snapshot(&self) -> Snapshot {
        let (state, process, problem) = match &*self.inner.state.borrow() {
            State::Starting => ("starting", None, None),
            State::Running(p) => ("running", Some(p.info.clone()), None),
            State::Unavailable(why) => ("unavailable", None, Some(why.clone())),
            State::Stopped => ("stopped", None, None),
        };
        let counters = &self.inner.counters;
        Snapshot {
            state,
            process,
            problem,
            evals: counters.evals.load(Ordering::Relaxed),
            restarts: counters.restarts.load(Ordering::Relaxed),
        }
    }

    pub fn console(&self) -> &ConsoleLog {
        &self.inner.console
    }

    /// Waits until the runtime is running, or says why it is not.
    async fn running(&self) -> Result<Arc<RubyProcess>, RuntimeError> {
        let mut state = self.inner.state.subscribe();
        let settled = tokio::time::timeout(STARTUP_TIMEOUT, state.wait_for(|s| !matches!(s, State::Starting))).await;
        match settled {
            Ok(Ok(state)) => match &*state {
                State::Running(p) => Ok(p.clone()),
                State::Unavailable(message) => Err(RuntimeError::Unavailable { message: message.clone() }),
                State::Stopped | State::Starting => Err(RuntimeError::Stopped),
            },
            Ok(Err(_)) => Err(RuntimeError::Stopped),
            Err(_) => {
                Err(RuntimeError::Unavailable { message: "the Ruby runtime is still starting; try again".into() })
            }
        }
    }

    /// Stops the process: closes its request pipe so the driver exits, and
    /// kills it if it has not within a grace period. Evaluations still
    /// waiting for their turn fail with [`RuntimeError::Stopped`].
    /// The daemon is shutting down: evaluations waiting for their turn are
    /// refused at once, and no new one starts; the running one carries on.
    pub fn refuse_waiting(&self) {
        self.inner.draining.cancel();
    }

    pub async fn stop(&self) {
        let inner = &self.inner;
        inner.draining.cancel();
        inner.stop.cancel();
        if let Some(keeper) = self.keeper.lock().await.take() {
            let _ = keeper.await;
        }
        let mut slot = inner.turn.lock().await;
        if let Some(process) = slot.process.take() {
            process.close_stdin().await;
            let exited = match tokio::time::timeout(STOP_GRACE, process.exited()).await {
                Ok(exited) => exited,
                Err(_) => {
                    process.kill(KillReason::Shutdown);
                    process.exited().await
                }
            };
            let pid = process.info.pid;
            tracing::info!(pid, %exited, "ruby runtime stopped");
            inner.console.mark(&format!("runtime pid {pid} stopped ({exited}): daemon shutting down"));
        }
        inner.set_state(State::Stopped);
    }
}

fn health_of(state: &State) -> (&'static str, Option<String>) {
    match state {
        State::Starting => ("starting", None),
        State::Running(p) if p.has_exited() => ("starting", None),
        State::Running(_) => ("running", None),
        State::Unavailable(why) => ("unavailable", Some(why.clone())),
        State::Stopped => ("stopped", None),
    }
}

impl Inner {
    /// Every change of state goes through here, to keep `running` with it.
    fn set_state(&self, state: State) {
        match &state {
            State::Running(process) => {
                let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
                // Set before the watcher can run, so an exit it sees at once
                // still clears it.
                self.running.store(generation, Ordering::Release);
                let (running, exited) = (self.running.clone(), process.exited());
                tokio::spawn(async move {
                    exited.await;
                    let _ = running.compare_exchange(generation, 0, Ordering::AcqRel, Ordering::Relaxed);
                });
            }
            _ => self.running.store(0, Ordering::Release),
        }
        self.state.send_replace(state);
    }

    /// Starts a process (the turn must be held).
    async fn start(&self, slot: &mut Slot) -> Result<Arc<RubyProcess>, RuntimeError> {
        slot.process = None;
        self.set_state(State::Starting);
        match RubyProcess::spawn(&self.command, &self.console, STARTUP_TIMEOUT).await {
            Ok(process) => {
                let process = Arc::new(process);
                tracing::info!(
                    pid = process.info.pid,
                    ruby = %process.info.ruby_description,
                    "ruby runtime started"
                );
                if slot.ran_before {
                    self.counters.restarts.fetch_add(1, Ordering::Relaxed);
                }
                slot.ran_before = true;
                slot.process = Some(process.clone());
                self.set_state(State::Running(process.clone()));
                Ok(process)
            }
            Err(e) => {
                tracing::warn!("{e}");
                self.console.mark(&e.0);
                self.set_state(State::Unavailable(e.0.clone()));
                Err(RuntimeError::Unavailable { message: e.0 })
            }
        }
    }

    /// Leaves a runtime caught in a crash loop stopped (see [`crash_policy`]).
    fn give_up(&self, slot: &mut Slot, last_exit: &str) {
        let policy = slot.crashes.policy();
        let window = policy.give_up.map_or(Duration::ZERO, |limit| limit.within);
        let message = format!(
            "the Ruby runtime exited on its own {} times within {} (last: {last_exit}), so it is no \
             longer restarted in the background; the next evaluation or reset_runtime starts it again",
            slot.crashes.recent_crashes(),
            humantime::format_duration(window),
        );
        tracing::error!("{message}");
        self.console.mark(&message);
        slot.process = None;
        self.set_state(State::Unavailable(message));
    }

    /// The live process, started on demand (a missing interpreter may have
    /// been installed since the last attempt).
    async fn ensure_running(&self, slot: &mut Slot) -> Result<Arc<RubyProcess>, RuntimeError> {
        match &slot.process {
            Some(process) if !process.has_exited() => Ok(process.clone()),
            _ => self.start(slot).await,
        }
    }
}

/// The evaluation holding the turn. If its caller goes away mid-evaluation,
/// dropping this hands the rest (waiting, the timeout, a restart) to a task,
/// so the next evaluation still starts only after this one is over.
struct InFlight {
    inner: Arc<Inner>,
    slot: Option<OwnedMutexGuard<Slot>>,
    process: Arc<RubyProcess>,
    pending: Option<PendingReply>,
    deadline: Instant,
    timeout: Duration,
}

impl InFlight {
    async fn finish(&mut self) -> Result<Evaluated, RuntimeError> {
        let process = self.process.clone();
        let pending = self.pending.as_mut().expect("finished once");
        let ended = tokio::select! {
            reply = process.wait(pending) => reply.ok(),
            _ = tokio::time::sleep_until(self.deadline) => {
                process.kill(KillReason::Timeout);
                None
            }
            _ = self.inner.stop.cancelled() => {
                // Shutdown: stop() closes the driver's pipe once the turn is free.
                self.pending = None;
                return Err(RuntimeError::Stopped);
            }
        };
        self.pending = None;
        if let Some(reply) = ended {
            return Ok(evaluated(reply));
        }
        let exited = process.exited().await;
        let pid = process.info.pid;
        let (error, why) = match process.kill_reason() {
            Some(KillReason::Timeout) => {
                tracing::warn!(pid, timeout = ?self.timeout, "evaluation timed out; killed the ruby runtime");
                (
                    RuntimeError::Timeout { after: self.timeout },
                    format!("an evaluation ran past {}", humantime::format_duration(self.timeout)),
                )
            }
            Some(KillReason::Reset) => (RuntimeError::Reset, "reset requested".to_owned()),
            Some(KillReason::Shutdown) => return Err(RuntimeError::Stopped),
            None => {
                tracing::warn!(pid, %exited, "the ruby runtime died during an evaluation");
                (
                    RuntimeError::Crashed { exited: exited.to_string() },
                    format!("it exited during an evaluation ({exited})"),
                )
            }
        };
        self.inner.console.mark(&format!("runtime pid {pid} stopped ({exited}): {why}"));
        // The error goes back now; the next process starts while the turn is
        // still held, so whoever is next finds it running.
        if let Some(slot) = self.slot.take() {
            restart_in_background(self.inner.clone(), slot, why);
        }
        Err(error)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (Some(mut pending), Some(mut slot)) = (self.pending.take(), self.slot.take()) else {
            return;
        };
        let inner = self.inner.clone();
        let process = self.process.clone();
        let deadline = self.deadline;
        tokio::spawn(async move {
            let finished = tokio::select! {
                reply = process.wait(&mut pending) => reply.is_ok(),
                _ = tokio::time::sleep_until(deadline) => {
                    process.kill(KillReason::Timeout);
                    false
                }
                _ = inner.stop.cancelled() => true,
            };
            if !finished {
                let exited = process.exited().await;
                tracing::warn!(pid = process.info.pid, %exited, "an abandoned evaluation ended the runtime");
                if !inner.stop.is_cancelled() {
                    let _ = inner.start(&mut slot).await;
                }
            }
        });
    }
}

fn restart_in_background(inner: Arc<Inner>, mut slot: OwnedMutexGuard<Slot>, why: String) {
    tokio::spawn(async move {
        if inner.stop.is_cancelled() {
            return;
        }
        tracing::info!(reason = %why, "restarting the ruby runtime");
        let _ = inner.start(&mut slot).await;
    });
}

/// Starts the first process, then restarts any that dies between evaluations.
async fn keep(inner: Arc<Inner>) {
    {
        let mut slot = inner.turn.lock().await;
        let _ = inner.ensure_running(&mut slot).await;
    }
    let mut state = inner.state.subscribe();
    loop {
        let current = match &*state.borrow_and_update() {
            State::Running(p) => Some(p.clone()),
            _ => None,
        };
        let Some(process) = current else {
            tokio::select! {
                changed = state.changed() => if changed.is_err() { return },
                _ = inner.stop.cancelled() => return,
            }
            continue;
        };
        let exited = tokio::select! {
            exited = process.exited() => exited,
            _ = inner.stop.cancelled() => return,
        };
        let mut slot = tokio::select! {
            slot = inner.turn.lock() => slot,
            _ = inner.stop.cancelled() => return,
        };
        if !slot.process.as_ref().is_some_and(|p| Arc::ptr_eq(p, &process)) {
            continue; // Whoever held the turn has already started the next one.
        }
        let pid = process.info.pid;
        match process.kill_reason() {
            Some(KillReason::Reset) => {
                tracing::info!(pid, "ruby runtime reset");
                inner.console.mark(&format!("runtime pid {pid} stopped ({exited}): reset requested"));
            }
            _ => {
                inner.console.mark(&format!("runtime pid {pid} exited on its own ({exited})"));
                match slot.crashes.crashed(process.started, std::time::Instant::now()) {
                    Restart::After(delay) => {
                        tracing::warn!(pid, %exited, ?delay, "the ruby runtime exited on its own; restarting it");
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = inner.stop.cancelled() => return,
                        }
                    }
                    Restart::GiveUp => {
                        inner.give_up(&mut slot, &exited.to_string());
                        continue;
                    }
                }
            }
        }
        drop(process);
        let _ = inner.start(&mut slot).await;
    }
}

fn evaluated(reply: Reply) -> Evaluated {
    let output = reply.output.unwrap_or_default();
    let result = if reply.ok {
        Ok(reply.value.unwrap_or_default())
    } else {
        Err(reply.error.unwrap_or_else(|| RubyException {
            class: "ProtocolError".into(),
            message: "the runtime reported a failure without details".into(),
            backtrace: Vec::new(),
        }))
    };
    Evaluated { result, output }
}
