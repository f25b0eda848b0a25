//! The client side and what handlers get to abandon work:
//! connecting over a Unix socket, explicit timeouts (`None` = no timeout), the
//! cancellation token in `Ctx`, and a gate that holds messages without holding
//! the reader. Over real sockets served by `serve_ndjson`.

use crate::common;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::line::Line;
use rpc_core::listen::{self, Listener, NdjsonLimits};
use rpc_core::router::Answer;
use rpc_core::{CallError, Ctx, Gate, Id, NoParams, PeerConfig, Router, RpcError, Shutdown, Transport, client};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// How long a test waits for any one message.
const WAIT: Duration = Duration::from_secs(2);

/// Serves `router` over NDJSON on a fresh TCP port until `shutdown` begins.
fn serve_tcp<S: Send + Sync + 'static>(
    router: Arc<Router<S>>,
    shutdown: &Shutdown,
    new_state: impl Fn() -> S + Send + Sync + 'static,
) -> SocketAddr {
    let listener = listen::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let limits = NdjsonLimits { max_connections: 8, ..NdjsonLimits::default() };
        listen::serve_ndjson(Listener::Tcp(listener), "test", limits, &shutdown, router, new_state).await
    });
    addr
}

fn request(method: &str, params: Value, id: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id})
}

fn basic_router() -> Arc<Router<()>> {
    Router::new()
        .method("ping", |_, _: NoParams| async { Ok("pong") })
        .method("slow", |_, ms: [u64; 1]| async move {
            tokio::time::sleep(Duration::from_millis(ms[0])).await;
            Ok(ms[0])
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn connect_unix_reaches_a_serve_ndjson_unix_listener_whose_socket_is_0600() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/daemon.sock");
    let (listener, _file) = listen::bind_unix(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket file mode {mode:o}");
    let shutdown = Shutdown::new();
    let s = shutdown.clone();
    tokio::spawn(async move {
        listen::serve_ndjson(Listener::Unix(listener), "test", NdjsonLimits::default(), &s, basic_router(), || ()).await
    });
    let peer = client::connect_unix(&path).await.unwrap();
    for _ in 0..3 {
        let pong = tokio::time::timeout(Duration::from_secs(1), peer.request::<String>("ping", json!({})))
            .await
            .expect("no answer within 1 s");
        assert_eq!(pong.unwrap(), "pong");
    }
    let slow: u64 = peer.request("slow", [20]).await.unwrap();
    assert_eq!(slow, 20);
    shutdown.begin();
}

#[tokio::test]
async fn no_timeout_means_none_and_the_default_timeout_still_applies() {
    let shutdown = Shutdown::new();
    let addr = serve_tcp(basic_router(), &shutdown, || ());
    let stream = TcpStream::connect(addr).await.unwrap();
    let (r, w) = stream.into_split();
    let config = PeerConfig { request_timeout: Duration::from_millis(100), ..PeerConfig::default() };
    let peer = client::spawn_with(Transport::ndjson(r, w, 1 << 20), Router::<()>::empty(), (), config);

    // `None`: waits for the answer, five times the connection's default timeout.
    let started = Instant::now();
    let result = peer.request_raw("slow", &[500], None).await;
    let waited = started.elapsed();
    eprintln!("request_raw(None) answered after {waited:?}");
    assert_eq!(result.unwrap().get(), "500");
    assert!(waited >= Duration::from_millis(490), "{waited:?}");

    // `request`: the default timeout (100 ms) applies.
    let started = Instant::now();
    let result = peer.request::<u64>("slow", [500]).await;
    let waited = started.elapsed();
    eprintln!("request timed out after {waited:?}");
    assert_eq!(result.unwrap_err(), CallError::Timeout(Duration::from_millis(100)));
    assert!(waited >= Duration::from_millis(95) && waited < Duration::from_millis(300), "{waited:?}");
    // The connection survives the timeout.
    assert_eq!(peer.request::<String>("ping", json!({})).await.unwrap(), "pong");
    shutdown.begin();
}

/// What the `watch` handlers saw of their cancellation tokens.
#[derive(Default)]
struct Tokens {
    /// Set by a handler once its token is taken and its watcher runs.
    started: Notify,
    /// When a token fired, and the request id it belonged to.
    fired: Mutex<Vec<(Option<Id>, Instant)>>,
    /// What `cancel_call` returned.
    cancelled: Mutex<Vec<bool>>,
}

#[derive(serde::Deserialize)]
struct CancelParams {
    id: Id,
}

/// How a handler hears that its call is abandoned: its cancellation token,
/// or the cheaper [`Ctx::abandoned`]. Every test below runs with both.
#[derive(Clone, Copy, Debug)]
enum Hears {
    Token,
    Abandoned,
}

impl Hears {
    fn abandoned(self, cx: &Ctx<()>) -> futures_util::future::BoxFuture<'static, ()> {
        match self {
            Hears::Token => {
                let token = cx.cancel_token();
                Box::pin(async move { token.cancelled().await })
            }
            Hears::Abandoned => Box::pin(cx.abandoned()),
        }
    }
}

/// Spawns a task that records when `abandoned` resolves, as a handler hands
/// its token to work it starts (a forwarded call, a dialog).
fn record_when_fired(tokens: &Arc<Tokens>, id: Option<Id>, abandoned: impl Future<Output = ()> + Send + 'static) {
    let tokens = tokens.clone();
    tokio::spawn(async move {
        abandoned.await;
        tokens.fired.lock().push((id, Instant::now()));
    });
}

/// `watch`: a handler that waits on a person (up to 30 s), with a task
/// watching its token; it gives up when the token fires. `spawn_watch`: the
/// same task, but the handler answers at once. `cancel {id}` cancels a call.
fn token_router(tokens: Arc<Tokens>, hears: Hears) -> Arc<Router<()>> {
    let (spawns, cancels) = (tokens.clone(), tokens.clone());
    Router::new()
        .method("watch", move |cx: Ctx<()>, _: NoParams| {
            let tokens = tokens.clone();
            async move {
                record_when_fired(&tokens, cx.request_id().cloned(), hears.abandoned(&cx));
                tokens.started.notify_one();
                tokio::select! {
                    () = hears.abandoned(&cx) => Err(RpcError::new(-32800, "cancelled")),
                    () = tokio::time::sleep(Duration::from_secs(30)) => Ok("answered"),
                }
            }
        })
        .method("spawn_watch", move |cx: Ctx<()>, _: NoParams| {
            let tokens = spawns.clone();
            async move {
                record_when_fired(&tokens, cx.request_id().cloned(), hears.abandoned(&cx));
                Ok("watching")
            }
        })
        .method("cancel", move |cx: Ctx<()>, p: CancelParams| {
            let found = cx.peer.cancel_call(&p.id);
            cancels.cancelled.lock().push(found);
            async { Ok(()) }
        })
        .method("ping", |_, _: NoParams| async { Ok("pong") })
        .build()
        .unwrap()
}

async fn fired_within(tokens: &Tokens, since: Instant, limit: Duration) -> Option<Duration> {
    let deadline = since + limit;
    loop {
        if let Some((_, at)) = tokens.fired.lock().first() {
            return Some(at.duration_since(since));
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn spawned_work_hears_when_the_client_disconnects_with(hears: Hears) {
    let shutdown = Shutdown::new();
    let tokens = Arc::new(Tokens::default());
    let addr = serve_tcp(token_router(tokens.clone(), hears), &shutdown, || ());
    let mut c = Line::connect(addr).await;
    c.send(request("spawn_watch", json!({}), json!(1))).await;
    assert_eq!(c.recv(WAIT).await["result"], "watching");
    // The call is answered, but the work it started still holds its token.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokens.fired.lock().is_empty(), "fired while the connection was open");

    drop(c);
    let gone = Instant::now();
    let fired = fired_within(&tokens, gone, Duration::from_secs(1)).await;
    eprintln!("token of spawned work fired {fired:?} after the disconnect");
    assert!(fired.is_some(), "the token did not fire within 1 s of the client disconnecting");
    assert_eq!(tokens.fired.lock()[0].0, Some(Id::from(1)));
    shutdown.begin();
}

/// A client that disconnects while its call waits on a person (a dialog, a
/// call forwarded elsewhere with no timeout) must see that call's token fire,
/// so the work is abandoned rather than leaked (§10).
async fn a_running_call_hears_when_the_client_disconnects_with(hears: Hears) {
    let shutdown = Shutdown::new();
    let tokens = Arc::new(Tokens::default());
    let addr = serve_tcp(token_router(tokens.clone(), hears), &shutdown, || ());
    let mut c = Line::connect(addr).await;
    c.send(request("watch", json!({}), json!(1))).await;
    tokio::time::timeout(Duration::from_secs(2), tokens.started.notified()).await.expect("watch never started");
    assert!(tokens.fired.lock().is_empty(), "fired before anything happened");

    // The client goes away entirely while its call waits on a person.
    drop(c);
    let gone = Instant::now();
    let fired = fired_within(&tokens, gone, Duration::from_secs(1)).await;
    eprintln!("token of the running call fired {fired:?} after the disconnect");
    assert!(fired.is_some(), "the running call's token did not fire within 1 s of its client disconnecting");
    assert_eq!(tokens.fired.lock()[0].0, Some(Id::from(1)));
    shutdown.begin();
}

async fn a_cancelled_call_hears_it_and_the_connection_stays_with(hears: Hears) {
    let shutdown = Shutdown::new();
    let tokens = Arc::new(Tokens::default());
    let addr = serve_tcp(token_router(tokens.clone(), hears), &shutdown, || ());
    let mut c = Line::connect(addr).await;
    c.send(request("watch", json!({}), json!(7))).await;
    c.send(request("watch", json!({}), json!(8))).await;
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(2), tokens.started.notified()).await.expect("watch never started");
    }

    c.send(json!({"jsonrpc": "2.0", "method": "cancel", "params": {"id": 7}})).await;
    let sent = Instant::now();
    let reply = c.recv(WAIT).await;
    let took = sent.elapsed();
    eprintln!("cancelled call answered {took:?} after the cancel");
    assert_eq!(reply["id"], 7, "{reply}");
    assert_eq!(reply["error"]["code"], -32800, "{reply}");
    let fired = fired_within(&tokens, sent, Duration::from_secs(1)).await.expect("token did not fire");
    eprintln!("token fired {fired:?} after the cancel");
    assert_eq!(*tokens.cancelled.lock(), [true]);
    let fired_ids: Vec<Option<Id>> = tokens.fired.lock().iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(fired_ids, [Some(Id::from(7))], "only the cancelled call's token fires");

    // The connection stays open and serves; the other call is untouched.
    c.send(request("ping", json!({}), json!(9))).await;
    assert_eq!(c.recv(WAIT).await, json!({"jsonrpc": "2.0", "id": 9, "result": "pong"}));
    assert!(
        c.next_within(Duration::from_millis(200)).await.is_err(),
        "something else was sent or the connection closed"
    );
    assert_eq!(tokens.fired.lock().len(), 1);
    // Cancelling a call that is not in flight finds nothing.
    c.send(json!({"jsonrpc": "2.0", "method": "cancel", "params": {"id": 7}})).await;
    c.send(request("ping", json!({}), json!(10))).await;
    assert_eq!(c.recv(WAIT).await["id"], 10);
    assert_eq!(*tokens.cancelled.lock(), [true, false]);
    shutdown.begin();
}

/// Runs `test` with the token, then with `Ctx::abandoned`, saying which.
async fn with_both(test: impl AsyncFn(Hears)) {
    for hears in [Hears::Token, Hears::Abandoned] {
        eprintln!("-- the handler hears by {hears:?}");
        test(hears).await;
    }
}

#[tokio::test]
async fn spawned_work_hears_when_the_client_disconnects() {
    with_both(spawned_work_hears_when_the_client_disconnects_with).await;
}

#[tokio::test]
async fn a_running_call_hears_when_the_client_disconnects() {
    with_both(a_running_call_hears_when_the_client_disconnects_with).await;
}

#[tokio::test]
async fn a_cancelled_call_hears_it_and_the_connection_stays() {
    with_both(a_cancelled_call_hears_it_and_the_connection_stays_with).await;
}

/// Per connection: whether the peer's `initialize` finished, and a signal
/// when it does (a `Notify` wakes its waiters in the order they started waiting).
#[derive(Default)]
struct Init {
    ready: AtomicBool,
    opened: Arc<Notify>,
}

/// Everything but `initialize` and `ping` waits for `initialize` to finish.
/// `initialize` itself asks the client for its configuration first. With
/// `in_read_loop`, the gate is the connection's (`gate_conn`) and `work` a
/// `method_now` handler: the same holding, with no `Ctx` made for either.
fn gated_router(in_read_loop: bool) -> Arc<Router<Init>> {
    let router = Router::new()
        .method("initialize", |cx: Ctx<Init>, _: NoParams| async move {
            let config = cx
                .peer
                .request_raw("client/config", &json!({}), Some(Duration::from_secs(5)))
                .await
                .map_err(RpcError::internal)?;
            cx.state.ready.store(true, Ordering::SeqCst);
            cx.state.opened.notify_waiters();
            Ok(json!({"config": serde_json::from_str::<Value>(config.get()).unwrap()}))
        })
        .method("ping", |_, _: NoParams| async { Ok("pong") });
    let router = match in_read_loop {
        false => {
            router.method("work", |_, n: [u64; 1]| async move { Ok(n[0]) }).gate(|cx, method| hold(&cx.state, method))
        }
        true => router
            .method_now("work", |_, n: [u64; 1]| Answer::Now(Ok(n[0])))
            .gate_conn(|conn, method| hold(&conn.state, method)),
    };
    router.build().unwrap()
}

fn hold(init: &Init, method: &str) -> Gate {
    match method {
        "initialize" | "ping" => Gate::Open,
        _ => {
            // Waiting from here on, so a signal between the check and the wait is not missed.
            let opened = init.opened.clone().notified_owned();
            if init.ready.load(Ordering::SeqCst) {
                return Gate::Open;
            }
            Gate::Wait(Box::pin(async move {
                opened.await;
                Ok(())
            }))
        }
    }
}

#[tokio::test]
async fn a_gate_holds_requests_until_initialize_without_holding_the_reader() {
    a_gate_holds_requests_until_initialize_with(gated_router(false)).await;
}

#[tokio::test]
async fn a_connection_gate_holds_handlers_that_answer_in_the_read_loop_alike() {
    a_gate_holds_requests_until_initialize_with(gated_router(true)).await;
}

async fn a_gate_holds_requests_until_initialize_with(router: Arc<Router<Init>>) {
    let shutdown = Shutdown::new();
    let addr = serve_tcp(router, &shutdown, Init::default);
    let mut c = Line::connect(addr).await;
    for n in 1..=3 {
        c.send(request("work", json!([n]), json!(n))).await;
    }
    // Held: `ping` goes past them.
    c.send(request("ping", json!({}), json!("p1"))).await;
    assert_eq!(
        c.recv(WAIT).await,
        json!({"jsonrpc": "2.0", "id": "p1", "result": "pong"}),
        "ping waited behind held work"
    );

    // `initialize` calls the client while the held requests wait: that call is
    // sent, and its answer read, with the gate closed.
    c.send(request("initialize", json!({}), json!("init"))).await;
    let asked = c.recv(WAIT).await;
    assert_eq!(asked["method"], "client/config", "{asked}");
    c.send(request("ping", json!({}), json!("p2"))).await;
    assert_eq!(c.recv(WAIT).await["id"], "p2", "ping waited behind held work");
    assert!(c.next_within(Duration::from_millis(200)).await.is_err(), "held work answered before initialize");
    c.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"theme": "dark"}})).await;

    // Initialize completes first, then the held requests, in the order they were sent.
    let init = c.recv(WAIT).await;
    assert_eq!(init, json!({"jsonrpc": "2.0", "id": "init", "result": {"config": {"theme": "dark"}}}));
    let mut order = Vec::new();
    for _ in 1..=3 {
        let reply = c.recv(WAIT).await;
        assert_eq!(reply["result"], reply["id"], "{reply}");
        order.push(reply["id"].as_u64().unwrap());
    }
    eprintln!("held requests answered in order {order:?}");
    assert_eq!(order, [1, 2, 3]);
    // Once initialized, the gate is open.
    c.send(request("work", json!([4]), json!(4))).await;
    assert_eq!(c.recv(WAIT).await["result"], 4);
    shutdown.begin();
}
