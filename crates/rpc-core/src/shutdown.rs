//! Graceful shutdown: one signal shared by every listener and connection.
//!
//! Two phases. **Drain** (first SIGTERM/SIGINT): listeners stop accepting,
//! connections answer new requests with an error, let running ones finish, send
//! the daemon's goodbye and close. **Abort** (the grace period ran out): whatever
//! is still running is told to stop, and gets a final allowance to do so.
//!
//! A second signal marks the shutdown **forced**: everything aborts and
//! [`Shutdown::wait`] returns [`Stopped::Forced`] at once. It does not exit the
//! process: the binary returns from `main`, so socket files and child process
//! groups are still cleaned up by their owners' destructors.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tokio_util::task::TaskTracker;

/// Default time connections get to finish after the first signal.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Default time tasks get to end after the grace period, once told to abort.
pub const DEFAULT_FINAL_ALLOWANCE: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Shutdown {
    drain: CancellationToken,
    abort: CancellationToken,
    forced: CancellationToken,
    tasks: TaskTracker,
    final_allowance: Duration,
    /// Set when the daemon listens for SIGHUP itself, so it is not also
    /// logged as ignored.
    hangup_handled: Arc<AtomicBool>,
}

/// How the shutdown ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Drained, within the grace period or after it: exit 0.
    Clean,
    /// A second signal cut the drain short: exit 1.
    Forced,
}

impl Stopped {
    pub fn exit_code(self) -> ExitCode {
        match self {
            Stopped::Clean => ExitCode::SUCCESS,
            Stopped::Forced => ExitCode::FAILURE,
        }
    }
}

impl From<Stopped> for ExitCode {
    fn from(stopped: Stopped) -> ExitCode {
        stopped.exit_code()
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            drain: CancellationToken::new(),
            abort: CancellationToken::new(),
            forced: CancellationToken::new(),
            tasks: TaskTracker::new(),
            final_allowance: DEFAULT_FINAL_ALLOWANCE,
            hangup_handled: Arc::default(),
        }
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// How long tasks still running when the grace period ends get to stop
    /// ([`DEFAULT_FINAL_ALLOWANCE`] unless set). A daemon whose connections
    /// await a goodbye request on abort (Hermes `shutdown`, 5 s) needs that
    /// long. Read by [`Shutdown::wait`] on this value, so set it before cloning.
    pub fn with_final_allowance(mut self, allowance: Duration) -> Self {
        self.final_allowance = allowance;
        self
    }

    /// Starts draining (what the first signal does).
    pub fn begin(&self) {
        self.drain.cancel();
    }

    /// Stops at once (what a second signal does): drains, aborts, and makes
    /// [`Shutdown::wait`] return [`Stopped::Forced`] without waiting.
    pub fn force(&self) {
        self.forced.cancel();
        self.drain.cancel();
        self.abort.cancel();
    }

    pub fn is_draining(&self) -> bool {
        self.drain.is_cancelled()
    }

    pub fn is_forced(&self) -> bool {
        self.forced.is_cancelled()
    }

    /// Resolves once draining has begun. (The token's own future rather than
    /// an `async fn` around it: every connection holds one for its life.)
    pub fn draining(&self) -> WaitForCancellationFuture<'_> {
        self.drain.cancelled()
    }

    /// Resolves once the grace period is over (or the stop was forced) and
    /// everything must stop. Always after [`Shutdown::draining`]: both ways
    /// to stop begin the drain first.
    pub fn aborted(&self) -> WaitForCancellationFuture<'_> {
        self.abort.cancelled()
    }

    /// Spawns a task that shutdown waits for (a connection, an accept loop).
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Turns the first SIGTERM or SIGINT into [`Shutdown::begin`] and the
    /// second into [`Shutdown::force`]. SIGHUP, which would end the process by
    /// default, is logged and ignored unless the daemon takes it with
    /// [`Shutdown::hangups`]. Must be called inside a tokio runtime.
    pub fn on_signals(&self) -> std::io::Result<()> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hangup = signal(SignalKind::hangup())?;
        let handled = self.hangup_handled.clone();
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                if !handled.load(Ordering::Relaxed) {
                    tracing::info!("SIGHUP ignored: nothing to reload");
                }
            }
        });
        let this = self.clone();
        tokio::spawn(async move {
            let mut first = true;
            loop {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                if first {
                    tracing::info!(signal = name, "shutting down; a second signal stops at once");
                    this.begin();
                    first = false;
                } else {
                    tracing::warn!(signal = name, "second signal: stopping now");
                    this.force();
                }
            }
        });
        Ok(())
    }

    /// SIGHUP, for a daemon that reloads on it; [`Shutdown::on_signals`] then
    /// no longer logs it as ignored.
    pub fn hangups(&self) -> std::io::Result<Signal> {
        let hangups = signal(SignalKind::hangup())?;
        self.hangup_handled.store(true, Ordering::Relaxed);
        Ok(hangups)
    }

    /// Waits for the drain to begin, then for every tracked task to finish, at
    /// most `grace`; after that, aborts the rest and gives them the final
    /// allowance to go. Returns at once, [`Stopped::Forced`], when the stop is
    /// forced: the caller then cleans up and exits without waiting for anyone.
    pub async fn wait(&self, grace: Duration) -> Stopped {
        self.draining().await;
        self.tasks.close();
        let finished = tokio::select! {
            biased;
            () = self.forced.cancelled() => return Stopped::Forced,
            finished = tokio::time::timeout(grace, self.tasks.wait()) => finished.is_ok(),
        };
        if finished {
            return Stopped::Clean;
        }
        tracing::warn!(tasks = self.tasks.len(), ?grace, "grace period over; closing what is left");
        self.abort.cancel();
        let allowance = self.final_allowance;
        tokio::select! {
            biased;
            () = self.forced.cancelled() => return Stopped::Forced,
            finished = tokio::time::timeout(allowance, self.tasks.wait()) => if finished.is_err() {
                tracing::warn!(tasks = self.tasks.len(), ?allowance, "tasks still running after the final allowance; leaving them");
            },
        }
        Stopped::Clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn wait_returns_when_tasks_finish_within_grace() {
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        shutdown.spawn(async move {
            s.draining().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        });
        shutdown.begin();
        let started = Instant::now();
        assert_eq!(shutdown.wait(Duration::from_secs(5)).await, Stopped::Clean);
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
        assert_eq!(shutdown.wait(Duration::from_millis(50)).await, Stopped::Clean);
        assert_eq!(task.await.unwrap(), "aborted");
    }

    #[tokio::test]
    async fn the_final_allowance_is_what_the_daemon_sets() {
        let shutdown = Shutdown::new().with_final_allowance(Duration::from_millis(400));
        let s = shutdown.clone();
        // A goodbye that takes 200 ms after the abort: inside the allowance.
        let task = shutdown.spawn(async move {
            s.aborted().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            "said goodbye"
        });
        shutdown.begin();
        assert_eq!(shutdown.wait(Duration::from_millis(20)).await, Stopped::Clean);
        assert!(task.is_finished());
        assert_eq!(task.await.unwrap(), "said goodbye");

        let shutdown = Shutdown::new().with_final_allowance(Duration::from_millis(50));
        shutdown.spawn(std::future::pending::<()>());
        shutdown.begin();
        let started = Instant::now();
        assert_eq!(shutdown.wait(Duration::from_millis(20)).await, Stopped::Clean);
        assert!(started.elapsed() < Duration::from_millis(500), "a stuck task is left behind");
    }

    #[tokio::test]
    async fn a_forced_stop_returns_at_once_and_aborts() {
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        let task = shutdown.spawn(async move {
            s.aborted().await;
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let waiter = tokio::spawn({
            let s = shutdown.clone();
            async move { s.wait(Duration::from_secs(60)).await }
        });
        shutdown.begin();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        let started = Instant::now();
        shutdown.force();
        assert_eq!(waiter.await.unwrap(), Stopped::Forced);
        assert!(started.elapsed() < Duration::from_millis(500));
        assert!(shutdown.is_forced() && !task.is_finished());
        // Forced before anything drained: still forced, not a hang.
        let shutdown = Shutdown::new();
        shutdown.force();
        assert_eq!(shutdown.wait(Duration::from_secs(60)).await, Stopped::Forced);
    }

    #[test]
    fn exit_codes_are_0_when_clean_and_1_when_forced() {
        assert_eq!(Stopped::Clean.exit_code(), ExitCode::SUCCESS);
        assert_eq!(Stopped::Forced.exit_code(), ExitCode::FAILURE);
    }
}
