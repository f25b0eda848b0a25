//! The daemon: binds both servers, starts the Ruby runtime, serves until a
//! signal, then drains connections and stops Ruby.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rpc_core::listen::{self, Listener, NdjsonLimits};
use rpc_core::shutdown::DEFAULT_GRACE;
use rpc_core::{PeerConfig, Router, Shutdown, systemd};

use crate::config::Config;
use crate::paths::PathPolicy;
use crate::runtime::{ConsoleLog, Runtime, RuntimeConfig};
use crate::{bridge, repl};

/// The answer to `ping` on both servers, `{"status": "ok"}`, built without an
/// allocation (health checks and benchmarks call it a lot).
#[derive(serde::Serialize)]
pub struct Pong {
    status: &'static str,
}

impl Pong {
    pub const OK: Pong = Pong { status: "ok" };
}

/// What every connection of both servers shares.
pub struct App {
    pub runtime: Runtime,
    pub policy: PathPolicy,
    pub auth_token: Option<String>,
    pub eval_timeout: Duration,
    /// Also the cap on one `read_file` reply.
    pub max_message: usize,
}

impl App {
    pub fn token_required(&self) -> bool {
        self.auth_token.is_some()
    }
}

pub async fn run(config: Config) -> ExitCode {
    let shutdown = Shutdown::new();
    if let Err(e) = shutdown.on_signals() {
        tracing::error!(error = %e, "cannot install signal handlers");
        return ExitCode::FAILURE;
    }

    let bridge_listener = match listener("bridge", config.bridge_addr, "SUPEX_HOST/SUPEX_PORT") {
        Ok(l) => l,
        Err(code) => return code,
    };
    let repl_listener = match config.repl_addr {
        Some(addr) => match listener("repl", addr, "SUPEX_REPL_HOST/SUPEX_REPL_PORT") {
            Ok(l) => Some(l),
            Err(code) => return code,
        },
        None => None,
    };

    let console = Arc::new(ConsoleLog::new(config.log_dir.as_deref()));
    if let Some(path) = console.path() {
        tracing::info!(path = %path.display(), "runtime console log");
    }
    let runtime = Runtime::start(RuntimeConfig { command: config.ruby.clone() }, console);
    match config.policy.roots() {
        Some(roots) => tracing::info!(
            roots = %roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(":"),
            project_root = %config.policy.project_root().display(),
            "file tools may touch these roots"
        ),
        None => {
            tracing::info!(project_root = %config.policy.project_root().display(), "file tools may touch any path")
        }
    }
    let app = Arc::new(App {
        runtime,
        policy: config.policy,
        auth_token: config.auth_token,
        eval_timeout: config.eval_timeout,
        max_message: config.max_message,
    });

    let limits = NdjsonLimits {
        max_message: config.max_message,
        max_connections: config.max_connections,
        peer: PeerConfig::default(),
    };
    let bridge_router = bridge::router(app.clone());
    let bridge_addr = bridge_listener.local_addr();
    spawn_server(&shutdown, bridge_listener, "bridge", bridge_router, bridge::BridgeConn::default, limits.clone());
    let mut repl_addr = None;
    if let Some(l) = repl_listener {
        repl_addr = Some(l.local_addr());
        spawn_server(&shutdown, l, "repl", repl::router(app.clone()), repl::ReplConn::default, limits);
    }
    tracing::info!(
        bridge = %bridge_addr,
        repl = %repl_addr.as_deref().unwrap_or("disabled"),
        "supex-bridge listening"
    );
    if let Err(e) = systemd::notify_ready() {
        tracing::warn!(error = %e, "could not notify systemd");
    }

    shutdown.wait(DEFAULT_GRACE).await;
    app.runtime.stop().await;
    tracing::info!("supex-bridge stopped");
    ExitCode::SUCCESS
}

/// A socket systemd passed under `name`, else a new bind to `addr`.
fn listener(name: &str, addr: SocketAddr, setting: &str) -> Result<Listener, ExitCode> {
    match systemd::take_listener(Some(name)) {
        Ok(Some(listener)) => return Ok(listener),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "ignoring sockets passed by systemd"),
    }
    listen::bind_tcp(addr).map(Listener::Tcp).map_err(|e| {
        eprintln!("supex-bridge: cannot listen on {addr} ({setting}): {e}");
        ExitCode::FAILURE
    })
}

fn spawn_server<S: Send + Sync + 'static>(
    shutdown: &Shutdown,
    listener: Listener,
    name: &'static str,
    router: Arc<Router<S>>,
    new_state: fn() -> S,
    limits: NdjsonLimits,
) {
    let sd = shutdown.clone();
    shutdown.spawn(async move { listen::serve_ndjson(listener, name, limits, &sd, router, new_state).await });
}
