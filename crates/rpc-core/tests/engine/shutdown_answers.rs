//! Shutdown answers rather than drops:
//! queued requests are refused at once, running ones get the grace period and
//! then the same error, and our own calls in flight get the grace too. Over
//! real TCP sockets.

use crate::common;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::line::Line;
use rpc_core::listen::{self, Listener, NdjsonLimits};
use rpc_core::{NoParams, PeerConfig, PeerHandle, Router, Shutdown};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// What the server's handlers share with the test.
#[derive(Default)]
struct Probe {
    /// Signalled by the `mark` notification: everything sent before it was read.
    marked: Notify,
    /// The connection, once a client called `register`.
    peer: Mutex<Option<PeerHandle>>,
}

fn router(probe: Arc<Probe>) -> Arc<Router<()>> {
    let (mark, register) = (probe.clone(), probe);
    Router::new()
        .method("sleep", |_, ms: [u64; 1]| async move {
            tokio::time::sleep(Duration::from_millis(ms[0])).await;
            Ok(ms[0])
        })
        .method("echo", |_, p: Value| async move { Ok(p) })
        .method("mark", move |_, _: NoParams| {
            mark.marked.notify_one();
            async { Ok(()) }
        })
        .method("register", move |cx, _: NoParams| {
            *register.peer.lock() = Some(cx.peer.clone());
            async { Ok("registered") }
        })
        .build()
        .unwrap()
}

/// Serves `router` on a fresh TCP port until `shutdown` begins.
fn serve(config: PeerConfig, shutdown: &Shutdown, probe: Arc<Probe>) -> SocketAddr {
    let listener = listen::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = shutdown.clone();
    let limits = NdjsonLimits { max_connections: 8, peer: config, ..NdjsonLimits::default() };
    tokio::spawn(async move {
        listen::serve_ndjson(Listener::Tcp(listener), "test", limits, &shutdown, router(probe), || ()).await
    });
    addr
}

/// Runs `Shutdown::wait(grace)` in the background; the handle ends when it returns.
fn wait_in_background(shutdown: &Shutdown, grace: Duration) -> tokio::task::JoinHandle<()> {
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let _ = shutdown.wait(grace).await;
    })
}

fn request(method: &str, params: Value, id: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id})
}

fn assert_shutting_down(reply: &Value) {
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert_eq!(reply["error"]["data"]["reason"], "shutting_down", "{reply}");
}

#[tokio::test]
async fn queued_requests_are_refused_at_once_and_the_running_one_finishes() {
    let shutdown = Shutdown::new();
    let probe = Arc::new(Probe::default());
    let addr = serve(PeerConfig { max_concurrent: 1, ..PeerConfig::default() }, &shutdown, probe.clone());
    let mut c = Line::connect(addr).await;
    let sent = Instant::now();
    c.send(request("sleep", json!([2000]), json!(1))).await;
    for id in 2..=4 {
        c.send(request("sleep", json!([50]), json!(id))).await;
    }
    mark(&mut c, &probe).await;

    shutdown.begin();
    let begun = Instant::now();
    let waiter = wait_in_background(&shutdown, Duration::from_secs(5));
    let mut refused = Vec::new();
    for _ in 0..3 {
        let reply = c.recv(Duration::from_secs(1)).await;
        assert_shutting_down(&reply);
        refused.push(reply["id"].as_u64().unwrap());
    }
    let took = begun.elapsed();
    eprintln!("3 queued requests refused {took:?} after begin");
    refused.sort();
    assert_eq!(refused, [2, 3, 4]);
    assert!(took < Duration::from_millis(100), "queued requests waited {took:?} for their refusal");

    // A request sent after the drain began is refused too.
    c.send(request("echo", json!(["late"]), json!(5))).await;
    let late = c.recv(Duration::from_secs(1)).await;
    assert_eq!(late["id"], 5);
    assert_shutting_down(&late);

    // The running one finishes within the grace and gets its real result, then the close.
    let result = c.recv(Duration::from_secs(3)).await;
    eprintln!("running request answered {:?} after it was sent", sent.elapsed());
    assert_eq!(result, json!({"jsonrpc": "2.0", "id": 1, "result": 2000}));
    c.expect_close(Duration::from_secs(1)).await;
    tokio::time::timeout(Duration::from_secs(2), waiter).await.expect("wait did not return").unwrap();
}

#[tokio::test]
async fn a_running_request_gets_the_grace_period_then_shutting_down() {
    let shutdown = Shutdown::new();
    let probe = Arc::new(Probe::default());
    let addr = serve(PeerConfig::default(), &shutdown, probe.clone());
    let mut c = Line::connect(addr).await;
    c.send(request("sleep", json!([10_000]), json!(1))).await;
    mark(&mut c, &probe).await;

    shutdown.begin();
    let begun = Instant::now();
    let waiter = wait_in_background(&shutdown, Duration::from_millis(300));
    let reply = c.recv(Duration::from_secs(3)).await;
    let took = begun.elapsed();
    eprintln!("running request answered shutting_down {took:?} after begin (grace 300 ms)");
    assert_eq!(reply["id"], 1);
    assert_shutting_down(&reply);
    assert!(took >= Duration::from_millis(290), "answered before the grace was over: {took:?}");
    assert!(took < Duration::from_secs(1), "answered long after the grace: {took:?}");
    c.expect_close(Duration::from_secs(1)).await;
    eprintln!("closed {:?} after begin", begun.elapsed());
    tokio::time::timeout(Duration::from_secs(3), waiter).await.expect("wait did not return").unwrap();
}

#[tokio::test]
async fn a_running_batch_gets_one_array_of_shutting_down_errors_after_the_grace() {
    let shutdown = Shutdown::new();
    let probe = Arc::new(Probe::default());
    let addr = serve(PeerConfig::default(), &shutdown, probe.clone());
    let mut c = Line::connect(addr).await;
    c.send(json!([request("sleep", json!([10_000]), json!("a")), request("sleep", json!([10_000]), json!("b"))])).await;
    mark(&mut c, &probe).await;

    shutdown.begin();
    let begun = Instant::now();
    let waiter = wait_in_background(&shutdown, Duration::from_millis(300));
    let reply = c.recv(Duration::from_secs(3)).await;
    let took = begun.elapsed();
    eprintln!("running batch answered {took:?} after begin (grace 300 ms)");
    let items = reply.as_array().unwrap_or_else(|| panic!("not one array: {reply}"));
    assert_eq!(items.len(), 2, "{reply}");
    let mut ids: Vec<&str> = items.iter().map(|r| r["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b"]);
    items.iter().for_each(assert_shutting_down);
    assert!(took >= Duration::from_millis(290), "answered before the grace was over: {took:?}");
    assert!(took < Duration::from_secs(1), "answered long after the grace: {took:?}");
    c.expect_close(Duration::from_secs(1)).await;
    tokio::time::timeout(Duration::from_secs(3), waiter).await.expect("wait did not return").unwrap();
}

#[tokio::test]
async fn our_call_in_flight_gets_the_grace_and_its_answer() {
    let shutdown = Shutdown::new();
    let probe = Arc::new(Probe::default());
    let addr = serve(PeerConfig::default(), &shutdown, probe.clone());
    let mut c = Line::connect(addr).await;
    c.send(request("register", json!({}), json!(1))).await;
    assert_eq!(c.recv(Duration::from_secs(1)).await["result"], "registered");
    let server_side = probe.peer.lock().clone().expect("registered");

    // The server asks the client something, and shutdown begins while it waits.
    let call = tokio::spawn(async move {
        server_side.request_raw("confirm", &json!([21]), Some(Duration::from_secs(5))).await.map(|raw| raw.to_string())
    });
    let asked = c.recv(Duration::from_secs(1)).await;
    assert_eq!(asked["method"], "confirm", "{asked}");
    shutdown.begin();
    let waiter = wait_in_background(&shutdown, Duration::from_secs(5));

    // Answered 200 ms later: the connection is still open for it, and the call gets it.
    assert!(c.next_within(Duration::from_millis(200)).await.is_err(), "closed (or sent more) before the answer");
    c.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": 42})).await;
    let answered = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(1), call).await.expect("call still waiting").unwrap();
    assert_eq!(result, Ok("42".to_owned()));
    c.expect_close(Duration::from_secs(1)).await;
    eprintln!("closed {:?} after our call was answered", answered.elapsed());
    tokio::time::timeout(Duration::from_secs(2), waiter).await.expect("wait did not return").unwrap();
}

/// `PeerHandle::stop_serving` on one connection, the daemon still running:
/// a queued request and a new one are answered `shutting_down` at once, the
/// running one when the grace is over, and the call resolves only after
/// those answers are queued. The connection stays open: what the server
/// sends next arrives behind them, and its own call still gets its answer.
#[tokio::test]
async fn a_connection_that_stops_serving_answers_every_request_and_stays_open_for_ours() {
    let shutdown = Shutdown::new();
    let probe = Arc::new(Probe::default());
    let addr = serve(PeerConfig { max_concurrent: 2, ..PeerConfig::default() }, &shutdown, probe.clone());
    let mut c = Line::connect(addr).await;
    c.send(request("register", json!({}), json!(1))).await;
    assert_eq!(c.recv(Duration::from_secs(1)).await["result"], "registered");
    let server_side = probe.peer.lock().clone().expect("registered");
    // Two run (one short, one past the grace), one waits for a slot.
    c.send(request("sleep", json!([100]), json!("short"))).await;
    c.send(request("sleep", json!([10_000]), json!("long"))).await;
    c.send(request("sleep", json!([50]), json!("queued"))).await;
    mark(&mut c, &probe).await;

    let begun = Instant::now();
    let stopping = server_side.clone();
    let stopped = tokio::spawn(async move {
        stopping.stop_serving(Duration::from_millis(400)).await;
        let resolved = begun.elapsed();
        stopping.notify("goodbye", ()).await.unwrap();
        resolved
    });
    let queued = c.recv(Duration::from_secs(1)).await;
    assert_eq!(queued["id"], "queued", "{queued}");
    assert_shutting_down(&queued);
    assert!(begun.elapsed() < Duration::from_millis(80), "the queued one waited {:?}", begun.elapsed());
    assert!(!server_side.is_serving());
    c.send(request("echo", json!(["late"]), json!("late"))).await;
    let late = c.recv(Duration::from_secs(1)).await;
    assert_eq!(late["id"], "late", "{late}");
    assert_shutting_down(&late);
    // The short one finishes within the grace with its real result.
    assert_eq!(c.recv(Duration::from_secs(1)).await, json!({"jsonrpc": "2.0", "id": "short", "result": 100}));
    let long = c.recv(Duration::from_secs(2)).await;
    let took = begun.elapsed();
    assert_eq!(long["id"], "long", "{long}");
    assert_shutting_down(&long);
    assert!(took >= Duration::from_millis(390), "answered before the grace was over: {took:?}");
    let goodbye = c.recv(Duration::from_secs(1)).await;
    assert_eq!(goodbye["method"], "goodbye", "the goodbye comes after every answer: {goodbye}");
    let resolved = stopped.await.unwrap();
    assert!(resolved >= Duration::from_millis(390), "resolved before the last answer: {resolved:?}");

    // Still open for the server's own calls.
    let call = tokio::spawn(async move {
        server_side.request_raw("confirm", &json!([21]), Some(Duration::from_secs(5))).await.map(|raw| raw.to_string())
    });
    let asked = c.recv(Duration::from_secs(1)).await;
    assert_eq!(asked["method"], "confirm", "{asked}");
    c.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": 42})).await;
    assert_eq!(call.await.unwrap(), Ok("42".to_owned()));
}

/// Sends `mark` and waits until the server handled it (and so read everything before it).
async fn mark(line: &mut Line, probe: &Probe) {
    line.send(json!({"jsonrpc": "2.0", "method": "mark"})).await;
    tokio::time::timeout(Duration::from_secs(2), probe.marked.notified()).await.expect("mark never handled");
}
