//! The one start-up and serve path of every daemon, mini-redis style: signal
//! handlers, listeners (systemd's or our own), serving, READY=1, drain.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use rpc_core::{Router, daemon::{Daemon, StartError}, listen::NdjsonLimits, shutdown::Stopped};
//! # async fn run(router: Arc<Router<()>>) -> Result<Stopped, StartError> {
//! let mut daemon = Daemon::start("my-daemon", rpc_core::shutdown::DEFAULT_GRACE)?;
//! let listener = daemon.listen_tcp(Some("api"), "127.0.0.1:9000".parse().unwrap(), "MY_HOST/MY_PORT")?;
//! daemon.serve_ndjson(listener, "api", NdjsonLimits::default(), router, || ());
//! Ok(daemon.run().await)
//! # }
//! ```
//!
//! A daemon's `server.rs` then only builds its router and state; what is the
//! same for all of them (socket activation by `FileDescriptorName=`, the Unix
//! socket's file, the order of READY=1 and the drain) is written here once.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ConfigError, check_exposure};
use crate::listen::{self, Listener, NdjsonLimits, SocketFile, Stream, UnixBindError};
use crate::log_sink;
use crate::router::Router;
use crate::shutdown::{Shutdown, Stopped};
use crate::systemd;

/// Why a daemon could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] io::Error),
    #[error("cannot take the sockets systemd passed: {0}")]
    Activation(#[source] io::Error),
    #[error("cannot listen on {addr} ({setting}): {source}")]
    Tcp {
        setting: String,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on a Unix socket ({setting}): {source}")]
    Unix {
        setting: String,
        #[source]
        source: UnixBindError,
    },
    /// A listener breaks a configuration rule (a passed socket beyond
    /// loopback without a token).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl StartError {
    /// 2 for bad configuration, 1 for everything else (a port in use, say).
    pub fn exit_code(&self) -> ExitCode {
        match self {
            StartError::Config(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }
}

/// A daemon's error that ends the process with its own exit code.
pub trait Failure: std::fmt::Display {
    fn exit_code(&self) -> ExitCode;
}

impl Failure for StartError {
    fn exit_code(&self) -> ExitCode {
        StartError::exit_code(self)
    }
}

/// The tokio runtime a daemon runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// One thread: a request, its handler and its reply run where it was read,
    /// with no wake-up of another thread; children are spawned from it, and it
    /// lives as long as the daemon, as their parent-death signal wants.
    One,
    /// A pool of this many workers.
    Workers(usize),
}

impl Threads {
    /// A worker for each core this process may run on, or [`Threads::One`]
    /// when that is one (a machine with one core, or a daemon pinned to one
    /// with `taskset` or systemd's `CPUAffinity=`): a pool of one worker only
    /// adds hand-offs between threads that share the core.
    pub fn per_core() -> Threads {
        match std::thread::available_parallelism() {
            Ok(n) if n.get() > 1 => Threads::Workers(n.get()),
            _ => Threads::One,
        }
    }

    /// Builds the runtime.
    pub fn runtime(self) -> io::Result<tokio::runtime::Runtime> {
        match self {
            Threads::One => tokio::runtime::Builder::new_current_thread().enable_all().build(),
            Threads::Workers(n) => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build(),
        }
    }
}

/// Runs a daemon's `serve` on `runtime` and turns its outcome into the
/// process's exit code; a failure is reported in one line naming the daemon.
/// The binary returns this from `main`, so everything `serve` owns (socket
/// files, child process groups) is dropped first.
pub fn exit_code_of<T, E>(
    name: &str,
    runtime: &tokio::runtime::Runtime,
    serve: impl Future<Output = Result<T, E>>,
) -> ExitCode
where
    T: Into<ExitCode>,
    E: Failure,
{
    let code = match runtime.block_on(serve) {
        Ok(outcome) => outcome.into(),
        Err(e) => {
            log_sink::report(format_args!("{name}: {e}"));
            e.exit_code()
        }
    };
    log_sink::flush(log_sink::FINAL_FLUSH);
    code
}

/// [`exit_code_of`] on a new runtime of `threads`.
pub fn run_to_exit<T, E>(name: &str, threads: Threads, serve: impl Future<Output = Result<T, E>>) -> ExitCode
where
    T: Into<ExitCode>,
    E: Failure,
{
    match threads.runtime() {
        Ok(runtime) => exit_code_of(name, &runtime, serve),
        Err(e) => {
            log_sink::report(format_args!("{name}: cannot start the async runtime: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// The token rule for TCP listeners, whoever opened them.
#[derive(Debug)]
struct TokenRule {
    token_setting: &'static str,
    has_token: bool,
}

/// A daemon between start and stop: its shutdown signal, its listeners' socket
/// files, and what it serves.
#[derive(Debug)]
pub struct Daemon {
    name: &'static str,
    shutdown: Shutdown,
    grace: Duration,
    token_rule: Option<TokenRule>,
    /// Removed when [`Daemon::run`] returns, or when the daemon is dropped on
    /// an error path before it.
    socket_files: Vec<SocketFile>,
}

impl Daemon {
    /// Installs the signal handlers (see [`Shutdown::on_signals`]). `grace` is
    /// how long in-flight requests get after the first signal. Must be called
    /// inside a tokio runtime.
    pub fn start(name: &'static str, grace: Duration) -> Result<Daemon, StartError> {
        let daemon = Daemon::new(name, grace);
        daemon.shutdown.on_signals().map_err(StartError::Signals)?;
        Ok(daemon)
    }

    /// A daemon without signal handlers: its shutdown is begun by hand.
    fn new(name: &'static str, grace: Duration) -> Daemon {
        Daemon { name, shutdown: Shutdown::new(), grace, token_rule: None, socket_files: Vec::new() }
    }

    /// How long tasks get to stop once the grace period is over (see
    /// [`Shutdown::with_final_allowance`]).
    pub fn with_final_allowance(mut self, allowance: Duration) -> Daemon {
        self.shutdown = self.shutdown.with_final_allowance(allowance);
        self
    }

    /// Refuses a TCP socket systemd passed that listens beyond loopback when
    /// there is no token: the rule [`check_exposure`] applies to our own
    /// binds, for an address no setting of ours saw.
    pub fn require_token_beyond_loopback(&mut self, token_setting: &'static str, token: Option<&str>) {
        let has_token = token.is_some_and(|t| !t.is_empty());
        self.token_rule = Some(TokenRule { token_setting, has_token });
    }

    /// The daemon's shutdown signal, for the state and tasks that watch it.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// The socket systemd passed as `fd_name` (or, under no such name, the
    /// one on `addr`'s port; with `None`, the first one left), else a new TCP
    /// listener on `addr` with `SO_REUSEADDR`. `setting` names where `addr`
    /// came from, for the error.
    pub fn listen_tcp(
        &mut self,
        fd_name: Option<&str>,
        addr: SocketAddr,
        setting: &str,
    ) -> Result<Listener, StartError> {
        if let Some(listener) = activated(fd_name, Some(addr.port()))? {
            self.check_passed(&listener, fd_name)?;
            return Ok(listener);
        }
        let listener =
            listen::bind_tcp(addr).map_err(|source| StartError::Tcp { setting: setting.to_owned(), addr, source })?;
        Ok(Listener::Tcp(listener))
    }

    /// The socket systemd passed as `fd_name`, else a new Unix socket at
    /// `path` (see [`listen::bind_unix`]: 0700 directory, 0600 socket, a stale
    /// one replaced, a live one never taken over). A file we created is
    /// removed when [`Daemon::run`] returns, however it stops.
    pub fn listen_unix(&mut self, fd_name: Option<&str>, path: &Path, setting: &str) -> Result<Listener, StartError> {
        if let Some(listener) = activated(fd_name, None)? {
            self.check_passed(&listener, fd_name)?;
            return Ok(listener);
        }
        let (listener, file) =
            listen::bind_unix(path).map_err(|source| StartError::Unix { setting: setting.to_owned(), source })?;
        self.socket_files.push(file);
        Ok(Listener::Unix(listener))
    }

    /// Applies the token rule to a socket systemd passed.
    fn check_passed(&self, listener: &Listener, fd_name: Option<&str>) -> Result<(), ConfigError> {
        let (Some(rule), Listener::Tcp(tcp)) = (&self.token_rule, listener) else {
            return Ok(());
        };
        let Ok(addr) = tcp.local_addr() else {
            return Ok(());
        };
        let origin = match fd_name {
            Some(name) => format!("the socket systemd passed ({name})"),
            None => "the socket systemd passed".to_owned(),
        };
        check_exposure(&origin, addr.ip(), rule.token_setting, rule.has_token.then_some("(set)"))
    }

    /// Serves NDJSON JSON-RPC on `listener` (see [`listen::serve_ndjson`]) in
    /// a task the drain waits for.
    pub fn serve_ndjson<S, F>(
        &self,
        listener: Listener,
        name: &'static str,
        limits: NdjsonLimits,
        router: Arc<Router<S>>,
        new_state: F,
    ) where
        S: Send + Sync + 'static,
        F: Fn() -> S + Send + Sync + 'static,
    {
        let shutdown = self.shutdown.clone();
        self.shutdown.spawn(async move {
            listen::serve_ndjson(listener, name, limits, &shutdown, router, new_state).await;
        });
    }

    /// Serves `listener` with a handler of the daemon's own (HTTP, say), at
    /// most `max_connections` at once (see [`listen::serve`]), in a task the
    /// drain waits for.
    pub fn serve<F, Fut>(&self, listener: Listener, name: &'static str, max_connections: usize, handler: F)
    where
        F: Fn(Stream, String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let shutdown = self.shutdown.clone();
        self.shutdown.spawn(async move {
            listen::serve(listener, name, max_connections, &shutdown, handler).await;
        });
    }

    /// Tells systemd the daemon is ready (READY=1: every listener is open by
    /// now), waits for the signal, drains with the grace period, and removes
    /// the socket files it created. A forced stop returns at once.
    pub async fn run(self) -> Stopped {
        let Daemon { name, shutdown, grace, socket_files, .. } = self;
        if let Err(e) = systemd::notify_ready() {
            tracing::warn!(error = %e, "could not notify systemd");
        }
        let stopped = shutdown.wait(grace).await;
        drop(socket_files);
        match stopped {
            Stopped::Clean => tracing::debug!(daemon = name, "drained"),
            Stopped::Forced => tracing::warn!(daemon = name, "stopped without draining"),
        }
        stopped
    }
}

/// The socket systemd passed under `fd_name` (or on `port`), if any.
fn activated(fd_name: Option<&str>, port: Option<u16>) -> Result<Option<Listener>, StartError> {
    systemd::take_listener(fd_name, port).map_err(StartError::Activation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_unix_socket_file_lives_as_long_as_the_daemon_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/d.sock");
        let mut daemon = Daemon::new("test", Duration::from_secs(1));
        let listener = daemon.listen_unix(None, &path, "TEST_SOCKET").unwrap();
        assert!(path.exists());
        daemon.serve(listener, "test", 4, |_, _| async {});
        daemon.shutdown().begin();
        assert_eq!(daemon.run().await, Stopped::Clean);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_start_error_names_the_setting_and_the_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let mut daemon = Daemon::new("test", Duration::from_secs(1));
        let error = daemon.listen_tcp(None, addr, "TEST_HOST/TEST_PORT").unwrap_err();
        let text = error.to_string();
        assert!(text.contains(&addr.to_string()) && text.contains("TEST_HOST/TEST_PORT"), "{text}");
        assert_eq!(error.exit_code(), ExitCode::FAILURE);
    }

    #[tokio::test]
    async fn a_passed_socket_beyond_loopback_needs_the_token_when_the_daemon_says_so() {
        let wide = Listener::Tcp(listen::bind_tcp("0.0.0.0:0".parse().unwrap()).unwrap());
        let narrow = Listener::Tcp(listen::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap());
        let mut daemon = Daemon::new("test", Duration::from_secs(1));
        assert!(daemon.check_passed(&wide, None).is_ok(), "no rule, no check");
        daemon.require_token_beyond_loopback("TEST_TOKEN", Some(""));
        let error = StartError::from(daemon.check_passed(&wide, Some("api")).unwrap_err());
        assert_eq!(
            error.to_string(),
            "bad configuration: the socket systemd passed (api): 0.0.0.0 is not a loopback address; \
             set TEST_TOKEN to listen on it"
        );
        assert_eq!(error.exit_code(), ExitCode::from(2));
        assert!(daemon.check_passed(&narrow, None).is_ok());
        daemon.require_token_beyond_loopback("TEST_TOKEN", Some("secret"));
        assert!(daemon.check_passed(&wide, None).is_ok());
    }
}
