//! [`Runtime`], the handle both servers share: evaluate in turn, ask whether
//! code is complete, reset, report health, stop.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::console::ConsoleLog;
use super::error::RuntimeError;
use super::evaluation::{Eval, Evaluated, InFlight};
use super::lifecycle::{Inner, STARTUP_TIMEOUT, STOP_GRACE, State, health_of, keep};
use super::process::{KillReason, NoReply, ProcessInfo, RubyProcess};
use super::protocol::Request;

#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// The interpreter and its leading arguments (`SUPEX_RUBY`, split).
    pub command: Vec<String>,
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

/// The handle every server shares.
pub struct Runtime {
    inner: Arc<Inner>,
    keeper: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Runtime {
    /// Starts Ruby in the background.
    pub fn start(config: RuntimeConfig, console: Arc<ConsoleLog>) -> Runtime {
        let inner = Arc::new(Inner::new(config.command, console));
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
        let mut turn = tokio::select! {
            turn = inner.turn.clone().lock_owned() => turn,
            () = inner.draining.cancelled() => return Err(RuntimeError::Stopped),
        };
        if inner.stop.is_cancelled() || inner.draining.is_cancelled() {
            return Err(RuntimeError::Stopped);
        }
        let process = inner.ensure_running(&mut turn).await?;
        inner.counters.evals.fetch_add(1, Ordering::Relaxed);
        InFlight::send(inner.clone(), turn, process, &eval).await.finish().await
    }

    /// Whether `code` is a complete expression. Answered by the driver's reader
    /// thread, so it does not wait for a running evaluation.
    pub async fn complete(&self, code: &str) -> Result<bool, RuntimeError> {
        let process = self.running().await?;
        let reply = process.call(|id| Request::Complete { id, code }).await.map_err(|failed| match failed {
            NoReply::Exited(exited) => RuntimeError::Crashed { exited: exited.to_string() },
            NoReply::Unusable(why) => RuntimeError::UnusableReply { why },
        })?;
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
            let mut turn = inner.turn.lock().await;
            if let Some(process) = turn.process.take() {
                process.kill(KillReason::Reset);
                process.exited().await;
            }
            return inner.start(&mut turn).await.map(|p| p.info.pid);
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
        if self.is_running() {
            return ("running", None);
        }
        health_of(&self.inner.state.borrow())
    }

    /// Whether Ruby runs now: [`Runtime::health`]'s common answer, without
    /// the pair it returns (`ping` asks this first, see there).
    pub fn is_running(&self) -> bool {
        self.inner.running.load(Ordering::Acquire) != 0
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

    /// The daemon is shutting down: evaluations waiting for their turn are
    /// refused at once, and no new one starts; the running one carries on.
    pub fn refuse_waiting(&self) {
        self.inner.draining.cancel();
    }

    /// Stops the process: closes its request pipe so the driver exits, and
    /// kills it if it has not within a grace period. Evaluations still
    /// waiting for their turn fail with [`RuntimeError::Stopped`].
    pub async fn stop(&self) {
        let inner = &self.inner;
        inner.draining.cancel();
        inner.stop.cancel();
        if let Some(keeper) = self.keeper.lock().await.take() {
            let _ = keeper.await;
        }
        let mut turn = inner.turn.lock().await;
        if let Some(process) = turn.process.take() {
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
