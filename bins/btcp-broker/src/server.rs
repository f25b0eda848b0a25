//! Running the broker: the listener (ours or systemd's), HTTP/1.1 on each
//! connection, the idle-session sweeper, and graceful shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use rpc_core::Shutdown;
use rpc_core::cli::config_error;
use rpc_core::listen::{self, Listener, Stream};
use rpc_core::systemd;
use tokio::io::{AsyncRead, AsyncWrite};
use tower_service::Service as _;

use crate::broker::Broker;
use crate::config::Config;
use crate::http::admission::PeerAddr;

/// HTTP connections held besides the broker's peers (requests in progress,
/// keep-alive connections of scrapers and POSTing SSE clients).
const EXTRA_HTTP_CONNECTIONS: usize = 1024;

/// A client must send its request headers within this time (slowloris).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(config: Config) -> anyhow::Result<()> {
    let listener = match systemd::take_listener(None).context("taking the systemd socket")? {
        Some(listener) => {
            check_activated_bind(&listener, &config);
            listener
        }
        None => {
            Listener::Tcp(listen::bind_tcp(config.listen).with_context(|| format!("listening on {}", config.listen))?)
        }
    };
    let address = listener.local_addr();
    // Every connection is a file descriptor; a soft limit of 1024 (a common
    // default) would refuse connections long before BTCP_MAX_CONNECTIONS.
    let wanted = (config.max_connections + EXTRA_HTTP_CONNECTIONS) as u64;
    match listen::raise_fd_limit() {
        Some(limit) if limit < wanted => tracing::warn!(
            limit,
            wanted,
            "the open-file limit is below BTCP_MAX_CONNECTIONS; raise LimitNOFILE / ulimit -n"
        ),
        _ => {}
    }
    let shutdown = Shutdown::new();
    shutdown.on_signals().context("installing signal handlers")?;
    let broker = Broker::new(config, shutdown.clone());
    let app = crate::http::router(broker.clone());

    tokio::spawn(sweep_idle_sessions(broker.clone()));
    tracing::info!("listening on http://{address} (WebSocket ws://{address}/ws, demo page http://{address}/)");
    if let Err(e) = systemd::notify_ready() {
        tracing::warn!(error = %e, "could not notify systemd");
    }

    let max_http = broker.config.max_connections + EXTRA_HTTP_CONNECTIONS;
    let accept_shutdown = shutdown.clone();
    listen::serve(listener, "http", max_http, &shutdown, move |stream, peer| {
        serve_http(stream, peer, app.clone(), accept_shutdown.clone())
    })
    .await;
    shutdown.wait(broker.config.shutdown_grace).await;
    tracing::info!("stopped");
    Ok(())
}

/// A socket handed over by systemd must obey the same rule as our own bind:
/// nothing beyond loopback without a token.
fn check_activated_bind(listener: &Listener, config: &Config) {
    if let Listener::Tcp(tcp) = listener
        && let Ok(addr) = tcp.local_addr()
        && !addr.ip().is_loopback()
        && config.auth_token.is_none()
    {
        config_error(
            "BTCP_AUTH_TOKEN",
            format!("the socket systemd passed listens on {addr}, beyond loopback; set a token"),
        );
    }
}

async fn serve_http(stream: Stream, peer: String, app: Router, shutdown: Shutdown) {
    let peer = PeerAddr(peer.into());
    match stream {
        Stream::Tcp(s) => serve_io(TokioIo::new(s), peer, app, shutdown).await,
        Stream::Unix(s) => serve_io(TokioIo::new(s), peer, app, shutdown).await,
    }
}

async fn serve_io<I>(io: TokioIo<I>, peer: PeerAddr, app: Router, shutdown: Shutdown)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(peer.clone());
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

/// Removes sessions nobody has been attached to for the idle TTL.
async fn sweep_idle_sessions(broker: Arc<Broker>) {
    let ttl = broker.config.session_idle_ttl;
    let every = (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(10));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = broker.shutdown.draining() => return,
        }
        let removed = broker.sessions.remove_idle(ttl);
        if removed > 0 {
            tracing::debug!(removed, "idle sessions removed");
        }
    }
}
