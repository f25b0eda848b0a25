//! The peer: correlation in both directions, timeouts,
//! disconnects, concurrency without deadlock, ordering, backpressure, shutdown.

use crate::common;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use common::{Framing, Seen, connect, connect_with, spec_router};
use futures_util::future::join_all;
use rpc_core::codec::websocket;
use rpc_core::peer::CloseReason;
use rpc_core::{CallError, Connection, NoParams, PeerConfig, PeerHandle, Router, RpcError, Shutdown, Transport};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Two peers connected by an in-memory pipe, NDJSON framed, each with its own
/// method table. Returns (server side, client side) handles. Tests on such a
/// pair run on paused time: no socket, no kernel, only tokio's clock, so what
/// they time is the same on any machine under any load.
fn pair<A, B>(server: Arc<Router<A>>, client: Arc<Router<B>>, server_config: PeerConfig) -> (PeerHandle, PeerHandle)
where
    A: Default + Send + Sync + 'static,
    B: Default + Send + Sync + 'static,
{
    let (a, b) = tokio::io::duplex(1 << 16);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let (server_peer, conn) =
        Connection::new(Transport::ndjson(ar, aw, 1 << 20), server, Arc::default(), server_config);
    tokio::spawn(conn.run());
    let (client_peer, conn) =
        Connection::new(Transport::ndjson(br, bw, 1 << 20), client, Arc::default(), PeerConfig::default());
    tokio::spawn(conn.run());
    (server_peer, client_peer)
}

/// A client method table whose `hang` never answers in time and `echo` answers at once.
fn client_router() -> Arc<Router<()>> {
    Router::new()
        .method("hang", |_, ms: [u64; 1]| async move {
            tokio::time::sleep(Duration::from_millis(ms[0])).await;
            Ok("late")
        })
        .method("echo", |_, p: Value| async move { Ok(p) })
        .method("confirm", |_, p: [u64; 1]| async move { Ok(p[0] * 2) })
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn outgoing_request_times_out_and_a_late_answer_is_dropped() {
    let (server, _client) = pair(Router::<()>::empty(), client_router(), PeerConfig::default());
    let started = Instant::now();
    let result = server.request_raw("hang", &[300], Some(Duration::from_millis(100))).await;
    assert_eq!(result.unwrap_err(), CallError::Timeout(Duration::from_millis(100)));
    assert!(started.elapsed() < Duration::from_millis(250));
    // The answer arrives after the timeout: dropped, and the connection still works.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let echoed: Value = server.request("echo", json!({"still": "alive"})).await.unwrap();
    assert_eq!(echoed, json!({"still": "alive"}));
}

/// The connection keeps one timer for all its calls: each call still fails
/// at its own deadline, whether it comes before, between or after those of
/// the calls made before it, and a call answered in time is unaffected.
#[tokio::test(start_paused = true)]
async fn each_call_times_out_at_its_own_deadline_in_any_order() {
    let (server, _client) = pair(Router::<()>::empty(), client_router(), PeerConfig::default());
    let started = Instant::now();
    let calls = [500, 100, 300, 50, 300].map(|ms| {
        let server = server.clone();
        tokio::spawn(async move {
            let result = server.request_raw("hang", &[10_000], Some(Duration::from_millis(ms))).await;
            (ms, result, started.elapsed())
        })
    });
    let answered = server.request_raw("confirm", &[21], Some(Duration::from_millis(200))).await;
    assert_eq!(answered.unwrap().get(), "42");
    for call in calls {
        let (ms, result, elapsed) = call.await.unwrap();
        let limit = Duration::from_millis(ms);
        assert_eq!(result.unwrap_err(), CallError::Timeout(limit));
        assert!(
            elapsed >= limit && elapsed < limit + Duration::from_millis(20),
            "{ms} ms call failed after {elapsed:?}"
        );
    }
    // A call made after the timer went quiet sets it again.
    let late = server.request_raw("hang", &[10_000], Some(Duration::from_millis(70))).await;
    assert_eq!(late.unwrap_err(), CallError::Timeout(Duration::from_millis(70)));
}

#[tokio::test(start_paused = true)]
async fn pending_calls_fail_at_once_when_the_connection_drops() {
    let (server, client) = pair(Router::<()>::empty(), client_router(), PeerConfig::default());
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let server = server.clone();
            async move { server.request_raw("hang", &[60_000], Some(Duration::from_secs(60))).await }
        })
        .collect();
    let all = tokio::spawn(join_all(calls));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    client.close(1000, "bye");
    let results = tokio::time::timeout(Duration::from_secs(2), all).await.expect("calls still hanging").unwrap();
    assert!(results.iter().all(|r| r.as_ref().unwrap_err() == &CallError::Disconnected), "{results:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // And a call made after the close fails without waiting for any timeout.
    let started = Instant::now();
    assert_eq!(
        server.request_raw("echo", &[1], Some(Duration::from_secs(30))).await.unwrap_err(),
        CallError::Disconnected
    );
    assert!(started.elapsed() < Duration::from_millis(200));
}

/// tower-lsp handles incoming messages with `buffer_unordered(4)`: once four
/// handlers are waiting for answers from the client, it stops reading, so the
/// answers they wait for are never read and the connection hangs for good.
/// Here 64 handlers at once all wait on the client with a limit of 4 running.
#[tokio::test(start_paused = true)]
async fn handlers_awaiting_the_other_side_do_not_deadlock_the_reader() {
    let server_router = Router::<()>::new()
        .method("ask", |cx, n: [u64; 1]| async move {
            let doubled: u64 = cx.peer.request("confirm", n).await.map_err(RpcError::internal)?;
            Ok(doubled + 1)
        })
        .build()
        .unwrap();
    let config = PeerConfig { max_concurrent: 4, ..PeerConfig::default() };
    let (_server, client) = pair(server_router, client_router(), config);
    let asks = (0..64u64).map(|n| {
        let client = client.clone();
        async move { client.request::<u64>("ask", [n]).await.unwrap() }
    });
    let answers = tokio::time::timeout(Duration::from_secs(5), join_all(asks)).await.expect("deadlocked");
    assert_eq!(answers, (0..64u64).map(|n| n * 2 + 1).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn answers_route_to_the_caller_that_asked() {
    let (server, _client) = pair(Router::<()>::empty(), client_router(), PeerConfig::default());
    let calls = (0..200).map(|n| {
        let server = server.clone();
        async move { server.request::<Value>("echo", json!({"n": n})).await.unwrap() }
    });
    let answers = join_all(calls).await;
    for (n, answer) in answers.into_iter().enumerate() {
        assert_eq!(answer, json!({"n": n}));
    }
}

#[tokio::test]
async fn duplicate_in_flight_id_is_refused_and_the_first_still_answers() {
    let mut c = connect(Framing::Ndjson, PeerConfig::default()).await;
    c.send(r#"{"jsonrpc":"2.0","method":"sleep","params":[300],"id":7}"#).await;
    c.send(r#"{"jsonrpc":"2.0","method":"echo","params":["second"],"id":7}"#).await;
    let first = c.recv().await;
    assert_eq!((first["error"]["code"].clone(), first["id"].clone()), (json!(-32600), json!(7)), "{first}");
    let second = c.recv().await;
    assert_eq!(second, json!({"jsonrpc":"2.0","id":7,"result":300}));
    // Once answered, the id may be used again.
    let again = c.call(r#"{"jsonrpc":"2.0","method":"echo","params":["again"],"id":7}"#).await;
    assert_eq!(again["result"], json!(["again"]));
}

#[tokio::test(start_paused = true)]
async fn notifications_are_handled_in_arrival_order() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let seen = order.clone();
    let router = Router::<()>::new()
        .method("note", move |_, n: [u64; 1]| {
            let seen = seen.clone();
            async move {
                // Uneven delays: handled concurrently, these would finish out of order.
                tokio::time::sleep(Duration::from_micros((n[0] * 7919) % 5 * 300)).await;
                seen.lock().push(n[0]);
                Ok(())
            }
        })
        .build()
        .unwrap();
    let (_server, client) = pair(router, Router::<()>::empty(), PeerConfig::default());
    for n in 0..200u64 {
        client.notify("note", [n]).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while order.lock().len() < 200 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*order.lock(), (0..200).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_slow_handler_does_not_hold_up_other_requests() {
    for framing in common::FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        c.send(r#"{"jsonrpc":"2.0","method":"sleep","params":[2000],"id":"slow"}"#).await;
        let started = Instant::now();
        let fast = c.call(r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":"fast"}"#).await;
        assert_eq!(fast["id"], "fast", "{framing:?}");
        assert!(started.elapsed() < Duration::from_millis(500), "{framing:?}: waited behind the slow one");
    }
}

#[tokio::test]
async fn requests_past_the_queue_are_refused_as_overloaded() {
    let config = PeerConfig { max_concurrent: 1, backlog: 1, ..PeerConfig::default() };
    let mut c = connect(Framing::Ndjson, config).await;
    for id in 1..=3 {
        c.send(&format!(r#"{{"jsonrpc":"2.0","method":"sleep","params":[200],"id":{id}}}"#)).await;
    }
    let refused = c.recv().await;
    assert_eq!(refused["id"], 3);
    assert_eq!(refused["error"]["code"], -32603);
    assert_eq!(refused["error"]["data"]["reason"], "overloaded");
    assert_eq!(c.recv().await["id"], 1);
    assert_eq!(c.recv().await["id"], 2, "the queued request runs once a slot frees up");
}

#[tokio::test]
async fn a_peer_that_stops_reading_its_replies_is_disconnected_after_the_stall_timeout() {
    let (a, b) = tokio::io::duplex(256); // replies to `b` are never read
    let (r, w) = tokio::io::split(a);
    let config = PeerConfig { write_budget: 1024, write_stall: Duration::from_millis(200), ..PeerConfig::default() };
    let router = Router::<()>::new().method("big", |_, _: NoParams| async { Ok("x".repeat(100)) }).build().unwrap();
    let (_peer, conn) = Connection::new(Transport::ndjson(r, w, 1024), router, Arc::new(()), config);
    let run = tokio::spawn(conn.run());
    let (_br, mut bw) = tokio::io::split(b);
    for id in 0..100 {
        if bw.write_all(format!("{{\"jsonrpc\":\"2.0\",\"method\":\"big\",\"id\":{id}}}\n").as_bytes()).await.is_err() {
            break;
        }
    }
    let reason = tokio::time::timeout(Duration::from_secs(2), run).await.expect("still connected").unwrap();
    assert!(matches!(reason, CloseReason::Failed(ref why) if why.contains("stalled")), "{reason:?}");
}

#[tokio::test]
async fn a_peer_that_only_gets_notifications_keeps_its_connection_while_paused() {
    let (a, b) = tokio::io::duplex(256); // not read for a while
    let (r, w) = tokio::io::split(a);
    let config = PeerConfig { write_budget: 1024, write_stall: Duration::from_millis(100), ..PeerConfig::default() };
    let (peer, conn) = Connection::new(Transport::ndjson(r, w, 1024), Router::<()>::empty(), Arc::new(()), config);
    tokio::spawn(conn.run());
    let sender = {
        let peer = peer.clone();
        tokio::spawn(async move {
            for n in 0..200 {
                peer.notify("event", json!({"n": n, "payload": "x".repeat(100)})).await.unwrap();
            }
        })
    };
    // Paused for several stall timeouts: the sender waits, nothing is closed.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!peer.is_closed());
    assert!(!sender.is_finished(), "the outbox is bounded, so the sender must be waiting");
    assert!(peer.stats().queued_bytes <= 1024 + 200, "{:?}", peer.stats());
    // Resumed: every notification arrives, in order.
    let mut lines = BufReader::new(b).lines();
    for n in 0..200 {
        let msg: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(msg["params"]["n"], n);
    }
    sender.await.unwrap();
}

#[tokio::test]
async fn a_websocket_peer_that_ignores_pings_is_dropped() {
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::protocol::Role;
    let (a, b) = tokio::io::duplex(1 << 16);
    let server = WebSocketStream::from_raw_socket(a, Role::Server, Some(websocket::config(1024))).await;
    // The client end is never polled, so it never answers a ping.
    let _silent = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
    let config = PeerConfig { keepalive: Duration::from_millis(100), keepalive_misses: 2, ..PeerConfig::default() };
    let (peer, conn) = Connection::new(websocket::transport(server), Router::<()>::empty(), Arc::new(()), config);
    let run = tokio::spawn(conn.run());
    let reason = tokio::time::timeout(Duration::from_secs(2), run).await.expect("still connected").unwrap();
    assert!(matches!(reason, CloseReason::Failed(ref why) if why.contains("ping")), "{reason:?}");
    assert!(peer.is_closed());
}

/// RFC 6455 §5.5.1: a close from the client is answered with a close (its
/// code echoed) before the connection goes, on both WebSocket transports.
#[tokio::test]
async fn a_websocket_client_that_closes_gets_a_close_back() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
    for direct in [true, false] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let transport = if direct {
                websocket::server_transport(stream, 1024)
            } else {
                let config = Some(websocket::config(1024));
                websocket::transport(WebSocketStream::from_raw_socket(stream, Role::Server, config).await)
            };
            let (_peer, conn) =
                Connection::new(transport, common::spec_router(), Arc::default(), PeerConfig::default());
            conn.run().await
        });
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut client = WebSocketStream::from_raw_socket(stream, Role::Client, None).await;
        client.send(Message::text(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#)).await.unwrap();
        let reply = client.next().await.unwrap().unwrap();
        assert_eq!(reply, Message::text(r#"{"jsonrpc":"2.0","id":1,"result":[1]}"#), "direct: {direct}");
        client.send(Message::Close(Some(CloseFrame { code: CloseCode::Away, reason: "bye".into() }))).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(2), client.next()).await.expect("an answer in time");
        let Some(Ok(Message::Close(Some(frame)))) = answer else { panic!("direct: {direct}: {answer:?}") };
        assert_eq!(frame.code, CloseCode::Away, "direct: {direct}");
        assert_eq!(tokio::time::timeout(Duration::from_secs(2), server).await.unwrap().unwrap(), CloseReason::Eof);
    }
}

#[tokio::test]
async fn an_answering_websocket_peer_survives_keepalive() {
    use futures_util::StreamExt;
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::protocol::Role;
    let (a, b) = tokio::io::duplex(1 << 16);
    let server = WebSocketStream::from_raw_socket(a, Role::Server, Some(websocket::config(1024))).await;
    let mut client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
    // Reading is what makes tungstenite answer pings.
    tokio::spawn(async move { while client.next().await.is_some() {} });
    let config = PeerConfig { keepalive: Duration::from_millis(50), keepalive_misses: 2, ..PeerConfig::default() };
    let (peer, conn) = Connection::new(websocket::transport(server), Router::<()>::empty(), Arc::new(()), config);
    tokio::spawn(conn.run());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!peer.is_closed());
}

#[tokio::test]
async fn shutdown_finishes_running_requests_refuses_new_ones_and_closes() {
    for framing in common::FRAMINGS {
        let shutdown = Shutdown::new();
        let mut c = connect_with(framing, PeerConfig::default(), spec_router(), shutdown.clone()).await;
        c.send(r#"{"jsonrpc":"2.0","method":"sleep","params":[300],"id":1}"#).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        shutdown.begin();
        let refused = c.call(r#"{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}"#).await;
        assert_eq!(refused["error"]["data"]["reason"], "shutting_down", "{framing:?}");
        assert_eq!(c.recv().await, json!({"jsonrpc":"2.0","id":1,"result":300}), "{framing:?}");
        assert_eq!(c.recv_within(Duration::from_secs(2)).await, None, "{framing:?}: closed after the last reply");
    }
}

#[tokio::test]
async fn response_with_both_result_and_error_follows_the_policy() {
    for accept in [false, true] {
        let both = match accept {
            true => Router::<()>::new().result_with_error(|_, _| true).build().unwrap(),
            false => Router::<()>::new().build().unwrap(),
        };
        // A hand-written "client" answering every request with both members.
        let (a, b) = tokio::io::duplex(1 << 16);
        let (r, w) = tokio::io::split(a);
        let config = PeerConfig::default();
        let (peer, conn) = Connection::new(Transport::ndjson(r, w, 1 << 20), both, Arc::new(()), config);
        tokio::spawn(conn.run());
        tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(b);
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let req: Value = serde_json::from_str(&line).unwrap();
                let reply = json!({"jsonrpc":"2.0","id":req["id"],"result":{"isError":true},"error":{"code":-1,"message":"tool failed"}});
                w.write_all(format!("{reply}\n").as_bytes()).await.unwrap();
            }
        });
        let result = peer.request::<Value>("tools/call", NoParamsValue).await;
        if accept {
            assert_eq!(result.unwrap(), json!({"isError": true}));
        } else {
            assert!(matches!(result, Err(CallError::Malformed(_))), "{result:?}");
        }
    }
}

/// An answer to our call that is not JSON-RPC 2.0 (no `jsonrpc`, another
/// version, or no outcome) fails that call at once, naming why, and is
/// never answered itself: the caller does not wait for its timeout, and the
/// other side is not sent an error about its own answer.
#[tokio::test]
async fn a_malformed_answer_to_our_call_fails_it_at_once_and_gets_no_reply() {
    let answers = [
        (json!({"result": "ok"}), "missing jsonrpc"),
        (json!({"jsonrpc": "1.0", "result": "ok"}), "exactly"),
        (json!({"jsonrpc": "2.0"}), "neither result nor error"),
    ];
    for (answer, why) in answers {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (r, w) = tokio::io::split(a);
        let (peer, conn) = Connection::new(
            Transport::ndjson(r, w, 1 << 20),
            Router::<()>::empty(),
            Arc::new(()),
            PeerConfig::default(),
        );
        tokio::spawn(conn.run());
        let mut reply = answer.clone();
        let other_side = tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(b);
            let mut lines = BufReader::new(r).lines();
            let request: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
            reply["id"] = request["id"].clone();
            w.write_all(format!("{reply}\n").as_bytes()).await.unwrap();
            // Whatever the peer says next (it should say nothing).
            tokio::time::timeout(Duration::from_millis(300), lines.next_line()).await.ok().map(|line| line.unwrap())
        });
        let started = std::time::Instant::now();
        let result = peer.request_raw("tools/call", &json!({}), Some(Duration::from_secs(10))).await;
        match &result {
            Err(CallError::Malformed(problem)) => assert!(problem.contains(why), "{problem}"),
            other => panic!("{answer}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2), "waited {:?}", started.elapsed());
        assert_eq!(other_side.await.unwrap(), None, "the answer {answer} was answered");
    }
}

#[derive(serde::Serialize)]
struct NoParamsValue;

#[tokio::test]
async fn a_half_closed_client_still_gets_its_replies() {
    let common::RawClient::Ndjson { mut io, .. } = connect(Framing::Ndjson, PeerConfig::default()).await else {
        unreachable!()
    };
    io.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"sleep\",\"params\":[100],\"id\":1}\n").await.unwrap();
    io.shutdown().await.unwrap();
    let mut reply = String::new();
    let mut reader = BufReader::new(io);
    tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut reply)).await.unwrap().unwrap();
    assert_eq!(serde_json::from_str::<Value>(&reply).unwrap(), json!({"jsonrpc":"2.0","id":1,"result":100}));
}

#[tokio::test]
async fn close_after_reply_writes_the_reply_then_closes() {
    let router = Router::<Seen>::new()
        .method("leave", |cx, _: NoParams| async move {
            cx.peer.close_after_reply();
            Err::<(), _>(RpcError::new(-32001, "too many failed attempts"))
        })
        .build()
        .unwrap();
    for framing in common::FRAMINGS {
        let mut c = connect_with(framing, PeerConfig::default(), router.clone(), Shutdown::new()).await;
        let reply = c.call(r#"{"jsonrpc":"2.0","method":"leave","id":1}"#).await;
        assert_eq!(reply["error"]["code"], -32001, "{framing:?}");
        assert_eq!(c.recv_within(Duration::from_secs(2)).await, None, "{framing:?}: still open");
    }
}

#[tokio::test]
async fn our_requests_carry_unique_ids_and_notifications_none() {
    // A raw client that records what the server sends it.
    let (a, b) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(a);
    let (peer, conn) =
        Connection::new(Transport::ndjson(r, w, 1 << 20), Router::<()>::empty(), Arc::new(()), PeerConfig::default());
    tokio::spawn(conn.run());
    for n in 0..3 {
        let peer = peer.clone();
        tokio::spawn(async move { peer.request_raw("ask", &[n], Some(Duration::from_secs(5))).await });
    }
    peer.notify("note", json!({})).await.unwrap();
    let mut lines = BufReader::new(b).lines();
    let mut ids = Vec::new();
    let mut notes = 0;
    for _ in 0..4 {
        let msg: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        match msg.get("id") {
            Some(id) => ids.push(id.as_u64().unwrap()),
            None => notes += 1,
        }
    }
    ids.sort();
    ids.dedup();
    assert_eq!((ids.len(), notes), (3, 1));
}

#[tokio::test]
async fn an_answer_without_result_or_error_fails_our_call_at_once_and_is_not_bounced() {
    let (a, b) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(a);
    let (peer, conn) =
        Connection::new(Transport::ndjson(r, w, 1 << 20), Router::<()>::empty(), Arc::new(()), PeerConfig::default());
    tokio::spawn(conn.run());
    let (br, mut bw) = tokio::io::split(b);
    let mut lines = BufReader::new(br).lines();
    let call =
        tokio::spawn(async move { peer.request_raw("tools/call", &json!({}), Some(Duration::from_secs(30))).await });
    let request: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    let started = Instant::now();
    bw.write_all(format!("{}\n", json!({"jsonrpc": "2.0", "id": request["id"]})).as_bytes()).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(2), call).await.expect("the call waited").unwrap();
    assert!(matches!(result, Err(CallError::Malformed(_))), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    // Nothing is sent back for it (it was an answer, not a request).
    let bounced = tokio::time::timeout(Duration::from_millis(200), lines.next_line()).await;
    assert!(bounced.is_err(), "bounced back: {bounced:?}");
    // An id that is not one of our calls is still an invalid request.
    bw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":424242}\n").await.unwrap();
    let reply: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_request_tells_the_other_side_which_call_to_stop() {
    // The other side records the cancel notices it hears, and the ids it was asked with.
    let heard: Arc<Mutex<Vec<Value>>> = Arc::default();
    let asked: Arc<Mutex<Vec<Value>>> = Arc::default();
    let (h, a) = (heard.clone(), asked.clone());
    let client = Router::<()>::new()
        .method("hang", move |cx: rpc_core::Ctx<()>, _: Value| {
            let a = a.clone();
            async move {
                a.lock().push(serde_json::to_value(cx.request_id()).unwrap());
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok("late")
            }
        })
        .method("notifications/cancelled", move |_, p: Value| {
            let h = h.clone();
            async move {
                h.lock().push(p);
                Ok(())
            }
        })
        .method("echo", |_, p: Value| async move { Ok(p) })
        .build()
        .unwrap();
    let (server, _client) = pair(Router::<()>::empty(), client, PeerConfig::default());
    let cancel = tokio_util::sync::CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let result = server.request_cancellable("hang", &json!({}), None, &cancel, Some(rpc_core::CancelNotice::MCP)).await;
    assert_eq!(result.unwrap_err(), CallError::Cancelled);
    assert!(started.elapsed() < Duration::from_millis(250), "cancelling ends the wait at once");

    // The late answer finds nobody; the connection goes on.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let echoed: Value = server.request("echo", json!({"after": "cancel"})).await.unwrap();
    assert_eq!(echoed, json!({"after": "cancel"}));
    let asked = asked.lock().clone();
    let heard = heard.lock().clone();
    assert_eq!(heard, vec![json!({"requestId": asked[0]})], "the notice names the abandoned request");
}

/// The panic policy (README, "Panics"): a handler that panics while it holds
/// shared state is answered -32603, and every later call on that state is
/// answered correctly. With std's Mutex the panic poisoned the lock, and
/// every later `lock().unwrap()` panicked in turn until the daemon restarted.
#[tokio::test(start_paused = true)]
async fn a_handler_that_panics_holding_a_lock_leaves_the_daemon_answering() {
    #[derive(Default)]
    struct Tally(Mutex<Vec<u64>>);
    let router = Router::<Tally>::new()
        .method("add", |ctx, [n]: [u64; 1]| async move {
            let mut tally = ctx.state.0.lock();
            if n == 13 {
                panic!("unlucky number, with the lock held");
            }
            tally.push(n);
            Ok(tally.len())
        })
        .method("sum", |ctx, _: NoParams| async move { Ok(ctx.state.0.lock().iter().sum::<u64>()) })
        .build()
        .unwrap();
    let (_server, client) = pair(router, Router::<()>::empty(), PeerConfig::default());
    assert_eq!(client.request::<usize>("add", [1]).await.unwrap(), 1);
    match client.request::<usize>("add", [13]).await {
        Err(CallError::Rpc(error)) => assert_eq!(error.code, -32603, "{error:?}"),
        other => panic!("expected -32603 for the panic, got {other:?}"),
    }
    assert_eq!(client.request::<usize>("add", [2]).await.unwrap(), 2);
    assert_eq!(client.request::<u64>("sum", json!({})).await.unwrap(), 3);
}

/// `PeerHandle::all_answered` resolves only once the answers are queued, so
/// what is sent after it (a daemon's goodbye to a child it opened) reaches
/// the other side behind them, on any thread the waiter runs. A waiter that
/// resumed when the handlers finished, as a count kept by the handlers would
/// make it, could queue its goodbye between a handler's end and its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_sent_after_all_answered_goes_out_behind_the_answers() {
    for round in 0..200 {
        let (release, gate) = tokio::sync::watch::channel(false);
        let router = Router::<()>::new()
            .method("work", move |_, _: NoParams| {
                let mut gate = gate.clone();
                async move {
                    let _ = gate.wait_for(|open| *open).await;
                    Ok("done")
                }
            })
            .build()
            .unwrap();
        let (client, server) = tokio::net::UnixStream::pair().unwrap();
        let (r, w) = server.into_split();
        let (peer, conn) =
            Connection::new(Transport::ndjson(r, w, 1 << 20), router, Arc::default(), PeerConfig::default());
        tokio::spawn(conn.run());
        let (read, mut write) = client.into_split();
        write.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"work\"}\n").await.unwrap();
        while peer.stats().running_bytes == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let goodbye = tokio::spawn(async move {
            peer.all_answered().await;
            peer.notify("goodbye", ()).await.unwrap();
        });
        release.send_replace(true);
        let mut lines = BufReader::new(read).lines();
        let first: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        let second: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        assert_eq!(
            (first["result"].clone(), second["method"].clone()),
            (json!("done"), json!("goodbye")),
            "round {round}"
        );
        goodbye.await.unwrap();
    }
}
