//! `ralph-server run`: takes the task's locks, serves the control socket on
//! rpc-core's start-up path (0700 directory, 0600 socket, a stale socket
//! replaced, removed on exit), and runs the loop until it ends.
//!
//! Two shutdowns. The daemon's, begun by SIGTERM/SIGINT, stops the loop: the
//! agent gets SIGTERM, and SIGKILL after its grace. The control socket's
//! connections have one of their own, begun only once the loop has ended,
//! saved its final state and every subscriber's pump has queued the event
//! saying so: tied to the signal, they would close (at once when idle) before
//! an agent that ignores SIGTERM is even killed, and subscribers would never
//! learn how the loop ended.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rpc_core::Shutdown;
use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::{self, NdjsonLimits};
use rpc_core::shutdown::{DEFAULT_GRACE, Stopped};

use crate::agent;
use crate::agent_loop::{AgentLoop, Outcome, agent_for};
use crate::client_runtime::{self, ClientRuntime};
use crate::config::{AgentChoice, Config};
use crate::errors::RunError;
use crate::injected::PendingPrompts;
use crate::lock::{LockError, TaskLock};
use crate::methods;
use crate::prd::Prd;
use crate::state::{SavedState, Session};

/// How long the daemon's drain waits, after a signal, for the control socket
/// to close: the agent's stop (SIGKILL after its grace), then the
/// subscribers' last words. Past it, the loop kills the agent at once.
const DAEMON_GRACE: Duration = agent::STOP_GRACE.saturating_add(DEFAULT_GRACE);

/// After the loop's last event, how long subscribers get to take it: their
/// pumps to queue it, then their connections to drain. A subscriber that
/// does not read in that time loses it, and never holds the exit up longer.
const LAST_WORDS: Duration = DEFAULT_GRACE;
/// The same after a second signal, which asks to stop now.
const LAST_WORDS_FORCED: Duration = Duration::from_secs(1);

/// `ralph-server run`: the task opened and locked, the control socket
/// served, the loop run to its end, then the subscribers' last words and the
/// drain. The exit code is the loop's outcome's.
pub async fn run(config: Config) -> Result<ExitCode, RunError> {
    // Signals first: a SIGTERM that comes while the task is read (run-all's
    // Ctrl-C right after start) must stop the loop, not kill the process.
    let mut daemon = Daemon::start("ralph-server", DAEMON_GRACE)?;
    let (session, lock) = open_task(&config)?;
    let clients =
        client_runtime::build().map_err(|e| RunError::Refused(format!("cannot start the clients' runtime: {e}")))?;
    let control = serve_control(&mut daemon, &config, &session, &clients)?;
    let shutdown = daemon.shutdown().clone();
    let served = tokio::spawn(daemon.run());
    let outcome = AgentLoop::new(session.clone(), config.run, shutdown.clone()).run().await;
    let stopped = close(&session, &control, &shutdown, served).await;
    drop(clients);
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

/// The task's PRD, its lock, its saved state and injected prompts, as the
/// session the loop and the clients share. Anything unreadable is refused
/// (exit 2) before the socket exists.
fn open_task(config: &Config) -> Result<(Arc<Session>, TaskLock), RunError> {
    // Checked before anything else: a bad PRD is bad configuration.
    let prd = Prd::load(&config.task_dir).map_err(|e| RunError::Refused(e.to_string()))?;
    check_agents(config, &prd)?;
    // Locked before the state is read: another loop on the directory may be writing it.
    let lock = TaskLock::acquire(&config.task_dir, &config.socket_dir, &config.task_name).map_err(|e| match e {
        LockError::Held { .. }
        | LockError::Directory { .. }
        | LockError::Symlink { .. }
        | LockError::OpenDirectory { .. } => RunError::Refused(e.to_string()),
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
    Ok((session, lock))
}

/// Every agent the stories left will run is there to run: a missing one is
/// bad configuration at start (exit 2), not failed iterations later.
fn check_agents(config: &Config, prd: &Prd) -> Result<(), RunError> {
    for story in prd.user_stories.iter().filter(|s| !s.passes) {
        agent_for(&config.run.agent, prd, story).check_program(&config.run.project_root).map_err(|e| {
            RunError::Refused(format!(
                "{e} (story {}); install it, or choose the agent with --agent or --agent-cmd (RALPH_AGENT, RALPH_AGENT_CMD)",
                story.id
            ))
        })?;
    }
    Ok(())
}

/// Serves the control socket until its own shutdown, returned, is begun:
/// its connections, their requests and their events, on the clients'
/// runtime, which yields to the loop (see `client_runtime`).
fn serve_control(
    daemon: &mut Daemon,
    config: &Config,
    session: &Arc<Session>,
    clients: &ClientRuntime,
) -> Result<Shutdown, RunError> {
    listen::raise_fd_limit();
    let socket = config.socket_dir.join(format!("{}.sock", config.task_name));
    // Whatever stands in the socket's way (a file, a directory, another
    // server's live socket) is the configuration's to fix: exit 2.
    let listener = daemon.listen_unix(None, &socket, "RALPH_SOCKET_DIR").map_err(|e| match e {
        StartError::Unix { .. } => RunError::Refused(e.to_string()),
        e => RunError::Start(e),
    })?;
    let router = methods::router(session.clone()).map_err(|e| RunError::Refused(e.to_string()))?;
    let limits = NdjsonLimits {
        max_connections: config.max_connections,
        peer: rpc_core::PeerConfig { write_stall: config.write_stall, ..rpc_core::PeerConfig::default() },
        ..NdjsonLimits::default()
    };
    let control = Shutdown::new();
    // The daemon's drain waits for the accept loop, so the socket file stays
    // until the control socket's own drain has begun.
    let serve = {
        let control = control.clone();
        async move { listen::serve_ndjson(listener, "control", limits, &control, router, methods::Client::default).await }
    };
    let serving = clients.handle().spawn(serve);
    daemon.shutdown().spawn(async move {
        let _ = serving.await;
    });
    tracing::info!(
        task = %config.task_name,
        socket = %socket.display(),
        resumed_at = session.fields().iteration,
        project_root = %config.run.project_root.display(),
        "ralph-server running the loop"
    );
    Ok(control)
}

/// After the loop: its final state (saved and published) to every
/// subscriber, then the control socket's connections closed, then the
/// daemon's drain; how the daemon stopped.
async fn close(
    session: &Session,
    control: &Shutdown,
    shutdown: &Shutdown,
    served: tokio::task::JoinHandle<Stopped>,
) -> Stopped {
    let last_words = if shutdown.is_forced() { LAST_WORDS_FORCED } else { LAST_WORDS };
    if !session.end_events(last_words).await {
        tracing::info!(within = ?last_words, "a subscriber did not take the last events in time");
    }
    control.begin();
    control.wait(last_words).await;
    shutdown.begin();
    served.await.unwrap_or(Stopped::Forced)
}
