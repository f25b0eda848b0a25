//! The daemon, wiring only: the host state with its method tables, its
//! extensions, the control socket and the editor page (`web`), on rpc-core's
//! start-up path (signals, the socket file, READY=1, drain).
//!
//! SIGTERM/SIGINT: the control socket drains while every extension is told
//! `shutdown {reason: "closing"}` (5 s to answer and exit, then SIGKILL to
//! its process group); then the socket file is removed and the exit code is
//! 0. SIGHUP reloads the config file and restarts the extensions.

use std::sync::Arc;
use std::time::Duration;

use rpc_core::PeerConfig;
use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::NdjsonLimits;
use rpc_core::shutdown::{DEFAULT_GRACE, Stopped};

use crate::config::Config;
use crate::events;
use crate::extension::lineup;
use crate::extension::supervisor::SHUTDOWN_LIMIT;
use crate::methods;
use crate::state::{ControlSession, Host};
use crate::web;

pub async fn run(config: Config) -> Result<Stopped, StartError> {
    // Extensions get their 5 s for `shutdown` even when the drain of the
    // control socket used up the grace period.
    let mut daemon =
        Daemon::start("hermes-host", DEFAULT_GRACE)?.with_final_allowance(SHUTDOWN_LIMIT + Duration::from_secs(1));
    let listener = daemon.listen_unix(None, &config.socket, "HERMES_HOST_SOCKET")?;
    let host = Host::new(&config, methods::extension_router());
    tokio::spawn(events::relay(host.clone()));
    open_at_start(&host, &config).await;
    log_config_file(&config);
    lineup::start_all(&host);

    reload_on_hangup(&mut daemon, &host)?;
    let shutdown = daemon.shutdown().clone();
    let closing = host.clone();
    daemon.shutdown().spawn(async move {
        shutdown.draining().await;
        closing.close().await;
    });

    let limits = control_limits(&config);
    let control = methods::control_router();
    let _url_file = web::listener::start(&mut daemon, &host, &config, control.clone(), limits.peer.clone())?;
    let for_connections = host.clone();
    daemon.serve_ndjson(listener, "control", limits, control, move || ControlSession::new(for_connections.clone()));
    tracing::info!(socket = %config.socket.display(), "hermes-host listening");

    let stopped = daemon.run().await;
    match stopped {
        Stopped::Clean => host.close().await,
        // The operator wants out now: whatever is left is killed with its group.
        Stopped::Forced => {
            let _ = tokio::time::timeout(Duration::from_millis(500), host.close()).await;
        }
    }
    tracing::info!("hermes-host stopped");
    Ok(stopped)
}

/// `--open`: a message that cannot be opened is logged, and the host runs without one.
async fn open_at_start(host: &Host, config: &Config) {
    if let Some(path) = &config.open {
        match host.document.open(path).await {
            Ok(path) => tracing::info!(path = %path.display(), "message opened"),
            Err(e) => tracing::warn!(path = %path.display(), error = %e.message, "cannot open the message"),
        }
    }
}

fn log_config_file(config: &Config) {
    match &config.config_file {
        Some(path) if path.exists() => {
            tracing::info!(config = %path.display(), extensions = config.file.extensions.len(), "configuration read")
        }
        Some(path) => tracing::info!(config = %path.display(), "no config file; no extensions"),
        None => {}
    }
}

/// SIGHUP reloads the config file and every extension; a bad file keeps
/// the running configuration.
fn reload_on_hangup(daemon: &mut Daemon, host: &Arc<Host>) -> Result<(), StartError> {
    let mut hangups = daemon.shutdown().hangups().map_err(StartError::Signals)?;
    let host = host.clone();
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration and extensions");
            if let Err(e) = lineup::reload(&host, None).await {
                tracing::error!(error = %e.message, "reload failed; the running configuration stays");
            }
        }
    });
    Ok(())
}

/// A control request may carry a whole message (`message/set`): the backlog
/// holds two. Replies wait in the engine's default budget (8 MiB), not one
/// sized by the message: a client (or a page) that sends requests and never
/// reads holds that budget and about one reply more, as a large reply
/// (`message/get`) reserves its room before it is made. A reply larger than
/// the budget still goes out whole to a client that reads.
fn control_limits(config: &Config) -> NdjsonLimits {
    NdjsonLimits {
        max_message: config.max_message,
        max_connections: 64,
        handshake_share: None,
        peer: PeerConfig {
            backlog_bytes: (2 * config.max_message).max(rpc_core::peer::DEFAULT_BACKLOG_BYTES),
            write_budget: rpc_core::peer::DEFAULT_WRITE_BUDGET,
            write_stall: config.write_stall,
            ..PeerConfig::default()
        },
    }
}
