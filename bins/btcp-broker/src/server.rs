//! Running the broker on rpc-core's start-up path (listener, signals,
//! READY=1, drain): HTTP/1.1 on each connection and the idle-session sweeper.

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use rpc_core::Shutdown;
use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::{self, Stream};
use rpc_core::shutdown::Stopped;
use tokio::io::{AsyncRead, AsyncWrite};
use tower_service::Service as _;

use crate::config::Config;
use crate::http::admission::PeerAddr;
use crate::methods;
use crate::state::Broker;

/// HTTP connections held besides the broker's peers (requests in progress,
/// keep-alive connections of scrapers and POSTing SSE clients).
const EXTRA_HTTP_CONNECTIONS: usize = 1024;

/// A client must send its request headers within this time (slowloris).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(config: Config) -> Result<Stopped, StartError> {
    let mut daemon = Daemon::start("btcp-broker", config.shutdown_grace)?;
    daemon.require_token_beyond_loopback("BTCP_AUTH_TOKEN", config.auth_token.as_deref());
    let listener = daemon.listen_tcp(None, config.listen, "BTCP_HOST/BTCP_PORT")?;
    let address = listener.local_addr();
    // Every connection is a file descriptor; a soft limit of 1024 (a common
    // default) would refuse connections long before BTCP_MAX_CONNECTIONS.
    // Only a limit below the peers themselves is worth a warning on every
    // start: the spare HTTP connections beyond them are a convenience.
    let wanted = (config.max_connections + EXTRA_HTTP_CONNECTIONS) as u64;
    match listen::raise_fd_limit() {
        Some(limit) if limit < config.max_connections as u64 => tracing::warn!(
            limit,
            wanted,
            "the open-file limit is below BTCP_MAX_CONNECTIONS; raise LimitNOFILE / ulimit -n"
        ),
        Some(limit) if limit < wanted => {
            tracing::debug!(limit, wanted, "fewer spare descriptors for HTTP requests than asked for")
        }
        _ => {}
    }
    let broker = Broker::new(config, daemon.shutdown().clone(), methods::router());
    let mcp_doors = crate::mcp::HttpDoors::new(broker.clone());
    let app = crate::http::router(broker.clone(), mcp_doors.clone());
    mcp_doors.set_app(app.clone());

    let sweeper = broker.clone();
    tokio::spawn(async move { sweeper.sessions.sweep_idle(sweeper.config.session_idle_ttl, &sweeper.shutdown).await });
    let max_http = broker.config.max_connections + EXTRA_HTTP_CONNECTIONS;
    let shutdown = daemon.shutdown().clone();
    daemon
        .serve(listener, "http", max_http, move |stream, peer| serve_http(stream, peer, app.clone(), shutdown.clone()));
    tracing::info!("listening on http://{address} (WebSocket ws://{address}/ws, demo page http://{address}/)");
    let stopped = daemon.run().await;
    tracing::info!("stopped");
    Ok(stopped)
}

async fn serve_http(stream: Stream, peer: String, app: Router, shutdown: Shutdown) {
    let peer = PeerAddr(peer.into());
    match stream {
        Stream::Tcp(s) => serve_io(TokioIo::new(s), peer, app, shutdown).await,
        Stream::Unix(s) => serve_io(TokioIo::new(s), peer, app, shutdown).await,
    }
}

/// Serves one in-memory connection made inside the broker (the `/mcp`
/// endpoint's agent connections) exactly as a socket's.
pub async fn serve_in_process(io: tokio::io::DuplexStream, app: Router, shutdown: Shutdown) {
    serve_io(TokioIo::new(io), PeerAddr("in-process (mcp)".into()), app, shutdown).await
}

async fn serve_io<I>(io: TokioIo<I>, peer: PeerAddr, app: Router, shutdown: Shutdown)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(peer.clone());
        crate::http::request::normalize_path(&mut request);
        let mut app = app.clone();
        async move { Ok::<_, Infallible>(app.call(request).await.unwrap_or_else(|e| match e {})) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "http connection ended with an error");
            }
        }
        () = shutdown.draining() => {
            // Finish the request in progress (an SSE stream ends when its peer
            // closes), take no new one.
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shutdown.aborted() => {}
            }
        }
    }
}
