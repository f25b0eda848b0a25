//! The daemon: both servers' routers and the Ruby runtime they share, on
//! rpc-core's start-up path (listeners, signals, READY=1, drain); after the
//! drain, Ruby is stopped.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rpc_core::daemon::{Daemon, StartError};
use rpc_core::listen::NdjsonLimits;
use rpc_core::shutdown::{DEFAULT_GRACE, Stopped};
use rpc_core::{PeerConfig, RpcError};
use serde_json::value::RawValue;

use crate::config::Config;
use crate::paths::PathPolicy;
use crate::runtime::{ConsoleLog, Runtime, RuntimeConfig};
use crate::{bridge, repl};

/// After a second signal, how long Ruby gets to stop before its process
/// group is killed: the operator asked for an exit now.
const FORCED_STOP: Duration = Duration::from_millis(500);

/// How long `ping` waits for a runtime that is starting to run or fail.
const PING_SETTLE: Duration = Duration::from_secs(3);

/// The answer to `ping` on both servers: `{"status": "ok"}` while Ruby runs,
/// written as the constant it is (health checks and benchmarks call it a
/// lot). Otherwise the status is the runtime's state (`starting`,
/// `unavailable`, `stopped`) with the `problem` when there is one: a bridge
/// that cannot evaluate must not look healthy.
pub struct Pong {
    status: &'static str,
    problem: Option<String>,
}

impl Pong {
    fn from_health((state, problem): (&'static str, Option<String>)) -> Pong {
        Pong { status: if state == "running" { "ok" } else { state }, problem }
    }
}

impl serde::Serialize for Pong {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        static HEALTHY: LazyLock<&RawValue> =
            LazyLock::new(|| serde_json::from_str(r#"{"status":"ok"}"#).expect("a constant JSON object"));
        if self.status == "ok" && self.problem.is_none() {
            return HEALTHY.serialize(s);
        }
        let mut pong = s.serialize_struct("Pong", 2)?;
        pong.serialize_field("status", self.status)?;
        if let Some(problem) = &self.problem {
            pong.serialize_field("problem", problem)?;
        }
        pong.end()
    }
}

/// The `ping` method of both servers. Only a runtime that is starting makes
/// it wait (up to [`PING_SETTLE`]); it never waits for an evaluation. That
/// wait is boxed, so the common answer's future stays small.
pub fn ping(app: &Arc<App>) -> impl Future<Output = Result<Pong, RpcError>> + Send + use<> {
    let now = app.runtime.health();
    let starting = (now.0 == "starting").then(|| app.clone());
    async move {
        Ok(Pong::from_health(match starting {
            Some(app) => Box::pin(async move { app.runtime.settled_health(PING_SETTLE).await }).await,
            None => now,
        }))
    }
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

pub async fn run(config: Config) -> Result<Stopped, StartError> {
    let mut daemon = Daemon::start("supex-bridge", DEFAULT_GRACE)?;
    daemon.require_token_beyond_loopback("SUPEX_AUTH_TOKEN", config.auth_token.as_deref());
    let bridge_listener = daemon.listen_tcp(Some("bridge"), config.bridge_addr, "SUPEX_HOST/SUPEX_PORT")?;
    let repl_listener = match config.repl_addr {
        Some(addr) => Some(daemon.listen_tcp(Some("repl"), addr, "SUPEX_REPL_HOST/SUPEX_REPL_PORT")?),
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

    // Evaluations waiting for Ruby's turn are refused as the drain begins;
    // only the running one gets the grace period.
    let shutdown = daemon.shutdown().clone();
    let waiting = app.clone();
    tokio::spawn(async move {
        shutdown.draining().await;
        waiting.runtime.refuse_waiting();
    });

    let limits = NdjsonLimits {
        max_message: config.max_message,
        max_connections: config.max_connections,
        peer: PeerConfig {
            // Every method but `ping` needs a hello: idle sockets that never
            // send one must not hold the connection slots.
            handshake_deadline: Some(config.hello_timeout),
            write_stall: config.write_stall,
            write_budget: config.write_budget,
            backlog_bytes: config.backlog_bytes,
            ..PeerConfig::default()
        },
        ..NdjsonLimits::default()
    };
    let bridge_addr = bridge_listener.local_addr();
    daemon.serve_ndjson(
        bridge_listener,
        "bridge",
        limits.clone(),
        bridge::router(app.clone()),
        bridge::BridgeConn::default,
    );
    let mut repl_addr = None;
    if let Some(listener) = repl_listener {
        repl_addr = Some(listener.local_addr());
        daemon.serve_ndjson(listener, "repl", limits, repl::router(app.clone()), repl::ReplConn::default);
    }
    tracing::info!(
        bridge = %bridge_addr,
        repl = %repl_addr.as_deref().unwrap_or("disabled"),
        "supex-bridge listening"
    );

    let stopped = daemon.run().await;
    match stopped {
        Stopped::Clean => app.runtime.stop().await,
        Stopped::Forced => stop_at_once(&app.runtime).await,
    }
    tracing::info!("supex-bridge stopped");
    Ok(stopped)
}

/// Stops Ruby without the usual grace: an evaluation still running would
/// keep [`Runtime::stop`] waiting on its turn, so after [`FORCED_STOP`] the
/// runtime's process group (it leads one) is killed here.
async fn stop_at_once(runtime: &Runtime) {
    let pid = runtime.snapshot().process.map(|p| p.pid);
    if tokio::time::timeout(FORCED_STOP, runtime.stop()).await.is_ok() {
        return;
    }
    if let Some(pid) = pid.and_then(|pid| i32::try_from(pid).ok()).filter(|pid| *pid > 0) {
        tracing::warn!(pid, "ruby runtime did not stop in time; killing its process group");
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}
