//! `GET /events` is read by the broker itself, off hyper, and its stream
//! written by the peer's task: what that path must keep of hyper's, over raw
//! sockets (heads split or huge or slow, keep-alive, other methods), and what
//! an idle stream costs.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Broker, WAIT, dechunk};

/// Reads until `done` says the bytes so far are enough, the socket ends, or
/// `within` passes; returns what was read and whether the socket ended.
async fn read_until(stream: &mut TcpStream, within: Duration, done: impl Fn(&str) -> bool) -> (String, bool) {
    let deadline = tokio::time::Instant::now() + within;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if done(&String::from_utf8_lossy(&raw)) {
            return (String::from_utf8_lossy(&raw).into_owned(), false);
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&raw).into_owned(), true),
            Ok(Ok(n)) => raw.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&raw).into_owned(), false),
        }
    }
}

fn has_welcome(text: &str) -> bool {
    text.contains("\"welcome\"")
}

/// One whole response (head and, by its length, its body) is in `text`.
fn one_response(text: &str) -> bool {
    let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
    let length = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>()))
        .and_then(Result::ok);
    length.is_some_and(|n| body.len() >= n)
}

fn events_head(query: &str) -> String {
    format!("GET /events?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
}

#[tokio::test]
async fn a_head_written_a_byte_at_a_time_opens_the_stream() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    for byte in events_head("clientType=browser&sessionId=split-head").bytes() {
        stream.write_all(&[byte]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (text, _) = read_until(&mut stream, WAIT, has_welcome).await;
    let head = text.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{text}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(head.contains("cache-control: no-cache"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(head.contains("\r\ndate: "), "{head}");
    let body = dechunk(text.split_once("\r\n\r\n").unwrap().1);
    assert!(body.starts_with("event: message\ndata: {"), "{body}");
    assert_eq!(broker.get("/health").json()["browsers"], 1);
}

#[tokio::test]
async fn a_huge_head_is_refused_as_hyper_refuses_it() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    let padding = "x".repeat(1024 * 1024);
    let request = format!("GET /events?clientType=browser HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {padding}\r\n\r\n");
    // The broker may stop reading (and close) before all of it is written.
    let _ = stream.write_all(request.as_bytes()).await;
    let (text, ended) = read_until(&mut stream, WAIT, |_| false).await;
    assert!(ended, "the connection is closed");
    assert!(text.is_empty() || text.starts_with("HTTP/1.1 431"), "{text}");
    assert_eq!(broker.get("/health").json()["browsers"], 0);
}

#[tokio::test]
async fn a_head_never_finished_is_cut_off() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    stream.write_all(b"GET /events?clientType=agent HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    let started = Instant::now();
    let (text, ended) = read_until(&mut stream, Duration::from_secs(20), |_| false).await;
    assert!(ended && text.is_empty(), "closed without an answer: {text:?}");
    let took = started.elapsed();
    // rpc_core::http::HEADER_READ_TIMEOUT (10 s), as for any request.
    assert!(took >= Duration::from_secs(9) && took < Duration::from_secs(15), "{took:?}");
}

#[tokio::test]
async fn a_refused_stream_keeps_its_connection_for_the_next_requests() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    // Pipelined: the refusal, then a request hyper serves on the same connection.
    let requests = format!("{}GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", events_head("clientType=robot"));
    stream.write_all(requests.as_bytes()).await.unwrap();
    let (text, _) =
        read_until(&mut stream, WAIT, |t| t.matches("HTTP/1.1 ").count() == 2 && t.contains("uptime_s")).await;
    let (first, rest) = text.split_once("HTTP/1.1 200").expect("the second answer");
    assert!(first.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    assert!(first.contains("invalid_client_type"), "{first}");
    assert!(first.to_ascii_lowercase().contains("content-type: application/json"), "{first}");
    assert!(rest.contains("\"status\":\"ok\""), "{rest}");
    // And one more, after both.
    stream.write_all(events_head("clientType=agent").as_bytes()).await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, has_welcome).await;
    assert!(text.contains("HTTP/1.1 200 OK"), "{text}");
}

#[tokio::test]
async fn a_refusal_asked_to_close_closes() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    let request = "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let (text, ended) = read_until(&mut stream, WAIT, |_| false).await;
    assert!(ended, "closed after the answer");
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n") && text.contains("missing_client_type"), "{text}");
    assert!(one_response(&text), "{text}");
}

#[tokio::test]
async fn a_stream_after_another_request_on_the_connection_is_served_by_hyper() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, one_response).await;
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    stream.write_all(events_head("clientType=browser&sessionId=second-request").as_bytes()).await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, |t| t.matches("HTTP/1.1 ").count() == 2 && has_welcome(t)).await;
    let second = &text[text.rfind("HTTP/1.1 ").unwrap()..];
    assert!(second.starts_with("HTTP/1.1 200 OK\r\n"), "{second}");
    assert!(second.contains("text/event-stream"), "{second}");
    assert_eq!(broker.get("/health").json()["browsers"], 1);
}

#[tokio::test]
async fn head_and_post_of_events_are_hypers() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    let request = "POST /events?clientType=agent HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}";
    stream.write_all(request.as_bytes()).await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, |t| t.contains("\r\n\r\n")).await;
    assert!(text.starts_with("HTTP/1.1 405"), "{text}");
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    let request = "HEAD /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, |t| t.contains("\r\n\r\n")).await;
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "no body: {text}");
    // The connection is still served.
    stream.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, |t| t.contains("uptime_s")).await;
    assert!(text.contains("HTTP/1.1 200"), "{text}");
}

#[tokio::test]
async fn an_allowed_origin_may_read_the_stream_and_another_is_403() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    let request = "GET /events?clientType=agent HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://localhost:3000\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, has_welcome).await;
    let head = text.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(head.contains("access-control-allow-origin: http://localhost:3000"), "{head}");
    assert!(head.contains("vary: origin"), "{head}");
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    let request = "GET /events?clientType=agent HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, one_response).await;
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains("\"reason\":\"origin\""), "{text}");
}

#[tokio::test]
async fn a_client_gone_mid_stream_frees_its_session_at_once() {
    let broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    stream.write_all(events_head("clientType=browser&sessionId=gone-mid-stream").as_bytes()).await.unwrap();
    let (text, _) = read_until(&mut stream, WAIT, has_welcome).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let health = || broker.get("/health").json();
    assert_eq!(health()["browsers"], 1);
    drop(stream);
    // Noticed from the socket's end, not at the next keep-alive write (15 s).
    let gone = integration_tests::eventually(Duration::from_secs(3), || health()["browsers"] == 0);
    assert!(gone, "{}", health());
}

#[tokio::test]
async fn a_stream_ends_with_its_last_chunk_when_the_broker_stops() {
    let mut broker = Broker::start(&[]);
    let mut stream = TcpStream::connect(("127.0.0.1", broker.port)).await.unwrap();
    stream.write_all(events_head("clientType=agent").as_bytes()).await.unwrap();
    let (_, _) = read_until(&mut stream, WAIT, has_welcome).await;
    broker.daemon.terminate();
    let (text, ended) = read_until(&mut stream, WAIT, |_| false).await;
    assert!(ended, "closed: {text:?}");
    assert!(text.ends_with("0\r\n\r\n"), "the body's last chunk: {text:?}");
}

/// RSS per idle SSE agent (B8s measures 1000 on a quiet machine): a
/// generous bound, which hyper's connection state alone (16 KiB of buffers
/// a connection) would break.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_event_stream_costs_a_few_kib() {
    const AGENTS: usize = 500;
    let broker = Broker::start(&[]);
    let pid = broker.daemon.pid();
    // Warm-up: the first connections grow pools that then stay.
    let mut streams = Vec::new();
    for _ in 0..50 {
        streams.push(open_agent(broker.port).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = integration_tests::rss_bytes(pid);
    for _ in 0..AGENTS {
        streams.push(open_agent(broker.port).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = integration_tests::rss_bytes(pid);
    let per_kib = after.saturating_sub(before) as f64 / 1024.0 / AGENTS as f64;
    assert!(per_kib < 14.0, "{per_kib:.1} KiB an idle SSE agent");
}

async fn open_agent(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(events_head("clientType=agent").as_bytes()).await.unwrap();
    let (text, ended) = read_until(&mut stream, WAIT, has_welcome).await;
    assert!(!ended && has_welcome(&text), "{text}");
    stream
}
