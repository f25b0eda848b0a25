//! Free ports for the daemons under test, and whether a daemon really holds
//! the port it was given.
//!
//! A port chosen free is free only for a moment: between the choice and the
//! daemon's bind, another test's daemon (or an outgoing connection, which
//! takes its local port from the same range) may take it. A test that only
//! checks that *something* accepts on the port then talks to a stranger. So
//! a daemon counts as listening only when the listening socket is one of its
//! own file descriptors, and a daemon that lost its port to another process
//! is started again on a fresh one ([`on_free_ports`]).

use std::net::TcpListener;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A free port on 127.0.0.1 held back with nothing listening on it, for a
/// test that points a client at a port before (or instead of) a daemon
/// serving it. A connection to it is refused, and while it is held no other
/// socket can take it: not another listener, and not an outgoing connection
/// for its own end (which [`free_port`]'s choice cannot rule out over the
/// seconds such a test takes). [`release`](Self::release) lets it go for
/// the daemon that is to serve it.
pub struct HeldPort {
    port: u16,
    _bound: tokio::net::TcpSocket,
}

impl HeldPort {
    pub fn new() -> HeldPort {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let port = socket.local_addr().unwrap().port();
        HeldPort { port, _bound: socket }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Lets the port go and returns it, for the daemon that is to serve it
    /// next (from here on it is as free as [`free_port`]'s). Returns once the
    /// port can be bound: a child that another thread of this process is
    /// starting holds a copy of every socket from its fork until its exec
    /// (close-on-exec closes it only then), so the port may stay bound for
    /// that moment after ours is closed.
    pub fn release(self) -> u16 {
        let HeldPort { port, _bound } = self;
        drop(_bound);
        crate::wait::eventually(Duration::from_secs(5), || TcpListener::bind(("127.0.0.1", port)).is_ok());
        port
    }
}

impl Default for HeldPort {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a daemon's (or launcher's) log says it could not bind its port
/// because another socket had it.
pub fn says_port_taken(log: &str) -> bool {
    log.to_lowercase().contains("address already in use")
}

/// `count` distinct free ports. Each listener is held until all are chosen:
/// two calls of [`free_port`] in a row may be handed the same port, since the
/// first listener is gone before the second asks.
pub fn distinct_free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..count).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|listener| listener.local_addr().unwrap().port()).collect()
}

/// [`distinct_free_ports`] as an array, for destructuring.
pub fn free_ports<const N: usize>() -> [u16; N] {
    distinct_free_ports(N).try_into().expect("as many ports as asked for")
}

/// A daemon could not serve the port it was given: another process had it.
#[derive(Debug)]
pub struct PortTaken;

/// How many times [`on_free_ports`] chooses ports before it gives up.
const TRIES: usize = 5;

/// Runs `start` on freshly chosen distinct free ports until what it starts
/// holds them, choosing again when `start` reports [`PortTaken`].
pub fn on_free_ports<const N: usize, T>(mut start: impl FnMut([u16; N]) -> Result<T, PortTaken>) -> T {
    on_free_port_list(N, |ports| start(ports.try_into().expect("as many ports as asked for")))
}

/// [`on_free_ports`] for a count known only at run time (a cluster's).
pub fn on_free_port_list<T>(count: usize, mut start: impl FnMut(Vec<u16>) -> Result<T, PortTaken>) -> T {
    for _ in 1..TRIES {
        if let Ok(started) = start(distinct_free_ports(count)) {
            return started;
        }
    }
    start(distinct_free_ports(count))
        .unwrap_or_else(|PortTaken| panic!("{TRIES} sets of free ports were all taken by others"))
}

/// What became of a process started to listen on a port ([`wait_listening`]).
#[derive(Debug)]
pub(crate) enum Wait {
    Listening,
    /// It exited first; `taken` when another process listens on the port now.
    Exited {
        status: ExitStatus,
        taken: bool,
    },
    TimedOut,
}

/// Waits until `child` itself listens on `port`, exits, or `timeout` passes.
pub(crate) fn wait_listening(child: &mut Child, port: u16, timeout: Duration) -> Wait {
    let deadline = Instant::now() + timeout;
    loop {
        if listens_on(child.id(), port) {
            return Wait::Listening;
        }
        if let Some(status) = child.try_wait().unwrap() {
            return Wait::Exited { status, taken: anyone_listens_on(port) };
        }
        if Instant::now() >= deadline {
            return Wait::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Who holds a listening TCP socket on `port`, by the socket inodes in the
/// kernel's tables (IPv4 and IPv6, any address).
fn listening_sockets(port: u16) -> Vec<String> {
    let mut sockets = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        for fields in text.lines().skip(1).map(|line| line.split_whitespace().collect::<Vec<_>>()) {
            let local_port = fields.get(1).and_then(|a| a.rsplit(':').next());
            let listening = fields.get(3) == Some(&"0A");
            if listening && local_port.and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port) {
                sockets.extend(fields.get(9).map(|inode| format!("socket:[{inode}]")));
            }
        }
    }
    sockets
}

/// Whether process `pid` itself listens on TCP `port`.
fn listens_on(pid: u32, port: u16) -> bool {
    let sockets = listening_sockets(port);
    if sockets.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| sockets.iter().any(|socket| target.as_os_str() == socket.as_str()))
}

/// Whether any process listens on TCP `port`.
pub(crate) fn anyone_listens_on(port: u16) -> bool {
    !listening_sockets(port).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait::eventually;

    #[test]
    fn a_port_is_listened_on_by_its_holder_only() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port));
        // Another process, up while the listener is held (which it does not
        // inherit: Rust's sockets are close-on-exec).
        let mut other = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        assert!(!listens_on(other.id(), port));
        assert!(anyone_listens_on(port));
        let _ = other.kill();
        let _ = other.wait();
        drop(listener);
        // Another test's child, between its fork and its exec, may hold a
        // copy of the listener for that moment (see `HeldPort::release`).
        assert!(eventually(Duration::from_secs(5), || !anyone_listens_on(port)));
        assert!(!listens_on(std::process::id(), port));
    }

    #[test]
    fn a_taken_port_is_chosen_again() {
        let mut tried = Vec::new();
        let started = on_free_ports(|[a, b]| {
            tried.push((a, b));
            if tried.len() < 3 { Err(PortTaken) } else { Ok(a) }
        });
        assert_eq!(tried.len(), 3);
        assert_eq!(started, tried[2].0);
        assert!(tried.iter().all(|(a, b)| a != b));
    }

    #[test]
    fn a_held_port_refuses_connections_and_no_one_else_takes_it_until_released() {
        use std::io::ErrorKind;
        use std::net::TcpStream;
        let held = HeldPort::new();
        let port = held.port();
        let refused = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "nothing listens on a held port");
        assert!(!anyone_listens_on(port));
        let taken = TcpListener::bind(("127.0.0.1", port)).unwrap_err();
        assert_eq!(taken.kind(), ErrorKind::AddrInUse, "a held port cannot be bound by another socket");
        assert_eq!(held.release(), port);
        // Another test's child, between its fork and its exec, may hold a
        // copy of any socket of this process for that moment (see `release`).
        let mut daemon = None;
        let bound = eventually(Duration::from_secs(5), || {
            daemon = TcpListener::bind(("127.0.0.1", port)).ok();
            daemon.is_some()
        });
        assert!(bound, "a released port is free again");
        assert!(listens_on(std::process::id(), port));
    }
}
