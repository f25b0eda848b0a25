//! An NDJSON `ping` server that takes its listening socket from systemd
//! (`LISTEN_FDS`) when there is one, else binds the address given as its first
//! argument, and tells systemd when it is ready (`READY=1`). It is the smallest
//! complete daemon on rpc-core: the one start-up path (`Daemon`), a listener
//! with its connection limit, shutdown on SIGTERM, sd_notify.

use std::process::ExitCode;

use rpc_core::daemon::Daemon;
use rpc_core::listen::NdjsonLimits;
use rpc_core::shutdown::DEFAULT_GRACE;
use rpc_core::{NoParams, Router};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into()).parse()?;
    let mut daemon = Daemon::start("activated_server", DEFAULT_GRACE)?;
    let listener = daemon.listen_tcp(None, addr, "the address argument")?;
    eprintln!("listening on {}", listener.local_addr());
    let router = Router::<()>::new().method("ping", |_, _: NoParams| async { Ok(json!({"pong": true})) }).build()?;
    daemon.serve_ndjson(listener, "ping", NdjsonLimits::default(), router, || ());
    Ok(daemon.run().await.exit_code())
}
