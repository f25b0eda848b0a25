//! The daemon, wired on top of everything else: both servers' listeners, the
//! Ruby runtime and the [`App`] they share, their method tables, all on
//! rpc-core's start-up path (listeners, signals, READY=1, drain); after the
//! drain, Ruby is stopped.

use std::sync::Arc;
use std::time::Duration;

use rpc_core::PeerConfig;
use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::{Listener, NdjsonLimits};
use rpc_core::shutdown::{DEFAULT_GRACE, Stopped};

use crate::config::Config;
use crate::methods;
use crate::paths::PathPolicy;
use crate::runtime::{ConsoleLog, Runtime, RuntimeConfig};
use crate::state::{App, BridgeConn, ReplConn};

/// After a second signal, how long Ruby gets to stop before its process
/// group is killed: the operator asked for an exit now.
const FORCED_STOP: Duration = Duration::from_millis(500);

pub async fn run(config: Config) -> Result<Stopped, StartError> {
    let mut daemon = Daemon::start("supex-bridge", DEFAULT_GRACE)?;
    daemon.require_token_beyond_loopback("SUPEX_AUTH_TOKEN", config.auth_token.as_deref());
    // Both listeners before Ruby starts: a port in use stops the daemon
    // without a runtime to tear down.
    let bridge_listener = daemon.listen_tcp(Some("bridge"), config.bridge_addr, "SUPEX_HOST/SUPEX_PORT")?;
    let repl_listener = match config.repl_addr {
        Some(addr) => Some(daemon.listen_tcp(Some("repl"), addr, "SUPEX_REPL_HOST/SUPEX_REPL_PORT")?),
        None => None,
    };
    let limits = limits(&config);
    let app = Arc::new(start_app(config));
    refuse_waiting_evaluations_on_drain(&daemon, &app);
    serve(&mut daemon, &app, limits, bridge_listener, repl_listener);

    let stopped = daemon.run().await;
    match stopped {
        Stopped::Clean => app.runtime.stop().await,
        Stopped::Forced => stop_at_once(&app.runtime).await,
    }
    tracing::info!("supex-bridge stopped");
    Ok(stopped)
}

/// Starts Ruby (in the background: the servers answer `ping` with
/// `starting` meanwhile) and gathers what every connection shares.
fn start_app(config: Config) -> App {
    let console = Arc::new(ConsoleLog::new(config.log_dir.as_deref()));
    if let Some(path) = console.path() {
        tracing::info!(path = %path.display(), "runtime console log");
    }
    let runtime = Runtime::start(RuntimeConfig { command: config.ruby }, console);
    log_policy(&config.policy);
    App {
        runtime,
        policy: config.policy,
        auth_token: config.auth_token,
        eval_timeout: config.eval_timeout,
        max_message: config.max_message,
    }
}

fn log_policy(policy: &PathPolicy) {
    let project_root = policy.project_root().display();
    match policy.roots() {
        Some(roots) => tracing::info!(
            roots = %roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(":"),
            %project_root,
            "file tools may touch these roots"
        ),
        None => tracing::info!(%project_root, "file tools may touch any path"),
    }
}

/// Evaluations waiting for Ruby's turn are refused as the drain begins;
/// only the running one gets the grace period.
fn refuse_waiting_evaluations_on_drain(daemon: &Daemon, app: &Arc<App>) {
    let shutdown = daemon.shutdown().clone();
    let waiting = app.clone();
    tokio::spawn(async move {
        shutdown.draining().await;
        waiting.runtime.refuse_waiting();
    });
}

/// The same limits on both servers.
fn limits(config: &Config) -> NdjsonLimits {
    NdjsonLimits {
        max_message: config.max_message,
        max_connections: config.max_connections,
        peer: PeerConfig {
            // Every method but `ping` needs a hello: idle sockets that never
            // send one must not hold the connection slots.
            handshake_deadline: Some(config.hello_timeout),
            write_stall: config.write_stall,
            write_budget: config.write_budget,
            backlog_bytes: config.backlog_bytes,
            ..PeerConfig::default()
        },
        ..NdjsonLimits::default()
    }
}

/// Both servers, each with its method table, on one [`App`].
fn serve(
    daemon: &mut Daemon,
    app: &Arc<App>,
    limits: NdjsonLimits,
    bridge_listener: Listener,
    repl_listener: Option<Listener>,
) {
    let bridge_addr = bridge_listener.local_addr();
    let bridge = methods::bridge_router(app.clone());
    daemon.serve_ndjson(bridge_listener, "bridge", limits.clone(), bridge, BridgeConn::default);
    let mut repl_addr = None;
    if let Some(listener) = repl_listener {
        repl_addr = Some(listener.local_addr());
        daemon.serve_ndjson(listener, "repl", limits, methods::repl_router(app.clone()), ReplConn::default);
    }
    tracing::info!(
        bridge = %bridge_addr,
        repl = %repl_addr.as_deref().unwrap_or("disabled"),
        "supex-bridge listening"
    );
}

/// Stops Ruby without the usual grace: an evaluation still running would
/// keep [`Runtime::stop`] waiting on its turn, so after [`FORCED_STOP`] the
/// runtime's process group (it leads one) is killed here.
async fn stop_at_once(runtime: &Runtime) {
    let pid = runtime.snapshot().process.map(|p| p.pid);
    if tokio::time::timeout(FORCED_STOP, runtime.stop()).await.is_ok() {
        return;
    }
    if let Some(pid) = pid.and_then(|pid| i32::try_from(pid).ok()).filter(|pid| *pid > 0) {
        tracing::warn!(pid, "ruby runtime did not stop in time; killing its process group");
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}
