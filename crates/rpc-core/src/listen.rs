//! Listeners: binding TCP and Unix sockets safely, and the accept loop.
//!
//! The accept loop bounds connections with a semaphore. Past the limit a new
//! connection is accepted and closed at once with a log line: left in the
//! backlog it would hang its client until a timeout, with no hint why.
//!
//! A daemon that requires a handshake (a token in `hello`) also bounds the
//! connections that have not done it yet ([`Unproven`]): past a share of the
//! limit (default half), the oldest of them is closed to admit a new one. So
//! idle sockets that never authenticate can fill at most that share, and a
//! real client always finds a way in.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::fs;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::codec::Transport;
use crate::peer::{Connection, PeerConfig, PeerHandle};
use crate::router::Router;
use crate::shutdown::Shutdown;

/// Binds a TCP listener with `SO_REUSEADDR`, so a restarted daemon does not
/// wait out TIME_WAIT connections of its previous run.
pub fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Raises the soft open-file limit to the hard limit. A daemon holding
/// thousands of connections needs it, and the soft default (often 1024) is a
/// leftover from select(2) that no tokio program needs. Returns the new limit.
pub fn raise_fd_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err() {
        return Some(soft);
    }
    Some(hard)
}

/// Whether binding `host` would expose the daemon beyond this machine.
pub fn is_loopback(host: &str) -> bool {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host.eq_ignore_ascii_case("localhost"),
    }
}

/// A Unix socket file we created; removed when dropped (on exit).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove socket file");
        }
    }
}

/// Why a Unix socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum UnixBindError {
    #[error("{0} is in use by a running process")]
    InUse(PathBuf),
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// Binds a Unix socket: parent directory created 0700 if missing, a stale socket
/// (nothing listening) replaced, a live one never taken over, mode 0600 set
/// before the first accept.
pub fn bind_unix(path: &Path) -> Result<(UnixListener, SocketFile), UnixBindError> {
    let io_err = |source| UnixBindError::Io { path: path.to_owned(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io_err)?;
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(UnixBindError::InUse(path.to_owned())),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing stale socket file");
                fs::remove_file(path).map_err(io_err)?;
            }
            Err(e) => return Err(io_err(e)),
        },
        Ok(_) => return Err(UnixBindError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    let listener = UnixListener::bind(path).map_err(io_err)?;
    let file = SocketFile { path: path.to_owned() };
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(io_err)?;
    Ok((listener, file))
}

/// Any listener the daemons use.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// An accepted connection.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Frames the stream as NDJSON, splitting it without a lock.
    pub fn into_ndjson(self, max_line: usize) -> Transport {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                Transport::ndjson(r, w, max_line)
            }
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                Transport::ndjson(r, w, max_line)
            }
        }
    }
}

impl Listener {
    pub fn local_addr(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Unix(l) => {
                l.local_addr().ok().and_then(|a| a.as_pathname().map(|p| p.display().to_string())).unwrap_or_default()
            }
        }
    }

    /// Accepts one connection. On Unix sockets, a peer running as another user
    /// is refused (defence in depth behind the 0600 mode) and `Ok(None)` returned.
    async fn accept(&self) -> io::Result<Option<(Stream, String)>> {
        match self {
            Listener::Tcp(l) => {
                let (stream, addr) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok(Some((Stream::Tcp(stream), addr.to_string())))
            }
            Listener::Unix(l) => {
                let (stream, _) = l.accept().await?;
                let cred = stream.peer_cred()?;
                let me = nix::unistd::geteuid().as_raw();
                if cred.uid() != me {
                    tracing::warn!(uid = cred.uid(), pid = ?cred.pid(), "refused a connection from another user");
                    return Ok(None);
                }
                let who = match cred.pid() {
                    Some(pid) => format!("pid {pid}"),
                    None => "local peer".to_owned(),
                };
                Ok(Some((Stream::Unix(stream), who)))
            }
        }
    }
}

/// Accepts connections until shutdown begins, at most `max_connections` served
/// at once, each handled by `handler` in a task shutdown waits for. Logging a
/// connection's life is left to the handler, which knows what the connection
/// carries (an HTTP connection may hand its socket to a WebSocket and end).
pub async fn serve<F, Fut>(
    listener: Listener,
    name: &'static str,
    max_connections: usize,
    shutdown: &Shutdown,
    handler: F,
) where
    F: Fn(Stream, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    accept_loop(listener, name, max_connections, shutdown, None, handler).await
}

/// The connections of one listener that have not completed the daemon's
/// handshake, oldest first.
#[derive(Debug)]
pub struct Unproven {
    share: usize,
    peers: Mutex<VecDeque<PeerHandle>>,
}

impl Unproven {
    /// At most `share` connections may be waiting for their handshake at once.
    pub fn new(share: usize) -> Arc<Self> {
        Arc::new(Unproven { share: share.max(1), peers: Mutex::new(VecDeque::new()) })
    }

    /// Counts a new connection, closing the oldest unproven one if the share
    /// is taken.
    pub fn admit(&self, peer: PeerHandle, listener: &str) {
        let mut peers = self.peers.lock();
        peers.retain(|p| !p.is_handshaken() && !p.is_closed());
        if peers.len() >= self.share
            && let Some(oldest) = peers.pop_front()
        {
            tracing::warn!(
                listener,
                conn = oldest.conn_id(),
                share = self.share,
                "too many connections without a handshake; closing the oldest"
            );
            oldest.close(1008, "handshake not completed");
        }
        peers.push_back(peer);
    }

    /// Closes the oldest unproven connection to make room; whether there was one.
    fn evict_oldest(&self, listener: &str) -> bool {
        let mut peers = self.peers.lock();
        peers.retain(|p| !p.is_handshaken() && !p.is_closed());
        match peers.pop_front() {
            Some(oldest) => {
                tracing::warn!(
                    listener,
                    conn = oldest.conn_id(),
                    "connection limit reached; closing the oldest connection without a handshake"
                );
                oldest.close(1008, "handshake not completed");
                true
            }
            None => false,
        }
    }

    /// How many connections are waiting for their handshake.
    pub fn len(&self) -> usize {
        let mut peers = self.peers.lock();
        peers.retain(|p| !p.is_handshaken() && !p.is_closed());
        peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How long a new connection may wait for the slot of an evicted one.
const EVICTION_WAIT: Duration = Duration::from_secs(2);

async fn accept_loop<F, Fut>(
    listener: Listener,
    name: &'static str,
    max_connections: usize,
    shutdown: &Shutdown,
    unproven: Option<Arc<Unproven>>,
    handler: F,
) where
    F: Fn(Stream, String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(max_connections));
    let handler = Arc::new(handler);
    let draining = shutdown.draining();
    tokio::pin!(draining);
    loop {
        let accepted = tokio::select! {
            _ = &mut draining => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(Some(conn)) => conn,
            Ok(None) => continue,
            Err(e) => {
                // Out of file descriptors or memory: back off instead of spinning.
                tracing::warn!(listener = name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            // Full, but some connections never proved themselves: one of them
            // makes room (its task ends once its close is written). The new
            // connection waits for that slot in a task of its own, so the loop
            // goes on accepting meanwhile.
            Err(_) if unproven.as_ref().is_some_and(|u| u.evict_oldest(name)) => {
                let (slots, handler) = (slots.clone(), handler.clone());
                shutdown.spawn(async move {
                    match tokio::time::timeout(EVICTION_WAIT, slots.acquire_owned()).await {
                        Ok(Ok(permit)) => serve_one(name, &peer, handler(stream, peer.clone()), permit).await,
                        _ => tracing::warn!(listener = name, %peer, "no slot freed in time; closing new connection"),
                    }
                });
                continue;
            }
            Err(_) => {
                tracing::warn!(listener = name, %peer, max_connections, "connection limit reached; closing new connection");
                drop(stream);
                continue;
            }
        };
        let conn = handler(stream, peer.clone());
        shutdown.spawn(async move { serve_one(name, &peer, conn, permit).await });
    }
    tracing::debug!(listener = name, "stopped accepting");
}

/// Runs one connection in the slot it holds.
async fn serve_one(name: &str, peer: &str, conn: impl Future<Output = ()>, permit: OwnedSemaphorePermit) {
    tracing::debug!(listener = name, %peer, "accepted");
    conn.await;
    drop(permit);
}

/// Serves NDJSON JSON-RPC on a listener: each accepted connection is a peer
/// with the method table `router` and a fresh per-connection state from
/// `new_state`, logged when it opens and when it closes (with why).
pub async fn serve_ndjson<S, F>(
    listener: Listener,
    name: &'static str,
    limits: NdjsonLimits,
    shutdown: &Shutdown,
    router: Arc<Router<S>>,
    new_state: F,
) where
    S: Send + Sync + 'static,
    F: Fn() -> S + Send + Sync + 'static,
{
    let inner = shutdown.clone();
    // With a handshake to wait for, connections without it get a share of the slots.
    let unproven = limits.peer.handshake_deadline.map(|_| Unproven::new(limits.handshake_share()));
    let admission = unproven.clone();
    accept_loop(listener, name, limits.max_connections, shutdown, unproven, move |stream, peer| {
        let transport = stream.into_ndjson(limits.max_message);
        let (handle, conn) = Connection::new(transport, router.clone(), Arc::new(new_state()), limits.peer.clone());
        let conn = conn.with_shutdown(&inner);
        if let Some(unproven) = &admission {
            unproven.admit(handle.clone(), name);
        }
        async move {
            tracing::info!(listener = name, %peer, conn = handle.conn_id(), "connection opened");
            let reason = conn.run().await;
            tracing::info!(listener = name, %peer, conn = handle.conn_id(), ?reason, "connection closed");
        }
    })
    .await
}

/// The limits of an NDJSON server.
#[derive(Clone, Debug)]
pub struct NdjsonLimits {
    /// Longest line (message or batch) accepted.
    pub max_message: usize,
    /// Connections served at once; more are accepted and closed.
    pub max_connections: usize,
    /// When `peer.handshake_deadline` is set: how many connections may wait
    /// for their handshake at once (`None`: half of `max_connections`).
    pub handshake_share: Option<usize>,
    pub peer: PeerConfig,
}

impl NdjsonLimits {
    fn handshake_share(&self) -> usize {
        self.handshake_share.unwrap_or(self.max_connections / 2).max(1)
    }
}

impl Default for NdjsonLimits {
    fn default() -> Self {
        NdjsonLimits {
            max_message: crate::codec::DEFAULT_MAX_MESSAGE,
            max_connections: 64,
            handshake_share: None,
            peer: PeerConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rpc-core-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn unix_socket_has_0600_in_a_new_0700_directory_and_is_removed_on_drop() {
        let dir = temp_dir("perm");
        let path = dir.join("sub/daemon.sock");
        let (listener, file) = bind_unix(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(dir.join("sub")).unwrap().mode() & 0o777, 0o700);
        drop(listener);
        drop(file);
        assert!(!path.exists());
        fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn stale_socket_is_replaced_but_live_one_is_not_taken_over() {
        let dir = temp_dir("stale");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("d.sock");
        // A socket file with nobody listening: what a SIGKILLed daemon leaves.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let (_live, _file) = bind_unix(&path).unwrap();
        assert!(matches!(bind_unix(&path), Err(UnixBindError::InUse(_))));
        fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_regular_file_is_never_replaced() {
        let dir = temp_dir("regular");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("not-a.sock");
        fs::write(&path, "data").unwrap();
        assert!(matches!(bind_unix(&path), Err(UnixBindError::NotASocket(_))));
        assert_eq!(fs::read_to_string(&path).unwrap(), "data");
        fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed_at_once() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new();
        let s = shutdown.clone();
        tokio::spawn(async move {
            serve(Listener::Tcp(listener), "test", 1, &s, |stream, _| async move {
                let Stream::Tcp(mut stream) = stream else { unreachable!() };
                let _ = stream.write_all(b"hi").await;
                tokio::time::sleep(Duration::from_secs(5)).await;
            })
            .await
        });
        let mut first = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 2];
        first.read_exact(&mut buf).await.unwrap();
        let mut second = TcpStream::connect(addr).await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(2), second.read(&mut buf)).await.unwrap().unwrap_or(0);
        assert_eq!(n, 0, "the second connection is closed, not served");
        shutdown.begin();
    }

    #[test]
    fn loopback_detection() {
        assert!(is_loopback("127.0.0.1") && is_loopback("::1") && is_loopback("localhost"));
        assert!(!is_loopback("0.0.0.0") && !is_loopback("192.168.1.2") && !is_loopback("example.com"));
    }
}
