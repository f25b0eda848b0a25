//! Clients that vanish in the middle of a request: they send requests and
//! close without reading the answers (or drop an event stream while a call
//! they made is pending). The daemon stays up, what they left pending is
//! cancelled or finished and then forgotten (counted where the daemon counts
//! it, else seen in its memory), and the other clients notice nothing.

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use integration_tests::{eventually, require_tool, rss_bytes, rss_growth_mib, settled_rss};
use serde_json::{Value, json};

/// How long a live client may wait while vanished ones' work winds down. Not a
/// latency target (that is rpc-bench's): long enough for a loaded 2-core CI
/// machine, and far shorter than waiting behind the vanished clients' work, or
/// for a timeout, would take.
const LIVE: Duration = Duration::from_secs(5);

const MIB: usize = 1024 * 1024;

/// Writes `requests` as NDJSON on `stream` and drops it without reading.
fn send_and_vanish(mut stream: impl Write, requests: &[Value]) {
    let mut bytes = Vec::new();
    for request in requests {
        bytes.extend(serde_json::to_vec(request).unwrap());
        bytes.push(b'\n');
    }
    stream.write_all(&bytes).unwrap();
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn tool_request(id: u64, name: &str, arguments: Value) -> Value {
    request(id, "tools/call", json!({"name": name, "arguments": arguments}))
}

#[test]
fn supex_bridge_clients_vanishing_mid_request_leave_no_work_behind() {
    use crate::bridge::support::{Bridge, eval, ok};
    let Some(bridge) = Bridge::start_with(&[("RUST_LOG", "warn")]) else {
        return;
    };
    std::fs::write(bridge.root.join("big.txt"), "b".repeat(MIB)).unwrap();
    let mut live = bridge.client();
    eval(&mut live, "$runs = 0");
    // Three waves of 40: what a wave left behind, if it were held, would
    // show as growth in the next (40 unread 1 MiB answers a wave).
    let mut held = Vec::new();
    for wave in 0..3 {
        vanishing_wave(&bridge, &mut live);
        held.push(settled_rss(bridge.daemon.pid(), Duration::from_millis(1500)));
        eprintln!("supex-bridge after wave {wave}: {} MiB", held[wave] / MIB as u64);
    }
    // Two held waves are +80 MiB by the last; half that is allowed. The
    // lowest reading over 1.5 s after each wave, not the highest: a wave's
    // last answers stay in the kernel's buffers and the allocator's for a
    // while, and with nothing held a wave's peak read up to 35 MiB over the
    // wave before it, its lowest over half a second up to 21, and its lowest
    // over 1.5 s up to 15 by the third wave (release builds).
    assert!(
        held[2] < held[0] + 40 * MIB as u64,
        "grew from {} to {} MiB over two waves",
        held[0] / MIB as u64,
        held[2] / MIB as u64
    );
    // Whatever they left is over soon: a live evaluation is not stuck behind
    // work for clients that are gone.
    let mut settled = 0;
    let done = eventually(Duration::from_secs(10), || {
        let runs: u64 = eval(&mut live, "$runs").parse().unwrap();
        let same = runs == settled;
        settled = runs;
        same && runs > 0
    });
    assert!(done, "evaluations for vanished clients kept running: $runs = {settled}");
    let asked = Instant::now();
    assert_eq!(eval(&mut live, "6 * 7"), "42");
    assert!(asked.elapsed() < LIVE, "a live evaluation waited {:?}", asked.elapsed());
    eprintln!("{settled} of 240 evaluations from vanished clients ran");
    assert_eq!(ok(&mut live, "runtime_info", json!({}))["restarts"], 0);
}

/// 40 clients that say hello, ask for an evaluation, a 1 MiB file, another
/// evaluation and a ping, and close without reading; a live client's ping
/// is answered meanwhile.
fn vanishing_wave(bridge: &crate::bridge::Bridge, live: &mut integration_tests::LineClient) {
    use crate::bridge::support::hello_params;
    for round in 0..40 {
        let stream = TcpStream::connect(bridge.bridge).unwrap();
        send_and_vanish(
            stream,
            &[
                request(0, "hello", hello_params()),
                // Running when the client goes: it finishes (README, "Order").
                tool_request(1, "eval_ruby", json!({"code": "sleep 0.02; $runs += 1"})),
                tool_request(2, "read_file", json!({"path": "big.txt"})),
                tool_request(3, "eval_ruby", json!({"code": "$runs += 1"})),
                request(4, "ping", json!({})),
            ],
        );
        if round % 10 == 9 {
            let asked = Instant::now();
            assert_eq!(live.call(9, "ping", json!({}))["result"]["status"], "ok");
            assert!(asked.elapsed() < LIVE, "a live client waited {:?}", asked.elapsed());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn btcp_broker_agents_vanishing_mid_call_have_their_forwarded_calls_cancelled() {
    use crate::broker::SseAgent;
    use crate::broker::support::{Broker, http};
    let broker = Broker::start(&[("BTCP_RATE_LIMIT", "0")]);
    let mut browser = broker.browser("vanish").await;
    browser.register(&["silent", "echo"]).await;
    let mut steady = broker.agent("vanish").await;
    const AGENTS: u64 = 10;
    const CALLS: u64 = 5;
    for _ in 0..AGENTS {
        let mut agent = broker.agent("vanish").await;
        for id in 1..=CALLS {
            agent.send(&tool_request(id, "silent", json!({}))).await;
        }
        let mut forwarded = Vec::new();
        for _ in 0..CALLS {
            forwarded.push(browser.request().await["id"].clone());
        }
        // Gone without a close frame, its calls pending at the browser.
        drop(agent);
        for _ in 0..CALLS {
            let cancelled = browser.notification("notifications/cancelled").await;
            let id = &cancelled["params"]["requestId"];
            assert!(forwarded.contains(id), "cancelled {id}, forwarded {forwarded:?}");
        }
    }
    // An SSE agent drops its event stream while its call is pending.
    let port = broker.port;
    let sse = tokio::task::spawn_blocking(move || {
        let agent = SseAgent::connect(port, "vanish");
        assert_eq!(agent.post(&tool_request(1, "silent", json!({}))), 202);
        agent
    })
    .await
    .unwrap();
    let forwarded = browser.request().await;
    drop(sse);
    let cancelled = browser.notification("notifications/cancelled").await;
    assert_eq!(cancelled["params"]["requestId"], forwarded["id"], "the SSE agent's call is cancelled");

    // Counted, and nobody left: the agents are gone, the steady one is served.
    let metrics = broker.get("/metrics").body;
    let expected = format!(r#"btcp_tool_calls_total{{outcome="cancelled"}} {}"#, AGENTS * CALLS + 1);
    assert!(metrics.contains(&expected), "expected {expected}:\n{metrics}");
    let agents = tokio::task::spawn_blocking(move || {
        eventually(Duration::from_secs(5), || http(port, "GET", "/health", &[], b"").json()["agents"] == 1)
    })
    .await
    .unwrap();
    assert!(agents, "agents left behind: {}", broker.get("/health").body);
    steady.send(&tool_request(7, "echo", json!({"still": "here"}))).await;
    let call = browser.request().await;
    browser
        .send(&json!({"jsonrpc": "2.0", "id": call["id"],
            "result": {"content": [{"type": "text", "text": "here"}], "isError": false}}))
        .await;
    assert_eq!(steady.response(&json!(7)).await["result"]["content"][0]["text"], "here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn btcp_broker_an_sse_browser_dropping_its_stream_fails_the_pending_call_at_once() {
    use crate::broker::support::{Broker, tool};
    let broker = Broker::start(&[]);
    let port = broker.port;
    // An SSE browser: registers `echo`, sees the forwarded call, then drops
    // its event stream without answering.
    let browser = tokio::task::spawn_blocking(move || {
        let mut browser = crate::broker::SseAgent::connect_as(port, "browser", "sse-browser-gone");
        let reply = browser.call(1, "tools/register", json!({"tools": [tool("echo")]}));
        assert_eq!(reply["result"]["registered"], 1, "{reply}");
        browser
    })
    .await
    .unwrap();
    let mut agent = broker.agent("sse-browser-gone").await;
    agent.send(&tool_request(1, "echo", json!({}))).await;
    let (browser, forwarded) = tokio::task::spawn_blocking(move || {
        let mut browser = browser;
        let forwarded = loop {
            let event = browser.next_event().expect("the forwarded call");
            if event["method"] == "tools/call" {
                break event;
            }
        };
        (browser, forwarded)
    })
    .await
    .unwrap();
    assert_eq!(forwarded["params"]["name"], "echo");
    let dropped = Instant::now();
    drop(browser);
    let answer = agent.response(&json!(1)).await;
    assert!(dropped.elapsed() < LIVE, "the agent waited {:?}", dropped.elapsed());
    assert_eq!(answer["error"]["code"], -32002, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap_or_default().contains("disconnected"), "{answer}");
    assert_eq!(agent.call(2, "ping", json!({})).await["result"]["pong"], true);
}

#[test]
fn hermes_host_control_clients_vanishing_mid_request_leave_nothing_behind() {
    use crate::hermes::support::{ADT, Host, py_extension};
    if !require_tool("python3") {
        return;
    }
    let host =
        Host::start_with_env(&py_extension("py", &[("EXT_CALL_FILE", "call.json")]), &[], &[("RUST_LOG", "warn")]);
    host.wait_state("py", "running", Duration::from_secs(20));
    // A message of 256 KiB: every unread answer is big.
    let big = format!("{ADT}\rNTE|1||{}", "n".repeat(MIB / 4));
    host.result("message/new", json!({ "message": big }));
    let mut live = host.client();
    let before = rss_bytes(host.daemon.pid());
    for _ in 0..40 {
        let stream = UnixStream::connect(&host.socket).unwrap();
        let mut requests: Vec<Value> = (1..=5).map(|id| request(id, "message/get", json!({"format": "hl7"}))).collect();
        requests.push(request(11, "subscribe", json!({"events": ["*"]})));
        requests.push(request(12, "command/execute", json!({"command": "test/ping"})));
        send_and_vanish(stream, &requests);
        let asked = Instant::now();
        assert!(live.call("extensions/list", json!({}))["result"]["extensions"].is_array());
        assert!(asked.elapsed() < LIVE, "a live client waited {:?}", asked.elapsed());
    }
    // 200 unread answers of 256 KiB (50 MiB), none of them held.
    let grown = rss_growth_mib(host.daemon.pid(), before, Duration::from_secs(1), "hermes-host: 40 vanished clients");
    assert!(grown < 24, "grew by {grown} MiB");
    assert_eq!(host.extension("py")["state"], "running");

    // The UI vanishes while an extension's dialog is pending there: the
    // extension hears -32012 at once, and a new UI can attach.
    let mut ui = host.client();
    assert_eq!(ui.call("ui/attach", json!({}))["result"]["attached"], true);
    let confirm = json!({"method": "ui/showConfirm", "params": {"message": "Sure?"}});
    std::fs::write(host.call_file(), confirm.to_string()).unwrap();
    host.result("command/execute", json!({"command": "test/call"}));
    assert_eq!(ui.recv()["method"], "ui/showConfirm");
    let gone = Instant::now();
    drop(ui);
    let answer: Value = serde_json::from_str(&host.wait_log("py", "RESULT ", 0, Duration::from_secs(10))).unwrap();
    assert!(gone.elapsed() < LIVE, "the extension waited {:?}", gone.elapsed());
    assert_eq!(answer["error"]["code"], -32012, "{answer}");
    let mut next = host.client();
    assert_eq!(next.call("ui/attach", json!({}))["result"]["attached"], true, "the vanished UI is still attached");
}

#[test]
fn ralph_server_clients_vanishing_mid_request_leave_the_loop_and_others_alone() {
    use crate::ralph::support::{Task, output_line};
    let task = Task::new("vanish", 1);
    task.mode("ticks 100000");
    let mut daemon = task.run(&[]);
    let mut watcher = task.connect(&daemon);
    watcher.call("subscribe", json!({"events": ["output"]}));
    watcher.until(|e| output_line(e).is_some_and(|l| l.starts_with("tick"))).expect("the agent prints");
    let before = rss_bytes(daemon.pid());
    for _ in 0..40 {
        let stream = UnixStream::connect(task.socket()).unwrap();
        let mut requests = vec![request(1, "subscribe", json!({"events": ["*"]}))];
        requests.extend((2..=20).map(|id| request(id, "get_status", json!({}))));
        send_and_vanish(stream, &requests);
    }
    // The watcher still gets live lines: each tick carries when it was printed.
    watcher.events.clear();
    let fresh = watcher.until(|e| output_line(e).is_some_and(|l| l.starts_with("tick"))).unwrap();
    let printed: u128 =
        output_line(&fresh).unwrap().trim_start_matches("tick ").trim().parse().expect("tick <ns since epoch>");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    assert!(now.saturating_sub(printed) < 2_000_000_000, "the watcher's lines lag behind");
    let grown = rss_growth_mib(daemon.pid(), before, Duration::from_secs(1), "ralph-server: 40 vanished clients");
    assert!(grown < 16, "grew by {grown} MiB");
    let status = watcher.call("get_status", json!({}));
    assert_eq!(status["result"]["status"], "running", "{status}");
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
}
