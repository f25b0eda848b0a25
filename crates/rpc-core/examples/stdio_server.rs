//! A JSON-RPC server on its own stdin/stdout with Content-Length framing, the
//! way an editor extension runs as a child process. It also shows a handler
//! asking the parent something and waiting for the answer on the same pipes.
//!
//! Methods: `echo` (returns its params), `ask_parent [n]` (asks the parent's
//! `confirm [n]` and returns the answer plus one), `hang` (never answers),
//! `crash` (exits the process at once, like a crashing extension).

use std::time::Duration;

use rpc_core::{Connection, NoParams, PeerConfig, Router, RpcError, Transport};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let router = Router::<()>::new()
        .method("echo", |_, p: Value| async move { Ok(p) })
        .method("ask_parent", |cx, n: [u64; 1]| async move {
            let confirmed: u64 = cx.peer.request("confirm", n).await.map_err(RpcError::internal)?;
            Ok(confirmed + 1)
        })
        .method("hang", |_, _: NoParams| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        })
        .method("crash", |_, _: NoParams| async {
            std::process::exit(3);
            #[allow(unreachable_code)]
            Ok(())
        })
        .build()
        .expect("no duplicate methods");
    let transport = Transport::content_length(tokio::io::stdin(), tokio::io::stdout(), 1 << 20);
    let (_peer, conn) = Connection::new(transport, router, Default::default(), PeerConfig::default());
    conn.run().await;
}
