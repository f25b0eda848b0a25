//! The handshake deadline and the admission share of connections that have not
//! done it, over real TCP sockets
//! served by `serve_ndjson`.

use crate::common;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::line::Line;
use rpc_core::listen::{self, Listener, NdjsonLimits};
use rpc_core::{NoParams, PeerConfig, PeerHandle, Router, Shutdown, client};
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::task::JoinHandle;

/// `hello` completes the handshake; `ping` answers whoever asks.
fn router() -> Arc<Router<()>> {
    Router::new()
        .method("hello", |cx, _: NoParams| async move {
            cx.peer.handshake_done();
            Ok("welcome")
        })
        .method("ping", |_, _: NoParams| async { Ok("pong") })
        .build()
        .unwrap()
}

/// Serves `router()` on a fresh TCP port with these limits; stops when `shutdown` begins.
fn serve(limits: NdjsonLimits, shutdown: &Shutdown) -> SocketAddr {
    let listener = listen::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        listen::serve_ndjson(Listener::Tcp(listener), "test", limits, &shutdown, router(), || ()).await
    });
    addr
}

fn limits(max_connections: usize, deadline: Duration) -> NdjsonLimits {
    NdjsonLimits {
        max_connections,
        peer: PeerConfig { handshake_deadline: Some(deadline), ..PeerConfig::default() },
        ..NdjsonLimits::default()
    }
}

/// A socket that never writes a byte; a task watches for the server closing it.
struct Idle {
    _writer: OwnedWriteHalf,
    watcher: JoinHandle<()>,
}

impl Idle {
    async fn open(addr: SocketAddr) -> Idle {
        let (mut r, w) = TcpStream::connect(addr).await.unwrap().into_split();
        let watcher = tokio::spawn(async move {
            let mut buf = [0u8; 256];
            while let Ok(n) = r.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        });
        Idle { _writer: w, watcher }
    }

    fn closed(&self) -> bool {
        self.watcher.is_finished()
    }
}

/// Polls `cond` every 10 ms until it holds or `limit` passes.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A real client (`client::connect_ndjson`) that has said hello.
async fn proven_client(addr: SocketAddr) -> PeerHandle {
    let peer = client::connect_ndjson(&addr.to_string()).await.unwrap();
    let started = Instant::now();
    let welcome = tokio::time::timeout(Duration::from_secs(1), peer.request::<String>("hello", json!({})))
        .await
        .expect("hello not answered within 1 s")
        .unwrap();
    assert_eq!(welcome, "welcome");
    eprintln!("hello answered in {:?}", started.elapsed());
    peer
}

async fn ping(peer: &PeerHandle) {
    let pong = tokio::time::timeout(Duration::from_secs(1), peer.request::<String>("ping", json!({})))
        .await
        .expect("ping not answered within 1 s")
        .unwrap();
    assert_eq!(pong, "pong");
}

#[tokio::test]
async fn connections_without_a_handshake_are_closed_at_the_deadline_and_proven_ones_stay() {
    let shutdown = Shutdown::new();
    let deadline = Duration::from_millis(300);
    let addr = serve(limits(16, deadline), &shutdown);

    // Never says anything: the server closes it at the deadline.
    let silent = async {
        let mut c = Line::connect(addr).await;
        let started = Instant::now();
        let got = c.next_within(Duration::from_secs(3)).await.expect("silent connection still open after 3 s");
        assert_eq!(got, None, "the server sent something instead of closing");
        started.elapsed()
    };
    // Busy, but never says hello: being active is not a handshake.
    let busy = async {
        let mut c = Line::connect(addr).await;
        let started = Instant::now();
        let mut pongs = 0;
        loop {
            assert!(started.elapsed() < Duration::from_secs(3), "busy connection without hello still open after 3 s");
            match c.call("ping", pongs).await {
                Some(reply) => {
                    assert_eq!(reply["result"], "pong", "{reply}");
                    pongs += 1;
                }
                None => break,
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        (started.elapsed(), pongs)
    };
    // Says hello at once, then keeps asking for over three deadlines.
    let proven = async {
        let mut c = Line::connect(addr).await;
        let started = Instant::now();
        let welcome = c.call("hello", 0).await.expect("closed before hello was answered");
        assert_eq!(welcome["result"], "welcome", "{welcome}");
        let mut n = 1;
        while started.elapsed() < deadline * 3 + Duration::from_millis(100) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let reply = c.call("ping", n).await.unwrap_or_else(|| panic!("proven connection closed after {n} pings"));
            assert_eq!(reply, json!({"jsonrpc": "2.0", "id": n, "result": "pong"}));
            n += 1;
        }
        (started.elapsed(), n - 1)
    };
    let (silent, (busy, pongs), (proven, pings)) = tokio::join!(silent, busy, proven);
    eprintln!(
        "silent closed after {silent:?}; busy closed after {busy:?} ({pongs} pongs); proven open after {proven:?} ({pings} pings)"
    );
    for (who, took) in [("silent", silent), ("busy", busy)] {
        assert!(took >= deadline - Duration::from_millis(20), "{who} closed before the deadline: {took:?}");
        assert!(took < deadline + Duration::from_millis(500), "{who} closed late: {took:?}");
    }
    assert!(pongs >= 2, "the busy connection was served until the deadline");
    shutdown.begin();
}

#[tokio::test]
async fn idle_unauthenticated_sockets_fill_only_their_share_and_never_lock_out_a_real_client() {
    let shutdown = Shutdown::new();
    // max 8: the share of connections without a handshake is 4.
    let addr = serve(limits(8, Duration::from_secs(10)), &shutdown);
    let mut idle: Vec<Idle> = Vec::new();
    for i in 0..8 {
        idle.push(Idle::open(addr).await);
        if i >= 4 {
            // Taking the share's fifth place closes the oldest one still waiting.
            let oldest = i - 4;
            assert!(
                eventually(Duration::from_secs(2), || idle[oldest].closed()).await,
                "connection {oldest} not closed when connection {i} arrived"
            );
            let open = idle.iter().filter(|c| !c.closed()).count();
            assert_eq!(open, 4, "after connection {i}: more than the share open, or the wrong ones closed");
        }
    }
    // Settled: exactly the four oldest were closed, the four newest stay.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closed: Vec<bool> = idle.iter().map(Idle::closed).collect();
    eprintln!("after 8 idle connections, closed: {closed:?}");
    assert_eq!(closed, [true, true, true, true, false, false, false, false]);

    // A real client gets in, says hello and is answered within 1 s; the oldest idle one made room.
    let started = Instant::now();
    let peer = proven_client(addr).await;
    eprintln!("real client admitted and answered after {:?}", started.elapsed());
    assert!(eventually(Duration::from_secs(2), || idle[4].closed()).await, "no idle connection evicted for it");
    ping(&peer).await;

    // More idle sockets evict idle ones, never the proven client.
    for _ in 0..4 {
        idle.push(Idle::open(addr).await);
    }
    assert!(eventually(Duration::from_secs(2), || idle[5..8].iter().all(Idle::closed)).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(idle[8..].iter().filter(|c| !c.closed()).count(), 4);
    for _ in 0..3 {
        ping(&peer).await;
    }
    assert!(!peer.is_closed());
    shutdown.begin();
}

#[tokio::test]
async fn a_full_listener_evicts_an_idle_connection_but_not_an_authenticated_one() {
    let shutdown = Shutdown::new();
    // max 4: the share is 2.
    let addr = serve(limits(4, Duration::from_secs(10)), &shutdown);
    let a = proven_client(addr).await;
    let b = proven_client(addr).await;
    let i1 = Idle::open(addr).await;
    tokio::time::sleep(Duration::from_millis(50)).await; // accepted in this order
    let i2 = Idle::open(addr).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!i1.closed() && !i2.closed(), "2 authenticated + 2 idle fit in 4");

    // Full: a new client still gets in, in place of the oldest idle connection.
    let started = Instant::now();
    let c = proven_client(addr).await;
    eprintln!("client admitted into a full listener in {:?}", started.elapsed());
    assert!(eventually(Duration::from_secs(1), || i1.closed()).await, "the oldest idle connection was not evicted");
    assert!(!i2.closed(), "only one idle connection had to go");
    let d = proven_client(addr).await;
    assert!(eventually(Duration::from_secs(1), || i2.closed()).await);

    // Four authenticated connections: a fifth is closed at once, even one that says hello.
    let mut fifth = Line::connect(addr).await;
    let started = Instant::now();
    fifth.send(json!({"jsonrpc": "2.0", "method": "hello", "id": 1})).await;
    let got = fifth.next_within(Duration::from_secs(1)).await.expect("fifth connection left hanging");
    eprintln!("fifth connection closed after {:?}", started.elapsed());
    assert_eq!(got, None, "the fifth connection was served");
    for peer in [&a, &b, &c, &d] {
        ping(peer).await;
        assert!(!peer.is_closed());
    }
    shutdown.begin();
}
