//! The page's port: bound at start (a given address that cannot be bound
//! stops the daemon; the default one taken, say by a second host, leaves
//! this host without a page and says so), served one HTTP/1.1 connection at
//! a time per socket, connections without the token held to a share of the
//! slots ([`admission`](super::admission)), and announced: the URL with its
//! token is logged once and written to a 0600 file beside the control
//! socket, for `ctl web`.

use std::convert::Infallible;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use hyper::body::Incoming;
use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::Stream;
use rpc_core::{PeerConfig, Shutdown};
use tokio::io::{AsyncRead, AsyncWrite};
use tower_service::Service as _;

use super::access::Access;
use super::admission::{PageConnection, UnprovenConnections};
use super::routes;
use super::site::Site;
use crate::config::{Config, url_file};
use crate::state::{ControlSession, Host};

/// HTTP connections served at once (a live channel, once upgraded, no longer counts).
const MAX_CONNECTIONS: usize = 64;

/// Of those, how many may be without the token at once: idle sockets fill at
/// most half, so a person's request always finds a slot.
const MAX_UNPROVEN: usize = MAX_CONNECTIONS / 2;

/// Live channels open at once, as many as the control socket's connections.
const MAX_LIVE_CHANNELS: usize = 64;

/// The file holding the page's URL, removed when the daemon stops.
pub struct UrlFile(PathBuf);

impl Drop for UrlFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Starts serving the page, if it is on; the URL file lives as long as what is returned.
pub fn start(
    daemon: &mut Daemon,
    host: &Arc<Host>,
    config: &Config,
    control: Arc<rpc_core::Router<ControlSession>>,
    peer: PeerConfig,
) -> Result<Option<UrlFile>, StartError> {
    let Some(settings) = &config.web else {
        tracing::info!("editor page off (HERMES_HOST_HTTP=off)");
        return Ok(None);
    };
    let listener = match daemon.listen_tcp(Some("http"), settings.listen, "HERMES_HOST_HTTP") {
        Ok(listener) => listener,
        Err(e) if !settings.given => {
            tracing::warn!(error = %e, "no editor page: its default address is taken; set HERMES_HOST_HTTP (--http)");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let bound: SocketAddr = listener.local_addr().parse().unwrap_or(settings.listen);
    let site = Arc::new(Site {
        host: host.clone(),
        access: Access::new(bound, settings.token.clone()),
        control,
        peer,
        max_message: config.max_message,
        live_slots: Arc::new(tokio::sync::Semaphore::new(MAX_LIVE_CHANNELS)),
        shutdown: daemon.shutdown().clone(),
    });
    let app = routes::router(site);
    let shutdown = daemon.shutdown().clone();
    let unproven = Arc::new(UnprovenConnections::new(MAX_UNPROVEN));
    daemon.serve(listener, "http", MAX_CONNECTIONS, move |stream, _peer| {
        serve_connection(stream, app.clone(), shutdown.clone(), unproven.clone())
    });
    let url = format!("http://{}/?token={}", reachable(bound), settings.token);
    // The one place the token is logged, as Jupyter does: the person who
    // started the host opens it from here.
    tracing::info!(page = %url, "editor page");
    let file = url_file(&config.socket);
    match write_private(&file, &url) {
        Ok(()) => Ok(Some(UrlFile(file))),
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "cannot write the page's URL for `ctl web`");
            Ok(None)
        }
    }
}

/// Where a browser on this machine reaches a bind: a wildcard's loopback.
fn reachable(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), bound.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), bound.port()),
        _ => bound,
    }
}

/// Writes `text` to a new 0600 file at `path` (an old one is replaced).
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    writeln!(file, "{text}")
}

/// Serves one accepted socket until it closes, the daemon drains, or it is
/// closed for not showing the token ([`super::admission`]).
async fn serve_connection(stream: Stream, app: Router, shutdown: Shutdown, unproven: Arc<UnprovenConnections>) {
    let connection = unproven.admit();
    tokio::select! {
        () = serve_stream(stream, app, shutdown, connection.clone()) => {}
        () = connection.closing() => {}
    }
    unproven.forget(&connection);
}

async fn serve_stream(stream: Stream, app: Router, shutdown: Shutdown, connection: Arc<PageConnection>) {
    match stream {
        Stream::Tcp(s) => serve_io(s, app, shutdown, connection).await,
        Stream::Unix(s) => serve_io(s, app, shutdown, connection).await,
    }
}

async fn serve_io<I>(io: I, app: Router, shutdown: Shutdown, connection: Arc<PageConnection>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // The access check marks the connection proven when the token is right.
        request.extensions_mut().insert(connection.clone());
        let mut app = app.clone();
        async move { Ok::<_, Infallible>(app.call(request).await.unwrap_or_else(|e| match e {})) }
    });
    rpc_core::http::serve_connection(io, service, &shutdown, "page").await;
}
