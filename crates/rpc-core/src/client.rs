//! The client side: the same peer, connected outwards, for the daemons' client
//! commands, the benchmarks and the tests. Over TCP, Unix sockets, WebSocket
//! ([`crate::codec::websocket`]) or a child's stdio ([`crate::child`]).

use std::path::Path;
use std::sync::Arc;

use tokio::net::{TcpStream, UnixStream};

use crate::codec::{self, Transport};
use crate::peer::{Connection, PeerConfig, PeerHandle};
use crate::router::Router;

/// Runs a connection in the background and returns its handle. Incoming
/// requests and notifications go to `router`.
pub fn spawn<S: Send + Sync + 'static>(transport: Transport, router: Arc<Router<S>>, state: S) -> PeerHandle {
    spawn_with(transport, router, state, PeerConfig::default())
}

/// [`spawn`] with the connection's limits and timeouts.
pub fn spawn_with<S: Send + Sync + 'static>(
    transport: Transport,
    router: Arc<Router<S>>,
    state: S,
    config: PeerConfig,
) -> PeerHandle {
    let (peer, conn) = Connection::new(transport, router, Arc::new(state), config);
    tokio::spawn(conn.run());
    peer
}

/// Connects to an NDJSON server on a Unix socket.
pub async fn connect_unix(path: impl AsRef<Path>) -> std::io::Result<PeerHandle> {
    let (r, w) = UnixStream::connect(path).await?.into_split();
    Ok(spawn(Transport::ndjson(r, w, codec::DEFAULT_MAX_MESSAGE), Router::<()>::empty(), ()))
}

/// Connects to an NDJSON server over TCP.
pub async fn connect_ndjson(addr: &str) -> std::io::Result<PeerHandle> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    Ok(spawn(Transport::ndjson(r, w, codec::DEFAULT_MAX_MESSAGE), Router::<()>::empty(), ()))
}
