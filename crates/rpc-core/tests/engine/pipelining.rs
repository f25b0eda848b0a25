//! How the replies to a pipelined burst leave: a connection that has its
//! thread to itself sends the first ones while it handles the rest, so the
//! client works on them meanwhile; connections that share their thread with
//! other busy ones answer each burst in one write. The server runs on a
//! thread of its own (as a daemon's does), its handlers taking a few
//! milliseconds each, and counts what it has handled; the client notes that
//! count when the first reply arrives.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::line::Line;
use rpc_core::listen::{self, Listener};
use rpc_core::router::Answer;
use rpc_core::{Connection, NoParams, PeerConfig, Router, Shutdown};

const BURST: usize = 64;

/// Serves `work` (each call takes 3 ms of the server's thread and counts
/// itself) and `ping` over NDJSON on a thread and runtime of its own.
fn serve(handled: Arc<AtomicUsize>) -> std::net::SocketAddr {
    let router: Arc<Router<()>> = Router::new()
        .method_now("work", move |_, _: NoParams| {
            std::thread::sleep(Duration::from_millis(3));
            Answer::Now(Ok(handled.fetch_add(1, Ordering::SeqCst) + 1))
        })
        .method_now("ping", |_, _: NoParams| Answer::Now(Ok("pong")))
        .build()
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let shutdown = Shutdown::new();
            listen::serve(Listener::Tcp(listener), "test", 16, &shutdown.clone(), move |stream, _| {
                let router = router.clone();
                async move {
                    let (_peer, conn) =
                        Connection::new(stream.into_ndjson(1 << 20), router, Arc::default(), PeerConfig::default());
                    conn.run().await;
                }
            })
            .await
        });
    });
    addr
}

/// `count` `work` calls, to be sent in one write.
fn burst(count: usize) -> String {
    (0..count).map(|i| format!("{{\"jsonrpc\":\"2.0\",\"method\":\"work\",\"id\":{i}}}\n")).collect()
}

/// Connects and makes one call, so that this connection is the one the
/// server polled last.
async fn connect(addr: std::net::SocketAddr) -> Line {
    let mut client = Line::connect(addr).await;
    ping(&mut client).await;
    client
}

async fn ping(client: &mut Line) {
    assert_eq!(client.call("ping", 0).await.expect("the server closed")["result"], "pong");
}

/// Reads `count` replies in order; returns what the server had handled when
/// each arrived.
async fn read_replies(client: &mut Line, count: usize, handled: &AtomicUsize) -> Vec<usize> {
    let mut handled_at = Vec::with_capacity(count);
    for i in 0..count {
        let reply = client.recv(Duration::from_secs(10)).await;
        handled_at.push(handled.load(Ordering::SeqCst));
        assert_eq!(reply["id"], i, "replies in order");
    }
    handled_at
}

#[tokio::test]
async fn a_connection_alone_on_its_thread_sends_its_first_replies_while_it_handles_the_rest() {
    let handled = Arc::new(AtomicUsize::new(0));
    let mut client = connect(serve(handled.clone())).await;
    client.send_bytes(burst(BURST).as_bytes()).await;
    let at_first = read_replies(&mut client, BURST, &handled).await[0];
    // The first write leaves after a slice of the burst (8); 56 calls of
    // 3 ms each are still to run when the client reads it.
    assert!(at_first < BURST / 2, "the first reply left after {at_first} of {BURST} calls were handled");
}

#[tokio::test]
async fn a_client_that_keeps_ahead_gets_its_replies_a_batch_at_a_time() {
    // Four bursts' worth in one write: the connection catches up with its
    // client only after the first 64, so only those leave in slices; the
    // next 64 are handled before any of their replies is written.
    let handled = Arc::new(AtomicUsize::new(0));
    let mut client = connect(serve(handled.clone())).await;
    client.send_bytes(burst(4 * BURST).as_bytes()).await;
    let handled_at = read_replies(&mut client, 4 * BURST, &handled).await;
    assert!(handled_at[0] < BURST / 2, "the first reply left after {} calls were handled", handled_at[0]);
    assert!(
        handled_at[BURST] >= 2 * BURST,
        "reply {BURST} left after only {} calls were handled: a client that keeps ahead was answered in slices",
        handled_at[BURST]
    );
}

#[tokio::test]
async fn connections_that_share_a_busy_thread_answer_each_burst_in_one_write() {
    let handled = Arc::new(AtomicUsize::new(0));
    let addr = serve(handled.clone());
    let (mut a, mut b) = (connect(addr).await, connect(addr).await);
    // `a` was served last; then two bursts, `b`'s first. While the server
    // handles `b`'s (about 0.2 s) `a`'s arrives: each connection takes its
    // turn after the other's, and answers its whole burst at once.
    ping(&mut b).await;
    ping(&mut a).await;
    b.send_bytes(burst(BURST).as_bytes()).await;
    a.send_bytes(burst(BURST).as_bytes()).await;
    let b_at_first = read_replies(&mut b, BURST, &handled).await[0];
    let a_at_first = read_replies(&mut a, BURST, &handled).await[0];
    assert_eq!(b_at_first, BURST, "b's first reply left with the rest of its burst");
    assert_eq!(a_at_first, 2 * BURST, "a's first reply left with the rest of its burst");
}
