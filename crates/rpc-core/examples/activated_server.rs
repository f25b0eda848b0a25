//! An NDJSON `ping` server that takes its listening socket from systemd
//! (`LISTEN_FDS`) when there is one, else binds the address given as its first
//! argument, and tells systemd when it is ready (`READY=1`). It is the smallest
//! complete daemon on rpc-core: listener, connection limit, shutdown on
//! SIGTERM, sd_notify.

use std::sync::Arc;

use rpc_core::listen::{self, Listener};
use rpc_core::{Connection, NoParams, PeerConfig, Router, Shutdown, systemd};
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let listener = match systemd::take_listener(None)? {
        Some(listener) => listener,
        None => {
            let addr = std::env::args()
                .nth(1)
                .unwrap_or_else(|| "127.0.0.1:0".into());
            Listener::Tcp(listen::bind_tcp(addr.parse()?)?)
        }
    };
    eprintln!("listening on {}", listener.local_addr());
    let router = Router::<()>::new()
        .method("ping", |_, _: NoParams| async { Ok(json!({"pong": true})) })
        .build()?;
    let shutdown = Shutdown::new();
    shutdown.on_signals()?;
    systemd::notify_ready()?;
    let s = shutdown.clone();
    tokio::spawn(async move {
        listen::serve(listener, "ping", 64, &s.clone(), move |stream, _| {
            let (router, s) = (router.clone(), s.clone());
            async move {
                let (_peer, conn) = Connection::new(
                    stream.into_ndjson(1 << 20),
                    router,
                    Arc::new(()),
                    PeerConfig::default(),
                );
                conn.with_shutdown(&s).run().await;
            }
        })
        .await
    });
    shutdown.wait(rpc_core::shutdown::DEFAULT_GRACE).await;
    Ok(())
}
