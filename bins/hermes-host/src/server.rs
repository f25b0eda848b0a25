//! The daemon: the host state, its extensions, the control socket, on
//! rpc-core's start-up path (signals, the socket file, READY=1, drain).
//!
//! SIGTERM/SIGINT: the control socket drains while every extension is told
//! `shutdown {reason: "closing"}` (5 s to answer and exit, then SIGKILL to
//! its process group); then the socket file is removed and the exit code is
//! 0. SIGHUP reloads the config file and restarts the extensions.

use std::time::Duration;

use rpc_core::PeerConfig;
use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::NdjsonLimits;
use rpc_core::shutdown::{DEFAULT_GRACE, Stopped};

use crate::config::Config;
use crate::control::{self, ControlConn};
use crate::events;
use crate::extension::supervisor::SHUTDOWN_LIMIT;
use crate::host::Host;

pub async fn run(config: Config) -> Result<Stopped, StartError> {
    // Extensions get their 5 s for `shutdown` even when the drain of the
    // control socket used up the grace period.
    let mut daemon =
        Daemon::start("hermes-host", DEFAULT_GRACE)?.with_final_allowance(SHUTDOWN_LIMIT + Duration::from_secs(1));
    let listener = daemon.listen_unix(None, &config.socket, "HERMES_HOST_SOCKET")?;
    let host = Host::new(&config);
    tokio::spawn(events::relay(host.clone()));
    if let Some(path) = &config.open {
        match host.document.open(path).await {
            Ok(path) => tracing::info!(path = %path.display(), "message opened"),
            Err(e) => tracing::warn!(path = %path.display(), error = %e.message, "cannot open the message"),
        }
    }
    match &config.config_file {
        Some(path) if path.exists() => {
            tracing::info!(config = %path.display(), extensions = config.file.extensions.len(), "configuration read")
        }
        Some(path) => tracing::info!(config = %path.display(), "no config file; no extensions"),
        None => {}
    }
    host.start_all();

    let mut hangups = daemon.shutdown().hangups().map_err(StartError::Signals)?;
    let reloading = host.clone();
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration and extensions");
            if let Err(e) = reloading.reload(None).await {
                tracing::error!(error = %e.message, "reload failed; the running configuration stays");
            }
        }
    });

    let shutdown = daemon.shutdown().clone();
    let closing = host.clone();
    daemon.shutdown().spawn(async move {
        shutdown.draining().await;
        closing.close().await;
    });

    let limits = NdjsonLimits {
        max_message: config.max_message,
        max_connections: 64,
        handshake_share: None,
        peer: PeerConfig {
            backlog_bytes: (2 * config.max_message).max(rpc_core::peer::DEFAULT_BACKLOG_BYTES),
            write_budget: (2 * config.max_message).max(rpc_core::peer::DEFAULT_WRITE_BUDGET),
            write_stall: config.write_stall,
            ..PeerConfig::default()
        },
    };
    let for_connections = host.clone();
    daemon.serve_ndjson(listener, "control", limits, control::router(), move || {
        ControlConn::new(for_connections.clone())
    });
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
