//! Shared pieces of rpc-core's tests: a method table, a server per framing, and
//! a raw client that sends and receives JSON texts on any framing.
#![allow(dead_code)]

pub mod line;

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rpc_core::codec::{ContentLengthCodec, NdjsonCodec, websocket};
use rpc_core::listen::{self, Listener};
use rpc_core::message::Kind;
use rpc_core::router::Answer;
use rpc_core::{Connection, NoParams, Outbound, PeerConfig, Router, RpcError, Shutdown, Transport};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::codec::{Decoder, Encoder};

/// Per-connection state of the test server: what notifications it saw.
#[derive(Default)]
pub struct Seen {
    pub notes: Mutex<Vec<Value>>,
}

#[derive(Deserialize)]
struct Subtract {
    minuend: i64,
    subtrahend: i64,
}

/// The methods of the JSON-RPC 2.0 specification's examples, plus a few for
/// edge cases (`panic`, `sleep`, `echo`).
pub fn spec_router() -> Arc<Router<Seen>> {
    Router::new()
        .method("subtract", |_, p: Subtract| async move { Ok(p.minuend - p.subtrahend) })
        .method("sum", |_, p: Vec<i64>| async move { Ok(p.iter().sum::<i64>()) })
        .method("get_data", |_, _: NoParams| async { Ok(json!(["hello", 5])) })
        .method("update", |cx, p: Value| async move { record(&cx.state, "update", p) })
        .method("notify_hello", |cx, p: Value| async move { record(&cx.state, "notify_hello", p) })
        .method("notify_sum", |cx, p: Value| async move { record(&cx.state, "notify_sum", p) })
        .method("echo", |_, p: Value| async move { Ok(p) })
        .method("sleep", |_, ms: [u64; 1]| async move {
            tokio::time::sleep(Duration::from_millis(ms[0])).await;
            Ok(ms[0])
        })
        .method("panic", |_, _: NoParams| async move {
            if true {
                panic!("handler bug");
            }
            Ok(())
        })
        .method("late_panic", |_, _: NoParams| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if true {
                panic!("handler bug after a wait");
            }
            Ok(())
        })
        .method("fail", |_, _: NoParams| async move { Err::<(), _>(RpcError::new(-32042, "own error")) })
        .method("seen", |cx, _: NoParams| async move { Ok(Value::Array(cx.state.notes.lock().clone())) })
        // `method_now` handlers: answered inline, or later when they must wait.
        .method_now("now_subtract", |_, p: Subtract| Answer::Now(Ok(p.minuend - p.subtrahend)))
        .method_now("now_note", |cx, p: Value| Answer::Now(record(&cx.state, "now_note", p)))
        .method_now("now_fail", |_, _: NoParams| Answer::<()>::Now(Err(RpcError::new(-32043, "now error"))))
        .method_now("now_later", |_, ms: [u64; 1]| {
            Answer::Later(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(ms[0])).await;
                Ok(ms[0])
            }))
        })
        .method_now("now_panic", |_, _: NoParams| -> Answer<()> { panic!("inline handler bug") })
        .build()
        .unwrap()
}

fn record(seen: &Seen, method: &str, params: Value) -> Result<(), RpcError> {
    seen.notes.lock().push(json!([method, params]));
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Ndjson,
    ContentLength,
    WebSocket,
}

pub const FRAMINGS: [Framing; 3] = [Framing::Ndjson, Framing::ContentLength, Framing::WebSocket];

/// A client that speaks one framing at the byte level, to send exactly the
/// texts a test wants (including invalid ones).
#[allow(clippy::large_enum_variant)]
pub enum RawClient {
    Bytes { io: DuplexStream, buf: bytes::BytesMut, codec: ContentLengthCodec },
    Ndjson { io: TcpStream, buf: bytes::BytesMut, codec: NdjsonCodec },
    Ws(WebSocketStream<TcpStream>),
}

/// Starts a server with `router` on `framing` and returns a client connected to it.
pub async fn connect(framing: Framing, config: PeerConfig) -> RawClient {
    connect_with(framing, config, spec_router(), Shutdown::new()).await
}

pub async fn connect_with(
    framing: Framing,
    config: PeerConfig,
    router: Arc<Router<Seen>>,
    shutdown: Shutdown,
) -> RawClient {
    match framing {
        Framing::Ndjson => {
            let listener = listen::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
            let addr = listener.local_addr().unwrap();
            let s = shutdown.clone();
            tokio::spawn(async move {
                listen::serve(Listener::Tcp(listener), "test", 16, &s.clone(), move |stream, _| {
                    let (router, config, s) = (router.clone(), config.clone(), s.clone());
                    async move {
                        let transport = stream.into_ndjson(1024 * 1024);
                        let (_peer, conn) = Connection::new(transport, router, Arc::default(), config);
                        conn.with_shutdown(&s).run().await;
                    }
                })
                .await
            });
            let io = TcpStream::connect(addr).await.unwrap();
            RawClient::Ndjson { io, buf: Default::default(), codec: NdjsonCodec::new(usize::MAX) }
        }
        Framing::ContentLength => {
            let (client, server) = tokio::io::duplex(1 << 20);
            let (r, w) = tokio::io::split(server);
            let transport = Transport::content_length(r, w, 1024 * 1024);
            let (_peer, conn) = Connection::new(transport, router, Arc::default(), config);
            tokio::spawn(conn.with_shutdown(&shutdown).run());
            RawClient::Bytes { io: client, buf: Default::default(), codec: ContentLengthCodec::new(usize::MAX) }
        }
        Framing::WebSocket => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (router, config, shutdown) = (router.clone(), config.clone(), shutdown.clone());
                    tokio::spawn(async move {
                        let ws = tokio_tungstenite::accept_async_with_config(stream, Some(websocket::config(1 << 20)))
                            .await
                            .unwrap();
                        let (_peer, conn) = Connection::new(websocket::transport(ws), router, Arc::default(), config);
                        conn.with_shutdown(&shutdown).run().await;
                    });
                }
            });
            let stream = TcpStream::connect(addr).await.unwrap();
            let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), stream).await.unwrap();
            RawClient::Ws(ws)
        }
    }
}

impl RawClient {
    /// Sends one JSON text, framed.
    pub async fn send(&mut self, text: &str) {
        match self {
            RawClient::Ndjson { io, .. } => {
                let mut line = text.replace('\n', " ").into_bytes();
                line.push(b'\n');
                io.write_all(&line).await.unwrap();
            }
            RawClient::Bytes { io, .. } => {
                let mut dst = bytes::BytesMut::new();
                ContentLengthCodec::new(usize::MAX)
                    .encode(Outbound::message(Kind::Request, text.to_owned()), &mut dst)
                    .unwrap();
                io.write_all(&dst).await.unwrap();
            }
            RawClient::Ws(ws) => ws.send(WsMessage::text(text)).await.unwrap(),
        }
    }

    /// Sends raw bytes with no framing added.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        match self {
            RawClient::Ndjson { io, .. } => io.write_all(bytes).await.unwrap(),
            RawClient::Bytes { io, .. } => io.write_all(bytes).await.unwrap(),
            RawClient::Ws(ws) => ws.send(WsMessage::binary(bytes.to_vec())).await.unwrap(),
        }
    }

    /// The next JSON text, or `None` if nothing arrives within `timeout` or the
    /// connection closed.
    pub async fn recv_within(&mut self, timeout: Duration) -> Option<String> {
        tokio::time::timeout(timeout, self.recv_inner()).await.ok().flatten()
    }

    pub async fn recv(&mut self) -> Value {
        let text = self.recv_within(Duration::from_secs(10)).await.expect("no reply within 10 s");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {text}"))
    }

    async fn recv_inner(&mut self) -> Option<String> {
        match self {
            RawClient::Ndjson { io, buf, codec } => loop {
                if let Some(rpc_core::Frame::Message(m)) = codec.decode(buf).unwrap() {
                    return Some(String::from_utf8(m.to_vec()).unwrap());
                }
                if io.read_buf(buf).await.ok()? == 0 {
                    return None;
                }
            },
            RawClient::Bytes { io, buf, codec } => loop {
                if let Some(rpc_core::Frame::Message(m)) = codec.decode(buf).unwrap() {
                    return Some(String::from_utf8(m.to_vec()).unwrap());
                }
                if io.read_buf(buf).await.ok()? == 0 {
                    return None;
                }
            },
            RawClient::Ws(ws) => loop {
                match ws.next().await? {
                    Ok(WsMessage::Text(t)) => return Some(t.to_string()),
                    Ok(WsMessage::Close(_)) | Err(_) => return None,
                    Ok(_) => continue,
                }
            },
        }
    }

    /// Sends a request and returns the reply.
    pub async fn call(&mut self, text: &str) -> Value {
        self.send(text).await;
        self.recv().await
    }

    /// Asserts nothing was sent back for what came before: a marker request's
    /// reply must be the very next message.
    pub async fn assert_no_reply_before_marker(&mut self) {
        let reply = self.call(r#"{"jsonrpc":"2.0","method":"echo","params":["marker"],"id":"marker"}"#).await;
        assert_eq!(
            reply,
            json!({"jsonrpc":"2.0","id":"marker","result":["marker"]}),
            "something was answered before the marker"
        );
    }
}

/// A reply with error messages blanked, for comparing codes and ids only.
/// A value's JSON text with object keys sorted, whatever serde_json's map keeps.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let members: Vec<String> = keys.iter().map(|k| format!("{k:?}:{}", canonical(&map[*k]))).collect();
            format!("{{{}}}", members.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

pub fn shape(v: &Value) -> Value {
    match v {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.iter().map(shape).collect();
            // By a text with sorted keys: serde_json keeps insertion order when
            // a dependency turns its preserve_order feature on.
            items.sort_by_key(canonical);
            Value::Array(items)
        }
        Value::Object(map) => {
            let mut map = map.clone();
            if let Some(Value::Object(err)) = map.get_mut("error") {
                err.insert("message".into(), json!("..."));
            }
            Value::Object(map)
        }
        other => other.clone(),
    }
}
