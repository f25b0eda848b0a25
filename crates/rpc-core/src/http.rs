//! One HTTP/1.1 connection served until it closes or the daemon drains:
//! for the daemons that serve HTTP beside JSON-RPC (btcp-broker's port,
//! hermes-host's editor page). Feature `http`.

use std::convert::Infallible;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::Shutdown;

/// A client must send its request headers within this time (slowloris).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `io` with `service` (upgrades included: WebSockets) until the
/// connection ends; once `shutdown` drains, finishes the request in progress
/// (an SSE stream ends when its peer closes) and takes no new one, until the
/// drain is aborted. `what` names the connection in the debug log.
pub async fn serve_connection<I, S, B>(io: I, service: S, shutdown: &Shutdown, what: &str)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<hyper::Request<Incoming>, Response = hyper::Response<B>, Error = Infallible>,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "{what} connection ended with an error");
            }
        }
        () = shutdown.draining() => {
            connection.as_mut().graceful_shutdown();
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shutdown.aborted() => {}
            }
        }
    }
}
