//! `ralph-server run`: takes the task's lock, serves the control socket on
//! rpc-core's start-up path (0700 directory, 0600 socket, a stale socket
//! replaced, removed on exit), and runs the loop until it ends.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::{self, NdjsonLimits};
use rpc_core::shutdown::{DEFAULT_GRACE, Stopped};

use crate::agent_loop::{AgentLoop, Outcome};
use crate::config::{AgentChoice, Config};
use crate::files::SavedState;
use crate::injected::PendingPrompts;
use crate::lock::{LockError, TaskLock};
use crate::methods;
use crate::prd::Prd;
use crate::session::Session;

/// After the loop's last state change, how long subscribers get to read it
/// before their connections close.
const LINGER: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration or a task already running: exit 2.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Start(#[from] StartError),
}

impl rpc_core::daemon::Failure for RunError {
    fn exit_code(&self) -> ExitCode {
        match self {
            RunError::Refused(_) => ExitCode::from(2),
            RunError::Start(e) => e.exit_code(),
        }
    }
}

pub async fn run(config: Config) -> Result<ExitCode, RunError> {
    // Signals first: a SIGTERM that comes while the task is read (run-all's
    // Ctrl-C right after start) must stop the loop, not kill the process.
    let mut daemon = Daemon::start("ralph-server", DEFAULT_GRACE)?;
    // Checked before anything else: a bad PRD is bad configuration.
    let prd = Prd::load(&config.task_dir).map_err(|e| RunError::Refused(e.to_string()))?;
    // Locked before the state is read: another loop on the directory may be writing it.
    let lock = TaskLock::acquire(&config.task_dir, &config.socket_dir, &config.task_name).map_err(|e| match e {
        LockError::Held { .. } | LockError::Directory { .. } => RunError::Refused(e.to_string()),
        LockError::Io { .. } => RunError::Refused(format!("cannot lock the task: {e}")),
    })?;
    let mut saved =
        SavedState::load(&config.task_dir).map_err(|e| RunError::Refused(e.to_string()))?.unwrap_or_default();
    let injected = PendingPrompts::load(&config.task_dir, config.injected, saved.pending_prompt.take())
        .map_err(|e| RunError::Refused(format!("cannot read the injected prompts: {e}")))?;
    let agent = match &config.run.agent {
        AgentChoice::Command(cmd) => cmd.name.clone(),
        AgentChoice::Preset(name, true) => name.clone(),
        AgentChoice::Preset(name, false) => prd.agent.clone().unwrap_or_else(|| name.clone()),
    };
    let session = Arc::new(Session::new(
        config.task_name.clone(),
        config.task_dir.clone(),
        config.max_iterations,
        agent,
        &saved,
        injected,
    ));

    listen::raise_fd_limit();
    let socket = config.socket_dir.join(format!("{}.sock", config.task_name));
    let listener = daemon.listen_unix(None, &socket, "RALPH_SOCKET_DIR")?;
    let router = methods::router(session.clone()).map_err(|e| RunError::Refused(e.to_string()))?;
    let limits = NdjsonLimits { max_connections: config.max_connections, ..NdjsonLimits::default() };
    daemon.serve_ndjson(listener, "control", limits, router, methods::Client::default);
    tracing::info!(
        task = %config.task_name,
        socket = %socket.display(),
        resumed_at = session.fields().iteration,
        project_root = %config.run.project_root.display(),
        "ralph-server running the loop"
    );

    let shutdown = daemon.shutdown().clone();
    let served = tokio::spawn(daemon.run());
    let outcome = AgentLoop::new(session.clone(), config.run, shutdown.clone()).run().await;
    if session.events.subscriber_count() > 0 && !shutdown.is_draining() {
        tokio::time::sleep(LINGER).await;
    }
    shutdown.begin();
    let stopped = served.await.unwrap_or(Stopped::Forced);
    drop(lock);
    Ok(match (outcome, stopped) {
        (_, Stopped::Forced) => ExitCode::FAILURE,
        (outcome, Stopped::Clean) => {
            if outcome == Outcome::Interrupted {
                tracing::info!("interrupted; run the task again to resume");
            }
            ExitCode::from(outcome.exit_code())
        }
    })
}
