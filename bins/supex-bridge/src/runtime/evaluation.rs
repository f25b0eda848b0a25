//! One evaluation: what is asked ([`Eval`]), what comes back ([`Evaluated`]),
//! and [`InFlight`], the evaluation holding the turn until its reply, its
//! timeout or the end of its process, even when its caller has gone.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::error::RuntimeError;
use super::lifecycle::{Inner, RuntimeChild};
use super::process::{KillReason, NoReply, PendingReply, RubyProcess};
use super::protocol::{Reply, Request, RubyException, Scope, Show};

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

/// The evaluation holding the turn. If its caller goes away mid-evaluation,
/// dropping this hands the rest (waiting, the timeout, a restart) to a task,
/// so the next evaluation still starts only after this one is over.
pub struct InFlight {
    inner: Arc<Inner>,
    turn: Option<OwnedMutexGuard<RuntimeChild>>,
    process: Arc<RubyProcess>,
    pending: Option<PendingReply>,
    deadline: Instant,
    timeout: Duration,
}

impl InFlight {
    /// Sends `eval` to `process`, whose turn `turn` is, and starts its clock.
    pub async fn send(
        inner: Arc<Inner>,
        turn: OwnedMutexGuard<RuntimeChild>,
        process: Arc<RubyProcess>,
        eval: &Eval,
    ) -> InFlight {
        let pending = process
            .request(|id| Request::Eval {
                id,
                code: &eval.code,
                scope: eval.scope,
                file: eval.file.as_deref(),
                show: eval.show,
            })
            .await;
        InFlight {
            inner,
            turn: Some(turn),
            process,
            pending: Some(pending),
            deadline: Instant::now() + eval.timeout,
            timeout: eval.timeout,
        }
    }

    pub async fn finish(&mut self) -> Result<Evaluated, RuntimeError> {
        let process = self.process.clone();
        let pending = self.pending.as_mut().expect("finished once");
        let ended = tokio::select! {
            reply = process.wait(pending) => match reply {
                Ok(reply) => Some(reply),
                // The reply was dropped, the process goes on: no restart.
                Err(NoReply::Unusable(why)) => {
                    self.pending = None;
                    return Err(RuntimeError::UnusableReply { why });
                }
                Err(NoReply::Exited(_)) => None,
            },
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
        if let Some(turn) = self.turn.take() {
            restart_in_background(self.inner.clone(), turn, why);
        }
        Err(error)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let (Some(mut pending), Some(mut turn)) = (self.pending.take(), self.turn.take()) else {
            return;
        };
        let inner = self.inner.clone();
        let process = self.process.clone();
        let deadline = self.deadline;
        tokio::spawn(async move {
            let finished = tokio::select! {
                reply = process.wait(&mut pending) => !matches!(reply, Err(NoReply::Exited(_))),
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
                    let _ = inner.start(&mut turn).await;
                }
            }
        });
    }
}

fn restart_in_background(inner: Arc<Inner>, mut turn: OwnedMutexGuard<RuntimeChild>, why: String) {
    tokio::spawn(async move {
        if inner.stop.is_cancelled() {
            return;
        }
        tracing::info!(reason = %why, "restarting the ruby runtime");
        let _ = inner.start(&mut turn).await;
    });
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
