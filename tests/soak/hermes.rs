//! hermes-host under mixed load: control clients getting, setting and
//! patching the message while the Python extension runs commands that edit
//! it, subscribers joining and leaving (one never reads), with the
//! extension's memory sampled beside the daemon's.

#[allow(dead_code)]
#[path = "../hermes_host/support.rs"]
pub mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::require_tool;
use serde_json::json;

use crate::rss::{Dice, Plan, Record, Sampler, Tally};
use support::{ADT, Control, Host, py_extension};

const PACE: Duration = Duration::from_millis(3);

/// The soak's host: one ext.py, `py`, that declares `test/edit` and hears
/// every `message/changed` with the message in it.
pub fn soak_host() -> Host {
    let config = py_extension(
        "py",
        &[("EXT_COMMANDS", "test/edit,test/ping"), ("EXT_EVENTS", "message/changed+json,message/opened")],
    );
    let host = Host::start_with_env(&config, &[], &[("RUST_LOG", "warn")]);
    host.wait_state("py", "running", Duration::from_secs(20));
    host.result("message/new", json!({"message": ADT}));
    host
}

/// One control operation of the mix; checks the answer into `tally`.
fn one_operation(control: &mut Control, dice: &mut Dice, n: u64, tally: &Tally) {
    match dice.below(6) {
        0 | 1 => {
            let got = control.call("message/get", json!({"format": "hl7"}));
            let text = got["result"]["message"].as_str().unwrap_or_default();
            tally.check(text.starts_with("MSH|") && text.contains("PID|"), || format!("message/get: {got}"));
        }
        2 => {
            let got = control.call("message/get", json!({"format": "json"}));
            tally.check(got["result"]["message"].is_string(), || format!("message/get json: {got}"));
        }
        3 | 4 => {
            let sex = if n.is_multiple_of(2) { "F" } else { "M" };
            let patched = control.call("message/patch", json!({"patches": [{"path": "PID.8", "value": sex}]}));
            tally.check(patched["result"]["success"] == true, || format!("message/patch: {patched}"));
        }
        _ => {
            let set =
                control.call("message/set", json!({"message": ADT.replace("DOE", &format!("D{n}")), "format": "hl7"}));
            tally.check(set["result"]["success"] == true, || format!("message/set: {set}"));
        }
    }
}

/// A control client on one connection for the whole run.
fn steady_editor(host: &Host, until: Instant, tally: &Tally) {
    let mut control = host.client();
    let mut dice = Dice::new(3);
    let mut n = 0;
    while Instant::now() < until {
        one_operation(&mut control, &mut dice, n, tally);
        n += 1;
        std::thread::sleep(PACE);
    }
}

/// Control clients that connect, do a few operations and leave.
fn passing_editors(host: &Host, until: Instant, tally: &Tally) {
    let mut dice = Dice::new(4);
    let mut n = 0;
    while Instant::now() < until {
        let mut control = host.client();
        for _ in 0..5 + dice.below(10) {
            one_operation(&mut control, &mut dice, n, tally);
            n += 1;
            std::thread::sleep(PACE);
        }
    }
}

/// Runs `test/edit` in the extension, over and over: each run reads the
/// message and patches it from the extension's side.
fn commander(host: &Host, until: Instant, tally: &Tally) {
    let mut control = host.client();
    while Instant::now() < until {
        let sent = control.call("command/execute", json!({"command": "test/edit"}));
        tally.check(sent.get("error").is_none(), || format!("command/execute: {sent}"));
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Subscribers that join, read some events, and leave.
fn subscribers(host: &Host, until: Instant, tally: &Tally) {
    let mut dice = Dice::new(5);
    while Instant::now() < until {
        let mut watcher = host.client();
        let topics = if dice.below(2) == 0 { json!(["message_changed"]) } else { json!(["log", "extension_state"]) };
        let reply = watcher.call("subscribe", json!({ "events": topics }));
        tally.check(reply.get("error").is_none(), || format!("subscribe: {reply}"));
        // message_changed is debounced (500 ms); log lines come by the dozen.
        let wanted = if topics[0] == "log" { 20 + dice.below(50) } else { 1 };
        for _ in 0..wanted {
            match watcher.recv_within(Duration::from_secs(5)) {
                Some(event) => {
                    tally.check(event["method"].is_string() && event.get("id").is_none(), || format!("event: {event}"))
                }
                // The load has stopped: no more edits, no more events.
                None if Instant::now() >= until => return,
                None => tally.fail(format!("no {topics} event within 5 s")),
            }
        }
    }
}

/// How many `test/edit` runs the extension logged, and those that failed.
fn edits(host: &Host) -> (usize, Vec<String>) {
    let log = std::fs::read_to_string(host.dir.path().join("data/logs/py.log")).unwrap_or_default();
    let edited: Vec<&str> = log.lines().filter_map(|l| l.split_once("EDITED ").map(|(_, rest)| rest)).collect();
    let failed = edited.iter().filter(|l| !l.ends_with(" ok")).map(|l| (*l).to_owned()).collect();
    (edited.len(), failed)
}

#[test]
fn soak_hermes_host_mixed_load_keeps_memory_flat() {
    if !require_tool("python3") {
        return;
    }
    let plan = Plan::from_env();
    let host = Arc::new(soak_host());
    // A subscriber that never reads (a paused UI): it loses events, counted,
    // and costs the host no more than its queue.
    let mut paused = host.client();
    paused.call("subscribe", json!({"events": ["*"]}));
    let sampler = Sampler::start(host.daemon.pid(), plan);
    let until = Instant::now() + plan.duration;
    let tally = Arc::new(Tally::default());
    let jobs: [fn(&Host, Instant, &Tally); 4] = [steady_editor, passing_editors, commander, subscribers];
    let workers: Vec<_> = jobs
        .into_iter()
        .map(|job| {
            let (host, tally) = (host.clone(), tally.clone());
            std::thread::spawn(move || job(&host, until, &tally))
        })
        .collect();
    let crashed = workers.into_iter().map(|w| w.join()).filter(Result::is_err).count();
    let samples = sampler.finish(crashed > 0);
    assert_eq!(crashed, 0, "a load thread panicked (see above)");

    // Still answering; the extension never restarted; its edits all worked.
    let listing = host.extension("py");
    assert_eq!((listing["state"].as_str(), listing["restarts"].as_u64()), (Some("running"), Some(0)), "{listing}");
    assert!(host.result("message/get", json!({}))["message"].as_str().is_some_and(|m| m.contains("PID|")));
    let (count, failed) = edits(&host);
    assert!(failed.is_empty(), "{} of {count} extension edits failed; the first: {:?}", failed.len(), &failed[..1]);
    assert!(count as u64 >= plan.duration.as_secs() * 10, "only {count} extension edits ran");
    // The paused subscriber kept its connection and learns what it missed.
    let mut missed = None;
    for _ in 0..2000 {
        let event = paused.recv();
        if event["method"] == "missed" {
            missed = Some(event);
            break;
        }
    }
    let missed = missed.expect("the paused subscriber is told it missed events");
    assert!(missed["params"]["count"].as_u64() > Some(0), "{missed}");
    tally.assert_clean("hermes-host", plan.duration.as_secs() * 50);
    Record { name: "hermes-host".into(), plan, samples }.report_and_check(Some("extension"));
}
