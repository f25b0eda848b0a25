//! The client side: the same peer, connected outwards, for the daemons' client
//! commands, the benchmarks and the tests.

use std::sync::Arc;

use tokio::net::TcpStream;

use crate::codec::{self, Transport};
use crate::peer::{Connection, PeerConfig, PeerHandle};
use crate::router::Router;

/// Runs a connection in the background and returns its handle. Incoming
/// requests and notifications go to `router`.
pub fn spawn<S: Send + Sync + 'static>(transport: Transport, router: Arc<Router<S>>, state: S) -> PeerHandle {
    let (peer, conn) = Connection::new(transport, router, Arc::new(state), PeerConfig::default());
    tokio::spawn(conn.run());
    peer
}

/// Connects to an NDJSON server over TCP.
pub async fn connect_ndjson(addr: &str) -> std::io::Result<PeerHandle> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    Ok(spawn(Transport::ndjson(r, w, codec::DEFAULT_MAX_MESSAGE), Router::<()>::empty(), ()))
}
