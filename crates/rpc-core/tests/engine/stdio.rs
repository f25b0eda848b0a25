//! The stdio/child-pipe transport with a real child process: the example
//! `stdio_server` speaks Content-Length on its stdin/stdout.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::{CallError, Connection, NoParams, PeerConfig, PeerHandle, Router, Transport};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The example binary. `cargo test -p rpc-core` builds examples; a narrower
/// invocation (`--test stdio`) does not, so build it then.
fn example_path() -> PathBuf {
    // target/<profile>/deps/<this test> -> target/<profile>/examples/stdio_server
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let path = profile_dir.join("examples").join("stdio_server");
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        if !path.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = std::process::Command::new(cargo);
            cmd.args(["build", "-q", "-p", "rpc-core", "--example", "stdio_server"]);
            if profile_dir.ends_with("release") {
                cmd.arg("--release");
            }
            assert!(cmd.status().unwrap().success(), "building the stdio_server example");
        }
    });
    path
}

fn spawn_child() -> (PeerHandle, Child) {
    let mut child = Command::new(example_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the stdio_server example is built by `cargo test`");
    let transport = Transport::content_length(child.stdout.take().unwrap(), child.stdin.take().unwrap(), 1 << 20);
    let router = Router::<()>::new()
        .method("confirm", |_, n: [u64; 1]| async move { Ok(n[0] * 10) })
        .method("unused", |_, _: NoParams| async { Ok(()) })
        .build()
        .unwrap();
    let (peer, conn) = Connection::new(transport, router, Arc::new(()), PeerConfig::default());
    tokio::spawn(conn.run());
    (peer, child)
}

#[tokio::test]
async fn a_child_process_answers_over_its_pipes_and_can_call_back() {
    let (peer, _child) = spawn_child();
    let echoed: Value = peer.request("echo", json!({"text": "Zoë ✓"})).await.unwrap();
    assert_eq!(echoed, json!({"text": "Zoë ✓"}));
    // The child's handler asks us while we wait on it: both directions on one pipe pair.
    let answer: u64 = peer.request("ask_parent", [4]).await.unwrap();
    assert_eq!(answer, 41);
}

#[tokio::test]
async fn a_crashing_child_fails_pending_calls_at_once() {
    let (peer, mut child) = spawn_child();
    let hanging = {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("hang", &(), Some(Duration::from_secs(60))).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    peer.notify("crash", ()).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), hanging).await.expect("call still pending").unwrap();
    assert_eq!(result.unwrap_err(), CallError::Disconnected);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(child.wait().await.unwrap().code(), Some(3));
}
