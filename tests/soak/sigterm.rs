//! SIGTERM under load: clients keep requests in flight on every daemon when
//! the signal comes. Every request whose write finished before the signal
//! gets an answer, a result or a `shutting_down` refusal, before its
//! connection closes; the daemon exits 0 within its grace period and leaves
//! no socket file behind.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use integration_tests::{eventually, require_tool};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::pipeline::{Outcome, Pipeline, SignalMark, exchange};

/// The daemons' default grace period, and what the exit may take beyond it
/// (stopping children, a loaded machine).
const GRACE: Duration = Duration::from_secs(5);
const EXIT_SLACK: Duration = Duration::from_secs(3);

/// Waits until every pipeline has had `at_least` answers: the load is on.
fn wait_for_load(pipelines: &[Pipeline], at_least: u64) {
    let on = eventually(Duration::from_secs(20), || pipelines.iter().all(|p| p.answered() >= at_least));
    let counts: Vec<u64> = pipelines.iter().map(Pipeline::answered).collect();
    assert!(on, "the load did not start: answers per connection {counts:?}");
}

/// Checks the outcomes; prints what each connection saw.
fn check_outcomes(name: &str, outcomes: &[Outcome]) {
    let mut problems = Vec::new();
    for (i, outcome) in outcomes.iter().enumerate() {
        eprintln!(
            "{name} connection {i}: {} sent before the signal, {} after, {} answered ({} refused shutting_down){}",
            outcome.sent_before.len(),
            outcome.sent_after,
            outcome.answers.len(),
            outcome.refused(),
            outcome.read_error.as_ref().map(|e| format!(", ended with {e}")).unwrap_or_default()
        );
        problems.extend(outcome.problems(&format!("{name} connection {i}")));
    }
    assert!(
        problems.is_empty(),
        "requests sent before SIGTERM went unanswered: {:#?}",
        &problems[..problems.len().min(10)]
    );
}

fn tool_request(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

#[test]
fn supex_bridge_sigterm_under_load_answers_every_request_sent_before_it() {
    use crate::bridge::Bridge;
    let Some(mut bridge) = Bridge::start_with(&[("RUST_LOG", "warn")]) else {
        return;
    };
    std::fs::write(bridge.root.join("note.txt"), "soak").unwrap();
    let mark = SignalMark::default();
    let mut pipelines = Vec::new();
    for _ in 0..4 {
        let mut stream = std::net::TcpStream::connect(bridge.bridge).unwrap();
        let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "hello",
                           "params": {"name": "soak", "version": "1", "agent": "soak", "pid": 1}});
        assert_eq!(exchange(&mut stream, &hello)["result"]["success"], true);
        pipelines.push(Pipeline::start(stream, 16, mark.clone(), |id| match id % 4 {
            0 => json!({"jsonrpc": "2.0", "id": id, "method": "ping"}),
            1 => tool_request(id, "eval_ruby", json!({"code": format!("{id} * 2")})),
            2 => tool_request(id, "read_file", json!({"path": "note.txt"})),
            _ => tool_request(id, "list_dir", json!({"path": "."})),
        }));
    }
    let mut repl = std::net::TcpStream::connect(bridge.repl).unwrap();
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "hello", "params": {"name": "soak", "pid": 1}});
    assert_eq!(exchange(&mut repl, &hello)["result"]["success"], true);
    pipelines.push(Pipeline::start(
        repl,
        8,
        mark.clone(),
        |id| json!({"jsonrpc": "2.0", "id": id, "method": "eval", "params": {"code": format!("{id} + 1")}}),
    ));
    // An evaluation that runs through the signal: it gets the grace period,
    // and the evaluations queued behind it with it.
    let mut long = bridge.client();
    long.send(&tool_request(7, "eval_ruby", json!({"code": "sleep 1; :slept"})));
    wait_for_load(&pipelines, 50);
    mark.set();
    let signalled = Instant::now();
    bridge.daemon.signal(Signal::SIGTERM);
    let outcomes: Vec<Outcome> = pipelines.into_iter().map(Pipeline::finish).collect();
    let slept = long.recv();
    let status = bridge.daemon.wait_exit(GRACE + EXIT_SLACK);
    let took = signalled.elapsed();
    check_outcomes("supex-bridge", &outcomes);
    assert_eq!(slept["result"]["result"], "slept", "the running evaluation finished: {slept}");
    assert_eq!(status.code(), Some(0), "{}", bridge.daemon.stderr());
    assert!(took < GRACE + EXIT_SLACK, "exited {took:?} after the signal");
}

#[test]
fn hermes_host_sigterm_under_load_answers_every_request_sent_before_it() {
    if !require_tool("python3") {
        return;
    }
    let mut host = crate::hermes::soak_host();
    let extension = host.extension("py")["pid"].as_u64().unwrap();
    let mark = SignalMark::default();
    let mut pipelines = Vec::new();
    for _ in 0..3 {
        let stream = UnixStream::connect(&host.socket).unwrap();
        pipelines.push(Pipeline::start(stream, 16, mark.clone(), |id| {
            let (method, params) = match id % 4 {
                0 => ("message/patch", json!({"patches": [{"path": "PID.8", "value": "F"}]})),
                1 => ("extensions/list", json!({})),
                2 => ("command/execute", json!({"command": "test/edit"})),
                _ => ("message/get", json!({"format": "json"})),
            };
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        }));
    }
    wait_for_load(&pipelines, 50);
    mark.set();
    let signalled = Instant::now();
    host.daemon.signal(Signal::SIGTERM);
    let outcomes: Vec<Outcome> = pipelines.into_iter().map(Pipeline::finish).collect();
    let status = host.daemon.wait_exit(GRACE + EXIT_SLACK);
    let took = signalled.elapsed();
    check_outcomes("hermes-host", &outcomes);
    assert_eq!(status.code(), Some(0), "{}", host.daemon.stderr());
    assert!(took < GRACE + EXIT_SLACK, "exited {took:?} after the signal");
    assert!(!host.socket.exists(), "the control socket file is left behind");
    assert!(!crate::children::alive(extension as u32), "the extension outlived the host");
    let log = std::fs::read_to_string(host.dir.path().join("data/logs/py.log")).unwrap();
    assert!(log.contains("shutdown reason=closing"), "the extension was not told: {log}");
}

#[test]
fn ralph_server_sigterm_under_load_answers_every_request_sent_before_it() {
    use crate::ralph::support::Task;
    let task = Task::new("sigterm", 3);
    task.mode("bursts 100000");
    // The load injects thousands of prompts into one long iteration: room
    // for all of them, since this is about the drain, not about that limit.
    let mut daemon = task.run(&["--max-pending-prompts", "1000000", "--max-pending-prompt-bytes", "1000000000"]);
    drop(task.connect(&daemon));
    let mark = SignalMark::default();
    let mut pipelines = Vec::new();
    for n in 0..3u64 {
        let stream = UnixStream::connect(task.socket()).unwrap();
        pipelines.push(Pipeline::start(stream, 16, mark.clone(), move |id| {
            let (method, params) = match (id + n) % 4 {
                0 => ("inject_prompt", json!({"prompt": format!("hint {id}")})),
                1 => ("subscribe", json!({"events": ["state_change"]})),
                _ => ("get_status", json!({})),
            };
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        }));
    }
    wait_for_load(&pipelines, 50);
    mark.set();
    let signalled = Instant::now();
    daemon.signal(Signal::SIGTERM);
    let outcomes: Vec<Outcome> = pipelines.into_iter().map(Pipeline::finish).collect();
    let status = daemon.wait_exit(GRACE + EXIT_SLACK + Duration::from_secs(5));
    let took = signalled.elapsed();
    check_outcomes("ralph-server", &outcomes);
    assert_eq!(status.code(), Some(0), "{}", daemon.stderr());
    // The agent gets SIGTERM, then SIGKILL after 5 s; the fake agent ends at once.
    assert!(took < GRACE + EXIT_SLACK, "exited {took:?} after the signal");
    assert!(!task.socket().exists(), "the socket file is left behind");
    assert!(!task.socket_dir().join("sigterm.lock").exists(), "the lock file is left behind");
}

/// A WebSocket agent that pipelines `tools/call echo` (and a `slow` one
/// now and then) with a window, for the broker's SIGTERM test.
async fn ws_pipeline(url: String, mark: Arc<AtomicBool>, started: Arc<AtomicU64>) -> Outcome {
    let (ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    let (mut sink, mut stream) = ws.split();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(16));
    let closed = Arc::new(AtomicBool::new(false));
    let writer = {
        let (in_flight, closed) = (in_flight.clone(), closed.clone());
        tokio::spawn(async move {
            let (mut before, mut after) = (Vec::new(), 0);
            for id in 1u64.. {
                let permit = tokio::select! {
                    permit = in_flight.clone().acquire_owned() => permit.unwrap(),
                    () = tokio::time::sleep(Duration::from_secs(20)) => break,
                };
                permit.forget();
                if closed.load(Ordering::SeqCst) {
                    break;
                }
                let call = match id % 50 {
                    0 => json!({"name": "slow", "arguments": {"ms": 400}}),
                    _ => json!({"name": "echo", "arguments": {"n": id}}),
                };
                let text = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call}).to_string();
                if sink.send(Message::text(text)).await.is_err() {
                    break;
                }
                if mark.load(Ordering::SeqCst) {
                    after += 1;
                } else {
                    before.push(id);
                }
            }
            (before, after)
        })
    };
    let mut answers = HashMap::new();
    let mut read_error = None;
    while let Some(message) = stream.next().await {
        match message {
            Ok(Message::Text(text)) => {
                let value: Value = serde_json::from_str(&text).unwrap();
                if let Some(id) = value["id"].as_u64() {
                    answers.insert(id, value);
                    started.fetch_add(1, Ordering::Relaxed);
                    in_flight.add_permits(1);
                }
            }
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            Err(e) => {
                read_error = Some(e.to_string());
                break;
            }
        }
    }
    closed.store(true, Ordering::SeqCst);
    in_flight.add_permits(1000);
    let (sent_before, sent_after) = writer.await.unwrap();
    Outcome { sent_before, sent_after, answers, read_error }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn btcp_broker_sigterm_under_load_answers_every_request_sent_before_it() {
    use crate::broker::support::{Broker, scripted_browser};
    let mut broker = Broker::start(&[("RUST_LOG", "warn"), ("BTCP_RATE_LIMIT", "0")]);
    let browser = scripted_browser(broker.browser("drain").await).await;
    let mark = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let agents: Vec<_> = (0..4)
        .map(|_| {
            let url = broker.url("/ws?clientType=agent&sessionId=drain");
            tokio::spawn(ws_pipeline(url, mark.clone(), answered.clone()))
        })
        .collect();
    let loaded = tokio::time::timeout(Duration::from_secs(20), async {
        while answered.load(Ordering::Relaxed) < 400 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(loaded.is_ok(), "the load did not start");
    // An SSE agent whose call is at the browser when the signal comes: its
    // answer still arrives on its event stream.
    let (posted_tx, posted) = std::sync::mpsc::channel();
    let port = broker.port;
    let sse = tokio::task::spawn_blocking(move || {
        let mut agent = crate::broker::SseAgent::connect(port, "drain");
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "slow", "arguments": {"ms": 400}}});
        assert_eq!(agent.post(&call), 202);
        posted_tx.send(()).unwrap();
        std::iter::from_fn(|| agent.next_event()).find(|e| e["id"] == 1)
    });
    posted.recv_timeout(Duration::from_secs(10)).expect("the SSE agent posted its call");
    mark.store(true, Ordering::SeqCst);
    let signalled = Instant::now();
    broker.daemon.signal(Signal::SIGTERM);
    let mut outcomes = Vec::new();
    for agent in agents {
        outcomes.push(agent.await.expect("the agent does not panic"));
    }
    let status = tokio::task::spawn_blocking(move || {
        let status = broker.daemon.wait_exit(GRACE + EXIT_SLACK);
        (status, broker)
    })
    .await
    .unwrap();
    let (status, broker) = status;
    let took = signalled.elapsed();
    browser.abort();
    check_outcomes("btcp-broker", &outcomes);
    let sse_answer = sse.await.expect("the SSE agent does not panic");
    let text = sse_answer.as_ref().map(|a| a["result"]["content"][0]["text"].clone());
    assert_eq!(text, Some(json!("slept 400")), "the SSE agent's call in flight: {sse_answer:?}");
    assert_eq!(status.code(), Some(0), "{}", broker.daemon.stderr());
    assert!(took < GRACE + EXIT_SLACK, "exited {took:?} after the signal");
}
