//! Running the broker on rpc-core's start-up path (listener, signals,
//! READY=1, drain): wiring only. The state, the method table and the HTTP
//! routes are built here and handed to each other; every HTTP connection is
//! served by `http/connection.rs`, and the session registry sweeps its idle
//! sessions.

use std::process::ExitCode;

use rpc_core::daemon::{Daemon, Failure, StartError};
use rpc_core::listen;
use rpc_core::shutdown::Stopped;

use crate::cluster::{Cluster, JoinError};
use crate::config::Config;
use crate::http;
use crate::http::mcp::HttpDoors;
use crate::methods;
use crate::state::Broker;

/// HTTP connections held besides the broker's peers (requests in progress,
/// keep-alive connections of scrapers and POSTing SSE clients).
const EXTRA_HTTP_CONNECTIONS: usize = 1024;

/// Why the broker did not start: the engine's reasons (a port in use, bad
/// settings), or its cluster out of reach (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum StartFailure {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Cluster(#[from] JoinError),
}

impl Failure for StartFailure {
    fn exit_code(&self) -> ExitCode {
        match self {
            StartFailure::Start(e) => e.exit_code(),
            StartFailure::Cluster(_) => ExitCode::FAILURE,
        }
    }
}

pub async fn run(config: Config) -> Result<Stopped, StartFailure> {
    let mut daemon = Daemon::start("btcp-broker", config.shutdown_grace)?;
    daemon.require_token_beyond_loopback("BTCP_AUTH_TOKEN", config.auth_token.as_deref());
    // Joined before listening: a broker that cannot reach its cluster says
    // so and exits rather than serve as a node nobody else can see, and an
    // open port means a node that is in its cluster.
    let cluster = match &config.cluster {
        Some(settings) => Some(Cluster::join(settings, config.max_agents_per_session).await?),
        None => None,
    };
    let listener = daemon.listen_tcp(None, config.listen, "BTCP_HOST/BTCP_PORT")?;
    let address = listener.local_addr();
    raise_fd_limit(config.max_connections);
    let broker = Broker::new(config, daemon.shutdown().clone(), methods::router(), cluster);
    let mcp_doors = HttpDoors::new(broker.clone());
    let app = http::router(broker.clone(), mcp_doors.clone());
    mcp_doors.set_app(app.clone());

    let sweeper = broker.clone();
    tokio::spawn(async move { sweeper.sessions.sweep_idle(sweeper.config.session_idle_ttl, &sweeper.shutdown).await });
    let max_http = broker.config.max_connections + EXTRA_HTTP_CONNECTIONS;
    let shutdown = daemon.shutdown().clone();
    daemon.serve(listener, "http", max_http, move |stream, peer| {
        http::connection::serve_socket(stream, peer, app.clone(), shutdown.clone())
    });
    tracing::info!("listening on http://{address} (WebSocket ws://{address}/ws, demo page http://{address}/)");
    let stopped = daemon.run().await;
    tracing::info!("stopped");
    Ok(stopped)
}

/// Every connection is a file descriptor; a soft limit of 1024 (a common
/// default) would refuse connections long before BTCP_MAX_CONNECTIONS. Only
/// a limit below the peers themselves is worth a warning on every start: the
/// spare HTTP connections beyond them are a convenience.
fn raise_fd_limit(max_connections: usize) {
    let wanted = (max_connections + EXTRA_HTTP_CONNECTIONS) as u64;
    match listen::raise_fd_limit() {
        Some(limit) if limit < max_connections as u64 => tracing::warn!(
            limit,
            wanted,
            "the open-file limit is below BTCP_MAX_CONNECTIONS; raise LimitNOFILE / ulimit -n"
        ),
        Some(limit) if limit < wanted => {
            tracing::debug!(limit, wanted, "fewer spare descriptors for HTTP requests than asked for")
        }
        _ => {}
    }
}
