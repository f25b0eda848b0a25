//! The Ruby runtime: one long-lived `ruby` process shared by both servers.
//!
//! A single supervisor task owns the process. Evaluations reach it through one
//! FIFO queue, so they run one at a time in arrival order, whichever server
//! they came from; everything else (`complete`, `runtime_info`, `ping`) reads
//! shared state or talks to the driver's reader thread directly and never
//! waits behind an evaluation. The supervisor enforces the evaluation timeout
//! by killing the process, restarts it after a crash (with backoff if it keeps
//! crashing), and stops it with the daemon.

mod console;
mod process;
mod protocol;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use console::ConsoleLog;
pub use process::ProcessInfo;
use process::RubyProcess;
use protocol::{Reply, Request};
pub use protocol::{RubyException, Scope, Show};

/// How long the interpreter gets to load the driver.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the driver gets to exit after its request pipe closed.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// A process that lived at least this long was healthy: its crash is not part
/// of a crash loop.
const HEALTHY_AFTER: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

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

struct Job {
    eval: Eval,
    reply: oneshot::Sender<Result<Evaluated, RuntimeError>>,
}

type ResetReply = oneshot::Sender<Result<u32, RuntimeError>>;

/// The handle every server shares.
pub struct Runtime {
    // Unbounded on purpose: the connection limits and each connection's
    // in-flight limit already bound how many evaluations can wait.
    jobs: mpsc::UnboundedSender<Job>,
    resets: mpsc::UnboundedSender<ResetReply>,
    state: watch::Receiver<State>,
    counters: Arc<Counters>,
    console: Arc<ConsoleLog>,
    stop: CancellationToken,
    supervisor: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Runtime {
    /// Starts the supervisor, which starts Ruby in the background. Must be
    /// called from a multi-threaded tokio runtime (see `process::set_up_child`).
    pub fn start(config: RuntimeConfig, console: Arc<ConsoleLog>) -> Runtime {
        let (jobs_tx, jobs) = mpsc::unbounded_channel();
        let (resets_tx, resets) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(State::Starting);
        let counters = Arc::new(Counters::default());
        let stop = CancellationToken::new();
        let supervisor = Supervisor {
            command: config.command,
            console: console.clone(),
            counters: counters.clone(),
            state: state_tx,
            current: None,
            jobs,
            resets,
            stop: stop.clone(),
            quick_crashes: 0,
        };
        let handle = tokio::spawn(supervisor.run());
        Runtime {
            jobs: jobs_tx,
            resets: resets_tx,
            state,
            counters,
            console,
            stop,
            supervisor: tokio::sync::Mutex::new(Some(handle)),
        }
    }

    /// Queues an evaluation and waits for it. A caller that gives up (its
    /// client disconnected) before its turn comes takes it out of the queue.
    pub async fn eval(&self, eval: Eval) -> Result<Evaluated, RuntimeError> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job { eval, reply })
            .map_err(|_| RuntimeError::Stopped)?;
        rx.await.map_err(|_| RuntimeError::Stopped)?
    }

    /// Whether `code` is a complete expression. Answered by the driver's reader
    /// thread, so it does not wait for a running evaluation.
    pub async fn complete(&self, code: &str) -> Result<bool, RuntimeError> {
        let process = self.running().await?;
        let reply = process
            .call(|id| Request::Complete { id, code })
            .await
            .map_err(|exited| RuntimeError::Crashed { exited: exited.0 })?;
        Ok(reply.complete.unwrap_or(true))
    }

    /// Kills the process (failing a running evaluation) and starts a new one.
    pub async fn reset(&self) -> Result<u32, RuntimeError> {
        let (tx, rx) = oneshot::channel();
        self.resets.send(tx).map_err(|_| RuntimeError::Stopped)?;
        rx.await.map_err(|_| RuntimeError::Stopped)?
    }

    pub fn snapshot(&self) -> Snapshot {
        let (state, process, problem) = match &*self.state.borrow() {
            State::Starting => ("starting", None, None),
            State::Running(p) => ("running", Some(p.info.clone()), None),
            State::Unavailable(why) => ("unavailable", None, Some(why.clone())),
            State::Stopped => ("stopped", None, None),
        };
        Snapshot {
            state,
            process,
            problem,
            evals: self.counters.evals.load(Ordering::Relaxed),
            restarts: self.counters.restarts.load(Ordering::Relaxed),
        }
    }

    pub fn console(&self) -> &ConsoleLog {
        &self.console
    }

    /// Waits until the runtime is running, or says why it is not.
    async fn running(&self) -> Result<Arc<RubyProcess>, RuntimeError> {
        let mut state = self.state.clone();
        let settled = tokio::time::timeout(
            STARTUP_TIMEOUT,
            state.wait_for(|s| !matches!(s, State::Starting)),
        )
        .await;
        match settled {
            Ok(Ok(state)) => match &*state {
                State::Running(p) => Ok(p.clone()),
                State::Unavailable(message) => Err(RuntimeError::Unavailable {
                    message: message.clone(),
                }),
                State::Stopped | State::Starting => Err(RuntimeError::Stopped),
            },
            Ok(Err(_)) => Err(RuntimeError::Stopped),
            Err(_) => Err(RuntimeError::Unavailable {
                message: "the Ruby runtime is still starting; try again".into(),
            }),
        }
    }

    /// Stops the process (politely, then not) and the supervisor. Evaluations
    /// still queued fail with [`RuntimeError::Stopped`].
    pub async fn stop(&self) {
        self.stop.cancel();
        if let Some(handle) = self.supervisor.lock().await.take() {
            let _ = handle.await;
        }
    }
}

/// The task that owns the Ruby process.
struct Supervisor {
    command: Vec<String>,
    console: Arc<ConsoleLog>,
    counters: Arc<Counters>,
    state: watch::Sender<State>,
    current: Option<Arc<RubyProcess>>,
    jobs: mpsc::UnboundedReceiver<Job>,
    resets: mpsc::UnboundedReceiver<ResetReply>,
    stop: CancellationToken,
    /// Crashes in a row of processes that died young.
    quick_crashes: u32,
}

/// How a running evaluation ended.
enum Ended {
    Replied(Reply),
    Died(String),
    TimedOut,
    ResetBy(ResetReply),
    Stopping,
}

impl Supervisor {
    async fn run(mut self) {
        let _ = self.start().await;
        loop {
            let current = self.current.clone();
            let idle_exit = async move {
                match current {
                    Some(process) => process.exited().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.stop.cancelled() => break,
                Some(reply) = self.resets.recv() => {
                    let _ = reply.send(self.restart("reset requested").await);
                }
                exited = idle_exit => self.after_idle_exit(exited.0).await,
                Some(job) = self.jobs.recv() => self.run_job(job).await,
            }
        }
        self.shut_down().await;
    }

    async fn start(&mut self) -> Result<Arc<RubyProcess>, RuntimeError> {
        self.state.send_replace(State::Starting);
        match RubyProcess::spawn(&self.command, &self.console, STARTUP_TIMEOUT).await {
            Ok(process) => {
                let process = Arc::new(process);
                tracing::info!(
                    pid = process.info.pid,
                    ruby = %process.info.ruby_description,
                    "ruby runtime started"
                );
                self.current = Some(process.clone());
                self.state.send_replace(State::Running(process.clone()));
                Ok(process)
            }
            Err(e) => {
                tracing::warn!("{e}");
                self.console.mark(&e.0);
                self.current = None;
                self.state.send_replace(State::Unavailable(e.0.clone()));
                Err(RuntimeError::Unavailable { message: e.0 })
            }
        }
    }

    /// The live process, started on demand (a missing interpreter may have
    /// been installed since the last attempt).
    async fn ensure_running(&mut self) -> Result<Arc<RubyProcess>, RuntimeError> {
        match &self.current {
            Some(process) if !process.has_exited() => Ok(process.clone()),
            _ => self.start().await,
        }
    }

    /// Kills the current process (if any), waits for it, and starts a new one.
    async fn restart(&mut self, reason: &str) -> Result<u32, RuntimeError> {
        if let Some(process) = self.current.take() {
            process.kill();
            let exited = process.exited().await;
            tracing::info!(pid = process.info.pid, %exited, reason, "restarting the ruby runtime");
            self.console.mark(&format!(
                "runtime pid {} stopped ({exited}): {reason}",
                process.info.pid
            ));
            self.counters.restarts.fetch_add(1, Ordering::Relaxed);
        }
        self.start().await.map(|p| p.info.pid)
    }

    async fn after_idle_exit(&mut self, exited: String) {
        let Some(process) = self.current.take() else {
            return;
        };
        let lived = process.info.started_at.elapsed().unwrap_or_default();
        tracing::warn!(pid = process.info.pid, %exited, "the ruby runtime exited on its own; restarting it");
        self.console.mark(&format!(
            "runtime pid {} exited on its own ({exited})",
            process.info.pid
        ));
        self.counters.restarts.fetch_add(1, Ordering::Relaxed);
        if lived < HEALTHY_AFTER {
            self.quick_crashes += 1;
        } else {
            self.quick_crashes = 0;
        }
        if self.quick_crashes > 1 {
            let delay = Duration::from_millis(100)
                .saturating_mul(1 << self.quick_crashes.min(8))
                .min(MAX_BACKOFF);
            tracing::warn!(
                ?delay,
                crashes = self.quick_crashes,
                "the runtime keeps crashing; waiting before the next start"
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.stop.cancelled() => return,
            }
        }
        let _ = self.start().await;
    }

    async fn run_job(&mut self, job: Job) {
        if job.reply.is_closed() {
            // Its client went away while it waited: nobody wants the result.
            return;
        }
        let process = match self.ensure_running().await {
            Ok(process) => process,
            Err(e) => {
                let _ = job.reply.send(Err(e));
                return;
            }
        };
        self.counters.evals.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let Eval {
            code,
            scope,
            file,
            show,
            timeout,
        } = &job.eval;
        let call = process.call(|id| Request::Eval {
            id,
            code,
            scope: *scope,
            file: file.as_deref(),
            show: *show,
        });
        let ended = tokio::select! {
            reply = call => match reply {
                Ok(reply) => Ended::Replied(reply),
                Err(exited) => Ended::Died(exited.0),
            },
            _ = tokio::time::sleep(*timeout) => Ended::TimedOut,
            Some(reset) = self.resets.recv() => Ended::ResetBy(reset),
            _ = self.stop.cancelled() => Ended::Stopping,
        };
        let timeout = *timeout;
        let outcome = match ended {
            Ended::Replied(reply) => {
                tracing::debug!(elapsed = ?started.elapsed(), ok = reply.ok, "evaluation finished");
                let _ = job.reply.send(Ok(evaluated(reply)));
                return;
            }
            Ended::Stopping => {
                let _ = job.reply.send(Err(RuntimeError::Stopped));
                return;
            }
            Ended::Died(exited) => {
                tracing::warn!(pid = process.info.pid, %exited, "the ruby runtime died during an evaluation");
                let _ = job.reply.send(Err(RuntimeError::Crashed {
                    exited: exited.clone(),
                }));
                format!("it exited during an evaluation ({exited})")
            }
            Ended::TimedOut => {
                tracing::warn!(
                    pid = process.info.pid,
                    ?timeout,
                    "evaluation timed out; killing the ruby runtime"
                );
                process.kill();
                process.exited().await;
                let _ = job
                    .reply
                    .send(Err(RuntimeError::Timeout { after: timeout }));
                format!(
                    "an evaluation ran past {}",
                    humantime::format_duration(timeout)
                )
            }
            Ended::ResetBy(reset) => {
                process.kill();
                process.exited().await;
                let _ = job.reply.send(Err(RuntimeError::Reset));
                let result = self.restart("reset requested during an evaluation").await;
                let _ = reset.send(result);
                return;
            }
        };
        drop(process);
        let _ = self.restart(&outcome).await;
    }

    async fn shut_down(mut self) {
        self.jobs.close();
        while let Ok(job) = self.jobs.try_recv() {
            let _ = job.reply.send(Err(RuntimeError::Stopped));
        }
        self.resets.close();
        while let Ok(reset) = self.resets.try_recv() {
            let _ = reset.send(Err(RuntimeError::Stopped));
        }
        if let Some(process) = self.current.take() {
            process.close_stdin().await;
            let exited = match tokio::time::timeout(STOP_GRACE, process.exited()).await {
                Ok(exited) => exited,
                Err(_) => {
                    process.kill();
                    process.exited().await
                }
            };
            tracing::info!(pid = process.info.pid, %exited, "ruby runtime stopped");
            self.console.mark(&format!(
                "runtime pid {} stopped ({exited}): daemon shutting down",
                process.info.pid
            ));
        }
        self.state.send_replace(State::Stopped);
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
