//! Graceful shutdown: one signal shared by every listener and connection.
//!
//! Two phases. **Drain** (first SIGTERM/SIGINT): listeners stop accepting,
//! connections answer new requests with an error, let running ones finish, send
//! the daemon's goodbye and close. **Abort** (the grace period ran out): whatever
//! is still running is dropped. A second signal during the drain exits at once,
//! for the operator who really means it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Exit code after a second signal cut the drain short.
pub const FORCED_EXIT_CODE: i32 = 1;

/// Default time connections get to finish after the first signal.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    drain: CancellationToken,
    abort: CancellationToken,
    tasks: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts draining (what the first signal does).
    pub fn begin(&self) {
        self.drain.cancel();
    }

    pub fn is_draining(&self) -> bool {
        self.drain.is_cancelled()
    }

    /// Resolves once draining has begun.
    pub async fn draining(&self) {
        self.drain.cancelled().await
    }

    /// Resolves once the grace period is over and everything must stop.
    pub async fn aborted(&self) {
        self.abort.cancelled().await
    }

    /// Spawns a task that shutdown waits for (a connection, an accept loop).
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Turns SIGTERM and SIGINT into [`Shutdown::begin`]; a second one exits the
    /// process at once with [`FORCED_EXIT_CODE`]. SIGHUP, which would end the
    /// process by default, is logged and ignored: a daemon that reloads on it
    /// listens for it itself (tokio delivers a signal to every listener).
    pub fn on_signals(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hangup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                tracing::info!("SIGHUP ignored: nothing to reload");
            }
        });
        let this = self.clone();
        tokio::spawn(async move {
            for round in 0.. {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                if round == 0 {
                    tracing::info!(signal = name, "shutting down; a second signal exits at once");
                    this.begin();
                } else {
                    tracing::warn!(signal = name, "second signal: exiting now");
                    std::process::exit(FORCED_EXIT_CODE);
                }
            }
        });
        Ok(())
    }

    /// Waits for the drain to begin, then for every tracked task to finish, at
    /// most `grace`; after that, aborts the rest and gives them a moment to go.
    pub async fn wait(&self, grace: Duration) {
        self.draining().await;
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait()).await.is_err() {
            tracing::warn!(tasks = self.tasks.len(), ?grace, "grace period over; closing what is left");
            self.abort.cancel();
            let _ = tokio::time::timeout(Duration::from_millis(500), self.tasks.wait()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_returns_when_tasks_finish_within_grace() {
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        shutdown.spawn(async move {
            s.draining().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        });
        shutdown.begin();
        let started = std::time::Instant::now();
        shutdown.wait(Duration::from_secs(5)).await;
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn tasks_past_the_grace_period_are_aborted() {
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        let task = shutdown.spawn(async move {
            s.aborted().await;
            "aborted"
        });
        shutdown.begin();
        shutdown.wait(Duration::from_millis(50)).await;
        assert_eq!(task.await.unwrap(), "aborted");
    }
}
