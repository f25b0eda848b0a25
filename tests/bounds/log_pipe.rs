//! A log reader that goes away (`daemon 2>&1 | grep x`, then grep dies) or
//! stops reading (a paused pager): every daemon keeps serving, counts what it
//! could not log where its status shows, and still drains and exits 0 on
//! SIGTERM. Before, tracing-subscriber reported a failed write with
//! `eprintln!`, which panicked on the same broken pipe and took the logging
//! task with it (the broker's signal task: SIGTERM was then ignored).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use integration_tests::{LineClient, LogReader, require_tool};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::fixtures::{self, Log, UnixClient};

const READERS: [LogReader; 2] = [LogReader::Gone, LogReader::Stalled];

/// Enough requests, each logged at debug, to fill a stalled reader's pipe
/// (a page: see `Daemon::start_with_log`) many times over: before, the first
/// task to log after that blocked, and with it whatever it was serving.
const BUSY: u64 = 200;

fn get(addr: std::net::SocketAddr, path: &str) -> (String, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.lines().next().unwrap_or_default().to_owned(), serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn the_broker_serves_and_stops_cleanly_with_its_log_reader_gone_or_stalled() {
    for reader in READERS {
        let mut broker = fixtures::broker(&[], Log::Failing(reader));
        for _ in 0..BUSY {
            let (status, health) = get(broker.addr, "/health");
            assert!(status.contains("200"), "{reader:?}: {status}");
            assert_eq!(health["status"], "ok");
        }
        let (_, health) = get(broker.addr, "/health");
        if reader == LogReader::Gone {
            assert!(health["log_lines_dropped"].as_u64().unwrap() > 0, "nothing counted: {health}");
        }
        let (_, metrics) = {
            let mut stream = TcpStream::connect(broker.addr).unwrap();
            write!(stream, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            ((), text)
        };
        assert!(metrics.contains("btcp_log_lines_dropped_total"), "{metrics}");
        let status = broker.daemon.terminate();
        assert!(status.success(), "{reader:?}: exit {status}");
    }
}

#[test]
fn supex_bridge_serves_and_stops_cleanly_with_its_log_reader_gone_or_stalled() {
    for reader in READERS {
        let mut bridge = fixtures::bridge(&[], Log::Failing(reader));
        for id in 0..BUSY {
            let mut client = LineClient::connect(bridge.addr);
            let pong = client.call(id, "ping", json!({}));
            assert!(pong.get("result").is_some(), "{reader:?}: {pong}");
        }
        let mut client = LineClient::connect(bridge.addr);
        let hello = client.call(1, "hello", fixtures::hello());
        assert!(hello.get("result").is_some(), "{hello}");
        let pong = client.call(2, "tools/call", json!({"name": "ping", "arguments": {}}));
        let dropped = pong["result"]["log_lines_dropped"].as_u64();
        assert!(dropped.is_some(), "{pong}");
        if reader == LogReader::Gone {
            assert!(dropped > Some(0), "nothing counted: {pong}");
        }
        let status = bridge.daemon.terminate();
        assert!(status.success(), "{reader:?}: exit {status}");
    }
}

#[test]
fn hermes_host_serves_and_stops_cleanly_with_its_log_reader_gone_or_stalled() {
    for reader in READERS {
        let mut host = fixtures::host("", &[], Log::Failing(reader));
        for id in 0..BUSY {
            let mut client = UnixClient::connect(&host.socket);
            let list = client.call(id, "extensions/list", json!({}));
            assert!(list.get("result").is_some(), "{reader:?}: {list}");
        }
        let status = UnixClient::connect(&host.socket).call(0, "host/status", json!({}));
        let dropped = status["result"]["log_lines_dropped"].as_u64();
        assert!(dropped.is_some(), "{status}");
        if reader == LogReader::Gone {
            assert!(dropped > Some(0), "nothing counted: {status}");
        }
        let status = host.daemon.terminate();
        assert!(status.success(), "{reader:?}: exit {status}");
    }
}

#[test]
fn ralph_server_serves_checkpoints_and_stops_cleanly_with_its_log_reader_gone_or_stalled() {
    for reader in READERS {
        let mut ralph = fixtures::ralph_loop(&fixtures::fake_agent(), &[], Log::Failing(reader));
        for id in 0..BUSY {
            let mut client = UnixClient::connect(&ralph.socket);
            let status = client.call(id, "get_status", json!({}));
            assert!(status.get("result").is_some(), "{reader:?}: {status}");
            if reader == LogReader::Gone && id == BUSY - 1 {
                let health = client.call(id + 1, "get_server_status", json!({}));
                assert!(health["result"]["log_lines_dropped"].as_u64() > Some(0), "nothing counted: {health}");
            }
        }
        ralph.daemon.signal(Signal::SIGTERM);
        let status = ralph.daemon.wait_exit(Duration::from_secs(20));
        assert!(status.success(), "{reader:?}: exit {status}");
        let state = std::fs::read_to_string(ralph.task.join(".ralph/state.json")).unwrap();
        let state: Value = serde_json::from_str(&state).unwrap();
        assert_eq!(state["status"], "checkpointed", "{reader:?}: {state}");
    }
}

/// The bridge evaluates Ruby; its runtime's output goes to the log too.
#[test]
fn supex_bridge_evaluates_with_its_log_reader_gone() {
    if !require_tool("ruby") {
        return;
    }
    let mut bridge = fixtures::bridge(&[], Log::Failing(LogReader::Gone));
    let mut client = LineClient::connect(bridge.addr);
    client.call(1, "hello", fixtures::hello());
    let code = r#"$stderr.puts("x" * 1000); 6 * 7"#;
    let reply = client.call(2, "tools/call", json!({"name": "eval_ruby", "arguments": {"code": code}}));
    assert!(reply.to_string().contains("42"), "{reply}");
    assert!(bridge.daemon.terminate().success());
}
