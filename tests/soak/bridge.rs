//! supex-bridge under mixed load: hello, ping, eval_ruby, file tools and REPL
//! evaluations over connections that come and go, with the Ruby runtime's
//! memory sampled beside the daemon's.

#[allow(dead_code)]
#[path = "../supex_bridge/support.rs"]
pub mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::LineClient;
use serde_json::{Value, json};

use crate::rss::{Dice, Plan, Record, Sampler, Tally};
pub use support::Bridge;

/// A pause between one client's operations: a busy agent, not a benchmark
/// (the machine is shared; the point is hours of traffic, not peak rate).
const PACE: Duration = Duration::from_millis(2);

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn tool_request(id: u64, name: &str, arguments: Value) -> Value {
    request(id, "tools/call", json!({"name": name, "arguments": arguments}))
}

/// One operation of the mix on a connection that has said hello; checks
/// the answer into `tally`.
fn one_operation(client: &mut LineClient, dice: &mut Dice, worker: u64, n: u64, tally: &Tally) {
    let id = n + 1;
    match dice.below(10) {
        0 => {
            let reply = client.call(id, "ping", json!({}));
            tally.check(reply["result"]["status"] == "ok", || format!("ping: {reply}"));
        }
        1 => {
            let reply = client.call(id, "tools/call", json!({"name": "ping", "arguments": {}}));
            tally.check(reply["result"]["status"] == "connected", || format!("tools ping: {reply}"));
        }
        2..=5 => {
            let (a, b) = (dice.below(1000), dice.below(1000));
            let code = if n.is_multiple_of(7) { format!("puts 'soak {a}'; {a} + {b}") } else { format!("{a} + {b}") };
            let reply = tool(client, id, "eval_ruby", json!({ "code": code }));
            let expected = (a + b).to_string();
            tally.check(reply["result"]["result"] == expected.as_str(), || format!("eval {code}: {reply}"));
        }
        6 | 7 => {
            let path = format!("soak/w{worker}-{}.txt", n % 8);
            let content = format!("worker {worker} wrote {n}\n").repeat(1 + dice.below(64) as usize);
            let reply = tool(client, id, "write_file", json!({"path": path, "content": content, "create_dirs": true}));
            tally.check(reply["result"]["success"] == true, || format!("write_file {path}: {reply}"));
            let reply = tool(client, id + 1, "read_file", json!({ "path": path }));
            // Another connection of the same worker number never exists, so
            // the file holds what this one wrote.
            tally.check(reply["result"]["content"] == content.as_str(), || format!("read_file {path}: {reply}"));
        }
        _ => {
            let reply = tool(client, id, "list_dir", json!({"path": "soak"}));
            tally.check(reply["result"]["entries"].is_array(), || format!("list_dir: {reply}"));
        }
    }
}

/// A `tools/call` and its whole answer.
fn tool(client: &mut LineClient, id: u64, name: &str, arguments: Value) -> Value {
    client.call(id, "tools/call", json!({"name": name, "arguments": arguments}))
}

/// A client that holds one connection for the whole run.
fn steady_client(bridge: &Bridge, worker: u64, until: Instant, tally: &Tally) {
    let mut client = bridge.client();
    let mut dice = Dice::new(worker);
    let mut n = 0;
    while Instant::now() < until {
        one_operation(&mut client, &mut dice, worker, n, tally);
        n += 2;
        std::thread::sleep(PACE);
    }
}

/// A client that connects, says hello, does a few operations and leaves;
/// every fourth time it leaves with a request unanswered (an agent killed
/// while it waited).
fn coming_and_going(bridge: &Bridge, worker: u64, until: Instant, tally: &Tally) {
    let mut dice = Dice::new(worker);
    let mut visit = 0;
    while Instant::now() < until {
        let mut client = bridge.client();
        let operations = 5 + dice.below(20);
        for k in 0..operations {
            one_operation(&mut client, &mut dice, worker, k * 2, tally);
            std::thread::sleep(PACE);
        }
        if visit % 4 == 3 {
            client.send(&tool_request(99, "eval_ruby", json!({"code": "sleep 0.05; :left"})));
        }
        visit += 1;
    }
}

/// A REPL user: hello, a few evaluations and completions, goodbye.
fn repl_user(bridge: &Bridge, until: Instant, tally: &Tally) {
    let mut dice = Dice::new(77);
    while Instant::now() < until {
        let mut repl = bridge.repl_client();
        for k in 0..10 {
            let a = dice.below(100);
            let reply = repl.call(k, "eval", json!({"code": format!("x = {a}; x * 3")}));
            let expected = format!("=> {}\n", a * 3);
            tally.check(reply["result"]["output"] == expected.as_str(), || format!("repl eval: {reply}"));
            let reply = repl.call(k + 100, "complete", json!({"code": "def f"}));
            tally.check(reply["result"]["complete"] == false, || format!("repl complete: {reply}"));
            std::thread::sleep(PACE * 5);
        }
    }
}

#[test]
fn soak_supex_bridge_mixed_load_keeps_memory_flat() {
    let Some(bridge) = Bridge::start_with(&[("RUST_LOG", "warn")]) else {
        return;
    };
    let plan = Plan::from_env();
    let bridge = Arc::new(bridge);
    // The runtime starts with the first evaluation; sample from then on.
    let mut first = bridge.client();
    support::eval(&mut first, "1");
    let sampler = Sampler::start(bridge.daemon.pid(), plan);
    let until = Instant::now() + plan.duration;
    let tally = Arc::new(Tally::default());
    let mut workers = Vec::new();
    for worker in 0..5u64 {
        let (bridge, tally) = (bridge.clone(), tally.clone());
        workers.push(std::thread::spawn(move || match worker {
            0 | 1 => steady_client(&bridge, worker, until, &tally),
            2 | 3 => coming_and_going(&bridge, worker, until, &tally),
            _ => repl_user(&bridge, until, &tally),
        }));
    }
    let crashed = workers.into_iter().map(|w| w.join()).filter(Result::is_err).count();
    let samples = sampler.finish(crashed > 0);
    assert_eq!(crashed, 0, "a load thread panicked (see above)");
    // Still answering, evaluations included.
    let mut last = bridge.client();
    assert_eq!(support::eval(&mut last, "6 * 7"), "42", "the bridge answers after the soak");
    let info = support::ok(&mut last, "runtime_info", json!({}));
    assert_eq!(info["restarts"], 0, "the runtime never restarted: {info}");
    tally.assert_clean("supex-bridge", plan.duration.as_secs() * 50);
    Record { name: "supex-bridge".into(), plan, samples }.report_and_check(Some("ruby runtime"));
}
