//! An NDJSON `ping` server that takes its listening socket from systemd
//! (`LISTEN_FDS`) when there is one, else binds the address given as its first
//! argument, and tells systemd when it is ready (`READY=1`). It is the smallest
//! complete daemon on rpc-core: listener, connection limit, shutdown on
//! SIGTERM, sd_notify.

use rpc_core::listen::{self, Listener, NdjsonLimits};
use rpc_core::{NoParams, Router, Shutdown, systemd};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let listener = match systemd::take_listener(None)? {
        Some(listener) => listener,
        None => {
            let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
            Listener::Tcp(listen::bind_tcp(addr.parse()?)?)
        }
    };
    eprintln!("listening on {}", listener.local_addr());
    let router = Router::<()>::new().method("ping", |_, _: NoParams| async { Ok(json!({"pong": true})) }).build()?;
    let shutdown = Shutdown::new();
    shutdown.on_signals()?;
    systemd::notify_ready()?;
    let s = shutdown.clone();
    tokio::spawn(
        async move { listen::serve_ndjson(listener, "ping", NdjsonLimits::default(), &s, router, || ()).await },
    );
    shutdown.wait(rpc_core::shutdown::DEFAULT_GRACE).await;
    Ok(())
}
