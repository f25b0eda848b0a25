//! Nothing a daemon started outlives it, even a descendant that left its
//! process group for a session of its own (`setsid`), even when the daemon
//! is SIGKILLed: the children's group leader is a child subreaper, handed
//! such descendants when their parent dies, and kills them all.

use std::time::Duration;

use integration_tests::{LineClient, eventually, pids_matching, require_tool};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use crate::fixtures::{self, Log};

/// Waits for the escaped shell to run, SIGKILLs the daemon, and checks that
/// the escaped shell goes (its sleep, in its session, with it).
fn sigkill_leaves_nothing(daemon: &mut integration_tests::Daemon, marker: &str) {
    let started = eventually(Duration::from_secs(20), || !pids_matching(marker).is_empty());
    assert!(started, "the escaping grandchild never ran:\n{}", daemon.stderr());
    let escaped = pids_matching(marker);
    let sessions: Vec<u32> = escaped.clone();
    daemon.signal(Signal::SIGKILL);
    let _ = daemon.wait_exit(Duration::from_secs(10));
    let in_sessions = || -> Vec<u32> {
        let mut left = pids_matching(marker);
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace().collect();
            let live = fields.first().is_some_and(|s| *s != "Z");
            if live && fields.get(3).and_then(|s| s.parse::<u32>().ok()).is_some_and(|s| sessions.contains(&s)) {
                left.push(pid);
            }
        }
        left
    };
    let gone = eventually(Duration::from_secs(10), || in_sessions().is_empty());
    let left = in_sessions();
    for &pid in &left {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    assert!(gone, "outlived the SIGKILLed {}: {left:?} (escaped: {escaped:?})", daemon.name);
}

#[test]
fn a_setsid_grandchild_of_an_extension_dies_with_a_sigkilled_hermes_host() {
    let marker = fixtures::marker("hermes");
    let command = format!("sh -c \"{} exec python3 {}\"", fixtures::escaping(&marker), fixtures::ext_py().display());
    let mut host = fixtures::host(&fixtures::extension("escaper", &command), &[], Log::Read);
    sigkill_leaves_nothing(&mut host.daemon, &marker);
}

#[test]
fn a_setsid_grandchild_of_the_agent_dies_with_a_sigkilled_ralph_server() {
    let marker = fixtures::marker("ralph");
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent.sh");
    std::fs::write(&agent, format!("#!/bin/sh\n{}\nsleep 300\n", fixtures::escaping(&marker))).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut ralph = fixtures::ralph_loop(&agent.display().to_string(), &[], Log::Read);
    sigkill_leaves_nothing(&mut ralph.daemon, &marker);
}

#[test]
fn a_setsid_grandchild_of_the_ruby_runtime_dies_with_a_sigkilled_supex_bridge() {
    if !require_tool("ruby") {
        return;
    }
    let marker = fixtures::marker("supex");
    let mut bridge = fixtures::bridge(&[], Log::Read);
    let mut client = LineClient::connect(bridge.addr);
    client.call(1, "hello", fixtures::hello());
    let code = format!("Process.detach(spawn({:?})); 1", format!("{} wait", fixtures::escaping(&marker)));
    let reply = client.call(2, "tools/call", json!({"name": "eval_ruby", "arguments": {"code": code}}));
    assert!(reply.get("result").is_some(), "{reply}");
    sigkill_leaves_nothing(&mut bridge.daemon, &marker);
    drop(bridge.root);
}
