//! The runtime's life: which process is current ([`State`], watched by
//! health checks and waiters), starting one, giving up on one caught in a
//! crash loop, and the keeper task that restarts a process that died between
//! evaluations.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rpc_core::child::{CrashHistory, CrashPolicy, Restart};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::console::ConsoleLog;
use super::error::RuntimeError;
use super::process::{KillReason, RubyProcess};

/// How long the interpreter gets to load the driver.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the driver gets to exit after its request pipe closed.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

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

/// Where the runtime is; every change goes through [`Inner::set_state`].
#[derive(Clone)]
pub enum State {
    Starting,
    Running(Arc<RubyProcess>),
    Unavailable(String),
    Stopped,
}

#[derive(Default)]
pub struct Counters {
    pub evals: AtomicU64,
    pub restarts: AtomicU64,
}

/// The Ruby child process as the holder of the turn sees it, and the only
/// one who may change it: which process is current, and its history.
pub struct RuntimeChild {
    pub process: Option<Arc<RubyProcess>>,
    /// Whether a process ever ran: every later start is a restart.
    ran_before: bool,
    /// Processes that exited on their own between evaluations.
    pub crashes: CrashHistory,
}

impl RuntimeChild {
    fn new() -> RuntimeChild {
        RuntimeChild { process: None, ran_before: false, crashes: CrashHistory::new(crash_policy()) }
    }
}

/// What the [`super::handle::Runtime`] handle, the evaluation holding the
/// turn and the keeper share.
pub struct Inner {
    command: Vec<String>,
    pub console: Arc<ConsoleLog>,
    /// The turn: held by one evaluation (or a start, a reset, the keeper) at
    /// a time, waiters served in arrival order.
    pub turn: Arc<tokio::sync::Mutex<RuntimeChild>>,
    pub state: watch::Sender<State>,
    /// While `state` is `Running` with a live process, that process's
    /// generation (never 0); otherwise 0. Health checks read this one word
    /// instead of taking the state's lock; it is cleared when the process
    /// exits, as the state would then read "starting".
    pub running: Arc<AtomicU64>,
    generations: AtomicU64,
    pub counters: Counters,
    pub stop: CancellationToken,
    /// Shutdown began: no evaluation starts any more.
    pub draining: CancellationToken,
}

pub fn health_of(state: &State) -> (&'static str, Option<String>) {
    match state {
        State::Starting => ("starting", None),
        State::Running(p) if p.has_exited() => ("starting", None),
        State::Running(_) => ("running", None),
        State::Unavailable(why) => ("unavailable", Some(why.clone())),
        State::Stopped => ("stopped", None),
    }
}

impl Inner {
    /// A runtime that is starting; nothing runs until [`keep`] starts it.
    pub fn new(command: Vec<String>, console: Arc<ConsoleLog>) -> Inner {
        Inner {
            command,
            console,
            turn: Arc::new(tokio::sync::Mutex::new(RuntimeChild::new())),
            state: watch::Sender::new(State::Starting),
            running: Arc::new(AtomicU64::new(0)),
            generations: AtomicU64::new(0),
            counters: Counters::default(),
            stop: CancellationToken::new(),
            draining: CancellationToken::new(),
        }
    }

    /// Every change of state goes through here, to keep `running` with it.
    pub fn set_state(&self, state: State) {
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
    pub async fn start(&self, child: &mut RuntimeChild) -> Result<Arc<RubyProcess>, RuntimeError> {
        child.process = None;
        self.set_state(State::Starting);
        match RubyProcess::spawn(&self.command, &self.console, STARTUP_TIMEOUT).await {
            Ok(process) => {
                let process = Arc::new(process);
                tracing::info!(
                    pid = process.info.pid,
                    ruby = %process.info.ruby_description,
                    "ruby runtime started"
                );
                if child.ran_before {
                    self.counters.restarts.fetch_add(1, Ordering::Relaxed);
                }
                child.ran_before = true;
                child.process = Some(process.clone());
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
    pub fn give_up(&self, child: &mut RuntimeChild, last_exit: &str) {
        let policy = child.crashes.policy();
        let window = policy.give_up.map_or(Duration::ZERO, |limit| limit.within);
        let message = format!(
            "the Ruby runtime exited on its own {} times within {} (last: {last_exit}), so it is no \
             longer restarted in the background; the next evaluation or reset_runtime starts it again",
            child.crashes.recent_crashes(),
            humantime::format_duration(window),
        );
        tracing::error!("{message}");
        self.console.mark(&message);
        child.process = None;
        self.set_state(State::Unavailable(message));
    }

    /// The live process, started on demand (a missing interpreter may have
    /// been installed since the last attempt).
    pub async fn ensure_running(&self, child: &mut RuntimeChild) -> Result<Arc<RubyProcess>, RuntimeError> {
        match &child.process {
            Some(process) if !process.has_exited() => Ok(process.clone()),
            _ => self.start(child).await,
        }
    }
}

/// Starts the first process, then restarts any that dies between evaluations.
pub async fn keep(inner: Arc<Inner>) {
    {
        let mut turn = inner.turn.lock().await;
        let _ = inner.ensure_running(&mut turn).await;
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
        let mut turn = tokio::select! {
            turn = inner.turn.lock() => turn,
            _ = inner.stop.cancelled() => return,
        };
        if !turn.process.as_ref().is_some_and(|p| Arc::ptr_eq(p, &process)) {
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
                match turn.crashes.crashed(process.started, std::time::Instant::now()) {
                    Restart::After(delay) => {
                        tracing::warn!(pid, %exited, ?delay, "the ruby runtime exited on its own; restarting it");
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = inner.stop.cancelled() => return,
                        }
                    }
                    Restart::GiveUp => {
                        inner.give_up(&mut turn, &exited.to_string());
                        continue;
                    }
                }
            }
        }
        drop(process);
        let _ = inner.start(&mut turn).await;
    }
}
