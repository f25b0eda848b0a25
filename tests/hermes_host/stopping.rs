//! An extension being stopped (a reload, SIGTERM) with its own requests to
//! the host still in flight: each is answered before the host says goodbye
//! (`shutdown`), as the engine answers its clients at shutdown.

use std::time::Duration;

use integration_tests::require_tool;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::LONG;
use crate::support::{Control, Host, py_extension};

/// A host with ext.py `py`, a UI attached that never answers, and `py`
/// waiting for its `ui/showConfirm` (forwarded to that UI).
fn dialog_in_flight() -> Option<(Host, Control)> {
    dialogs_in_flight(1)
}

/// The same with `copies` dialogs asked at once; the first 32 (the
/// extension's handlers at once) forwarded to the UI, the rest queued.
fn dialogs_in_flight(copies: usize) -> Option<(Host, Control)> {
    if !require_tool("python3") {
        return None;
    }
    let copies_env = copies.to_string();
    let host = Host::start(&py_extension("py", &[("EXT_CALL_FILE", "call.json"), ("EXT_CALL_COPIES", &copies_env)]));
    host.wait_state("py", "running", LONG);
    let mut ui = host.client();
    assert_eq!(ui.call("ui/attach", json!({}))["result"]["attached"], true);
    let call = json!({"method": "ui/showConfirm", "params": {"message": "Delete?"}});
    std::fs::write(host.call_file(), call.to_string()).unwrap();
    host.result("command/execute", json!({"command": "test/call"}));
    for _ in 0..copies.min(32) {
        assert_eq!(ui.recv()["method"], "ui/showConfirm", "the dialog is in flight");
    }
    Some((host, ui))
}

/// What ext.py received, in order (its `GOT` log lines).
fn received(host: &Host) -> Vec<Value> {
    let log = std::fs::read_to_string(host.dir.path().join("data/logs/py.log")).unwrap_or_default();
    log.lines()
        .filter_map(|line| line.split_once("GOT ").map(|(_, json)| json))
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect()
}

/// The answer to ext.py's dialog request and the `shutdown` it got, as
/// positions in what it received; panics naming what is missing.
fn answer_then_goodbye(host: &Host) -> (Value, usize, usize) {
    let got = received(host);
    let answer = got.iter().position(|m| m.get("method").is_none() && m["id"] == 1001);
    let goodbye = got.iter().position(|m| m["method"] == "shutdown");
    let (Some(answer), Some(goodbye)) = (answer, goodbye) else {
        panic!("answer {answer:?}, goodbye {goodbye:?} in {got:#?}\n{}", host.daemon.stderr());
    };
    (got[answer].clone(), answer, goodbye)
}

#[test]
fn a_reload_answers_the_extensions_requests_in_flight_before_its_shutdown() {
    let Some((host, _ui)) = dialog_in_flight() else { return };
    host.result("extensions/reload", json!({"name": "py"}));
    host.wait_state("py", "running", LONG);
    let (answer, at, goodbye) = answer_then_goodbye(&host);
    assert!(at < goodbye, "answered after the goodbye: {answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "shutting_down", "{answer}");
}

#[test]
fn sigterm_answers_the_extensions_requests_in_flight_before_its_shutdown() {
    let Some((mut host, _ui)) = dialog_in_flight() else { return };
    host.daemon.signal(Signal::SIGTERM);
    let status = host.daemon.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status}:\n{}", host.daemon.stderr());
    let (answer, at, goodbye) = answer_then_goodbye(&host);
    assert!(at < goodbye, "answered after the goodbye: {answer}");
    assert!(answer.get("error").is_some(), "{answer}");
}

/// More dialogs in flight than run at once (32 an extension): the ones
/// queued behind the running are answered `shutting_down` as soon as the
/// extension is being stopped, not when a running one makes room (after the
/// 5 s grace), and every one is answered before `shutdown`.
#[test]
fn requests_queued_behind_the_running_ones_are_answered_at_once_when_it_stops() {
    let Some((host, _ui)) = dialogs_in_flight(34) else { return };
    let answers = |host: &Host| -> Vec<Value> {
        received(host).into_iter().filter(|m| m.get("method").is_none() && m["id"].as_u64() >= Some(1000)).collect()
    };
    assert_eq!(answers(&host), Vec::<Value>::new(), "nothing answered yet");
    let reload = std::thread::spawn({
        let mut control = host.client();
        move || control.call("extensions/reload", json!({"name": "py"}))
    });
    // The two queued ones, well within the running ones' grace.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while answers(&host).len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let early = answers(&host);
    assert_eq!(early.len(), 2, "answered within 2 s of the reload: {early:#?}\n{}", host.daemon.stderr());
    for answer in &early {
        assert_eq!(answer["error"]["data"]["reason"], "shutting_down", "{answer}");
    }
    reload.join().unwrap();
    host.wait_state("py", "running", LONG);
    let got = received(&host);
    let goodbye = got.iter().position(|m| m["method"] == "shutdown").expect("shutdown");
    let answered = got[..goodbye].iter().filter(|m| m.get("method").is_none() && m["id"].as_u64() >= Some(1000));
    assert_eq!(answered.count(), 34, "every request answered before shutdown: {got:#?}");
}
