//! systemd integration: socket activation (`LISTEN_FDS`) and `sd_notify`.
//!
//! Both are no-ops outside systemd, so daemons call them unconditionally.

use parking_lot::Mutex;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{AddressFamily, SockaddrLike, SockaddrStorage, getsockname};

use crate::listen::Listener;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;

/// A socket systemd opened for us, with its `FileDescriptorName=` if any.
#[derive(Debug)]
pub struct Activated {
    pub name: Option<String>,
    pub listener: Listener,
}

/// Sockets handed over by systemd, taken at most once per process.
static ACTIVATED: Mutex<Option<Vec<Activated>>> = Mutex::new(None);
static TAKEN: std::sync::Once = std::sync::Once::new();

/// Takes a socket systemd passed: with a `name`, the one of that name, else
/// the TCP one on `port`; with `None`, the first remaining one. Must be called
/// inside a tokio runtime.
///
/// The port matters because a `.socket` unit gives all its sockets one name:
/// a daemon with two servers in one unit (a bridge port and a REPL port) can
/// tell them apart only by where they listen.
pub fn take_listener(name: Option<&str>, port: Option<u16>) -> io::Result<Option<Listener>> {
    let mut result = Ok(());
    TAKEN.call_once(|| match receive() {
        Ok(list) => *ACTIVATED.lock() = Some(list),
        Err(e) => result = Err(e),
    });
    result?;
    let mut guard = ACTIVATED.lock();
    let Some(list) = guard.as_mut() else {
        return Ok(None);
    };
    let index = match name {
        Some(name) => list
            .iter()
            .position(|a| a.name.as_deref() == Some(name))
            .or_else(|| list.iter().position(|a| port.is_some() && a.tcp_port() == port)),
        None => (!list.is_empty()).then_some(0),
    };
    Ok(index.map(|i| list.remove(i).listener))
}

impl Activated {
    fn tcp_port(&self) -> Option<u16> {
        match &self.listener {
            Listener::Tcp(tcp) => tcp.local_addr().ok().map(|a| a.port()),
            Listener::Unix(_) => None,
        }
    }
}

fn receive() -> io::Result<Vec<Activated>> {
    let for_us = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS").ok().and_then(|n| n.parse::<RawFd>().ok()).unwrap_or(0);
    if !for_us || count <= 0 {
        return Ok(Vec::new());
    }
    let names: Vec<String> =
        std::env::var("LISTEN_FDNAMES").map(|n| n.split(':').map(str::to_owned).collect()).unwrap_or_default();
    let mut out = Vec::new();
    for (i, fd) in (LISTEN_FDS_START..LISTEN_FDS_START + count).enumerate() {
        let owned = adopt(fd);
        nix::fcntl::fcntl(&owned, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
        let family = getsockname::<SockaddrStorage>(fd)?.family();
        let listener = match family {
            Some(AddressFamily::Inet | AddressFamily::Inet6) => {
                let std_listener = std::net::TcpListener::from(owned);
                std_listener.set_nonblocking(true)?;
                Listener::Tcp(tokio::net::TcpListener::from_std(std_listener)?)
            }
            Some(AddressFamily::Unix) => {
                let std_listener = std::os::unix::net::UnixListener::from(owned);
                std_listener.set_nonblocking(true)?;
                Listener::Unix(tokio::net::UnixListener::from_std(std_listener)?)
            }
            other => {
                tracing::warn!(fd, ?other, "ignoring a passed socket of an unsupported family");
                continue;
            }
        };
        let name = names.get(i).filter(|n| !n.is_empty() && *n != "unknown").cloned();
        tracing::info!(fd, name = name.as_deref().unwrap_or("-"), "using socket passed by systemd");
        out.push(Activated { name, listener });
    }
    Ok(out)
}

#[allow(unsafe_code)]
fn adopt(fd: RawFd) -> OwnedFd {
    // SAFETY: systemd's socket-activation protocol passes descriptors
    // LISTEN_FDS_START.. LISTEN_FDS_START+LISTEN_FDS-1 open and owned by this
    // process (LISTEN_PID matched our pid above). `TAKEN` makes sure each is
    // adopted exactly once, so no other OwnedFd for it exists or will exist.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Tells systemd we are ready (`READY=1`) when `NOTIFY_SOCKET` is set.
/// Returns whether a notification was sent.
pub fn notify_ready() -> io::Result<bool> {
    notify("READY=1")
}

/// Sends one `sd_notify` state string.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let socket = std::os::unix::net::UnixDatagram::unbound()?;
    let target = target.to_string_lossy().into_owned();
    match target.strip_prefix('@') {
        #[cfg(target_os = "linux")]
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
        }
        #[cfg(not(target_os = "linux"))]
        Some(_) => {
            return Err(io::Error::other("abstract NOTIFY_SOCKET is only supported on Linux"));
        }
        None => {
            socket.send_to(state.as_bytes(), &target)?;
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn notify_sends_ready_to_the_notify_socket() {
        let dir = std::env::temp_dir().join(format!("rpc-core-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        // The variable is read, not changed, by the code under test; set it in a
        // child-free test process before any thread reads the environment.
        let sent = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "systemd::tests::notify_child", "--nocapture"])
            .env("NOTIFY_SOCKET", &path)
            .env("RPC_CORE_NOTIFY_CHILD", "1")
            .status()
            .unwrap();
        assert!(sent.success());
        let mut buf = [0u8; 64];
        receiver.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Runs only as the child of the test above, with NOTIFY_SOCKET set for it.
    #[test]
    fn notify_child() {
        if std::env::var_os("RPC_CORE_NOTIFY_CHILD").is_some() {
            assert!(super::notify_ready().unwrap());
        }
    }
}
