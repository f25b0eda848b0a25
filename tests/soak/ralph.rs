//! ralph-server under a long loop: the fake agent printing bursts of 100
//! lines every 0.2 s, one iteration after another, while subscribers join and leave (one
//! never reads), and a controller polls the status and injects prompts; the
//! agent's processes are sampled beside the daemon.

#[allow(dead_code)]
#[path = "../ralph_server/support.rs"]
pub mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::rss::{Dice, Plan, Record, Sampler, Tally};
use support::{Client, Task, event_type};

/// Subscribers that join, read a few events, unsubscribe and leave.
fn subscribers(task: &Task, until: Instant, tally: &Tally) {
    let mut dice = Dice::new(11);
    while Instant::now() < until {
        let mut client = Client::new(std::os::unix::net::UnixStream::connect(task.socket()).unwrap());
        let events = if dice.below(2) == 0 { json!(["*"]) } else { json!(["output"]) };
        let reply = client.call("subscribe", json!({ "events": events }));
        tally.check(reply["result"]["subscribed"] == events, || format!("subscribe: {reply}"));
        for _ in 0..5 + dice.below(30) {
            let Some(event) = client.recv() else {
                tally.fail("the socket closed under a subscriber".into());
                return;
            };
            tally.check(event["method"] == "event" && !event_type(&event).is_empty(), || format!("event: {event}"));
        }
        if dice.below(2) == 0 {
            let reply = client.call("unsubscribe", json!({"events": ["*"]}));
            tally.check(reply["result"]["subscribed"] == json!([]), || format!("unsubscribe: {reply}"));
        }
    }
}

/// Polls the status and injects a prompt now and then.
fn controller(task: &Task, until: Instant, tally: &Tally) {
    let mut client = Client::new(std::os::unix::net::UnixStream::connect(task.socket()).unwrap());
    let mut n = 0u64;
    while Instant::now() < until {
        let status = client.call("get_status", json!({}));
        let result = &status["result"];
        tally.check(result["task_name"] == task.name.as_str() && result["status"].is_string(), || {
            format!("get_status: {status}")
        });
        if n.is_multiple_of(40) {
            let prompt = format!("soak hint {n}");
            let reply = client.call("inject_prompt", json!({ "prompt": prompt }));
            tally.check(reply["result"]["status"] == "prompt_injected", || format!("inject_prompt: {reply}"));
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn soak_ralph_server_loop_keeps_memory_flat() {
    let plan = Plan::from_env();
    // An iteration takes a second and more: a story per second of the run
    // leaves the loop with stories to spare at the end. 500 lines a second
    // overflow the paused subscriber's queue (1024 events) in the short run too.
    let task = Arc::new(Task::new("soak", plan.duration.as_secs() as usize + 20));
    task.mode("bursts 500");
    let mut daemon = task.run(&["--max-iterations", "100000", "--max-failures", "1"]);
    let mut status = task.connect(&daemon);
    // A subscriber that never reads (a paused attach).
    let mut paused = task.connect(&daemon);
    paused.call("subscribe", json!({"events": ["*"]}));
    let sampler = Sampler::start(daemon.pid(), plan);
    let until = Instant::now() + plan.duration;
    let tally = Arc::new(Tally::default());
    let jobs: [fn(&Task, Instant, &Tally); 3] = [subscribers, subscribers, controller];
    let workers: Vec<_> = jobs
        .into_iter()
        .map(|job| {
            let (task, tally) = (task.clone(), tally.clone());
            std::thread::spawn(move || job(&task, until, &tally))
        })
        .collect();
    let crashed = workers.into_iter().map(|w| w.join()).filter(Result::is_err).count();
    let samples = sampler.finish(crashed > 0);
    assert_eq!(crashed, 0, "a load thread panicked (see above)\n{}", daemon.stderr());

    // Still answering, still running, and it got through many iterations.
    let now = status.call("get_status", json!({}));
    assert_eq!(now["result"]["status"], "running", "{now}\n{}", daemon.stderr());
    let iterations = now["result"]["iteration"].as_u64().unwrap_or(0);
    let expected = plan.duration.as_secs() / 4;
    assert!(iterations >= expected.max(2), "only {iterations} iterations in {:?}", plan.duration);
    assert!(!task.read("progress.txt").contains("FAILURE"), "an iteration failed:\n{}", task.read("progress.txt"));
    // The paused subscriber kept its connection and hears what it missed. It
    // misses events once the loop has published more than its socket, its
    // connection's queue (1024 messages) and the ring (1024 events) hold,
    // about 3000: ten iterations of 500 lines are well past that, however
    // slowly a busy machine ran them during the load.
    let mut iteration = iterations;
    let deadline = Instant::now() + Duration::from_secs(120);
    while iteration <= 10 {
        assert!(Instant::now() < deadline, "the loop is still at iteration {iteration}\n{}", daemon.stderr());
        std::thread::sleep(Duration::from_millis(200));
        iteration = status.call("get_status", json!({}))["result"]["iteration"].as_u64().unwrap_or(0);
    }
    let dropped = paused.until(|e| event_type(e) == "dropped").expect("the paused subscriber is told it lost events");
    assert!(dropped["params"]["data"]["count"].as_u64() > Some(0), "{dropped}");
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    tally.assert_clean("ralph-server", plan.duration.as_secs() * 20);
    Record { name: "ralph-server".into(), plan, samples }.report_and_check(Some("agent"));
}
