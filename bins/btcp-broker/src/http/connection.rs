//! One HTTP/1.1 connection, from a socket or from inside the broker (the
//! `/mcp` endpoint's agent connections): the same stack serves both, so
//! admission and auth cannot differ between them.

use std::convert::Infallible;

use axum::Router;
use hyper::body::Incoming;
use rpc_core::Shutdown;
use rpc_core::listen::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tower_service::Service as _;

use super::admission::PeerAddr;
use super::request::normalize_path;

/// Serves one accepted socket until it closes, or until the broker drains.
pub async fn serve_socket(stream: Stream, peer: String, app: Router, shutdown: Shutdown) {
    let peer = PeerAddr(peer.into());
    match stream {
        Stream::Tcp(s) => serve_io(s, peer, app, shutdown).await,
        Stream::Unix(s) => serve_io(s, peer, app, shutdown).await,
    }
}

/// Serves one in-memory connection made inside the broker (the `/mcp`
/// endpoint's agent connections) exactly as a socket's.
pub async fn serve_in_process(io: tokio::io::DuplexStream, app: Router, shutdown: Shutdown) {
    serve_io(io, PeerAddr("in-process (mcp)".into()), app, shutdown).await
}

async fn serve_io<I>(io: I, peer: PeerAddr, app: Router, shutdown: Shutdown)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(peer.clone());
        normalize_path(&mut request);
        let mut app = app.clone();
        async move { Ok::<_, Infallible>(app.call(request).await.unwrap_or_else(|e| match e {})) }
    });
    rpc_core::http::serve_connection(io, service, &shutdown, "http").await;
}
