//! What neither a hostile extension nor a hostile local client can do to the
//! host: make it read without end (`message/open` of a device or a FIFO),
//! hold events without bound (an extension that never reads), lock a person
//! out of the page (idle sockets), write to the user's terminal (escape
//! sequences through `ctl`) or in the host's name in its log, or stay
//! "running" without a connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use integration_tests::{eventually, on_free_ports, require_tool, rss_bytes};
use serde_json::{Value, json};

use crate::support::{ADT, Host, py_extension};
use crate::{LONG, attached_ctl_ui, pid_alive};

const MIB: u64 = 1024 * 1024;

/// A device that never ends and a FIFO nobody writes are refused -32006 at
/// once (the FIFO without waiting for a writer), the daemon grows by nothing
/// much, and the message held stays.
#[test]
fn message_open_refuses_devices_and_fifos_at_once() {
    let host = Host::start("");
    host.result("message/set", json!({"message": ADT}));
    let fifo = host.dir.path().join("fifo.hl7");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let before = rss_bytes(host.daemon.pid());
    for path in [std::path::Path::new("/dev/zero"), std::path::Path::new("/dev/urandom"), &fifo] {
        let started = Instant::now();
        let refused = host.call("message/open", json!({"path": path}));
        assert_eq!(refused["error"]["code"], -32006, "{}: {refused}", path.display());
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("not a regular file"), "{message}");
        assert!(started.elapsed() < Duration::from_secs(5), "{}: {:?}", path.display(), started.elapsed());
    }
    let grown = rss_bytes(host.daemon.pid()).saturating_sub(before);
    assert!(grown < 32 * MIB, "grew by {} MiB", grown / MIB);
    assert_eq!(host.result("message/get", json!({}))["message"], ADT);
}

/// An extension that asked for `message/changed` with content and then
/// never reads: a burst of changes of a 4 MiB message costs the host a
/// bounded amount (its connection's write budget and the latest event), not
/// a copy per change.
#[test]
fn an_extension_that_never_reads_its_events_costs_bounded_memory() {
    if !require_tool("python3") {
        return;
    }
    let config = py_extension("slow", &[("EXT_COMMANDS", "test/stop-reading"), ("EXT_EVENTS", "message/changed+hl7")]);
    let host = Host::start_with(&config, &["--max-message", "8388608"]);
    host.wait_state("slow", "running", LONG);
    let mut big = String::from("MSH|^~\\&|BIG\rNTE|1||x");
    let mut n = 0;
    while big.len() < 4 * MIB as usize {
        n += 1;
        big.push_str(&format!("\rOBX|{n}|TX|NOTE||{}", "x".repeat(1000)));
    }
    host.result("message/set", json!({"message": big}));
    // The first change reaches it while it still reads.
    let heard = || host.logs("slow").iter().any(|l| l.starts_with("GOT ") && l.contains("message/changed"));
    assert!(eventually(LONG, heard), "{:?}", host.logs("slow"));
    host.result("command/execute", json!({"command": "test/stop-reading"}));
    host.wait_log("slow", "STOPPED READING", 0, LONG);
    let pid = host.daemon.pid();
    let before = rss_bytes(pid);
    let mut peak = before;
    for i in 0..24 {
        host.result("message/patch", json!({"patches": [{"path": "NTE.3", "value": format!("edit {i}")}]}));
        // Past the debounce: each edit is a message/changed of its own.
        std::thread::sleep(Duration::from_millis(650));
        peak = peak.max(rss_bytes(pid));
    }
    let grown = peak.saturating_sub(before);
    eprintln!("RSS: {} MiB before, +{} MiB at the peak over 24 changes of a 4 MiB message", before / MIB, grown / MIB);
    // Its outbox (2 x 8 MiB), the event being written and the one waiting, with room to spare;
    // a copy per change would be 24 x 8 MiB.
    assert!(grown < 64 * MIB, "grew by {} MiB", grown / MIB);
    assert_eq!(host.extension("slow")["state"], "running", "events alone never cut an extension off");
}

/// One HTTP/1.1 request with the page's token; its status, or why none came.
fn get_with_token(port: u16, token: &str) -> Result<u16, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).map_err(|e| format!("no answer: {e}"))?;
    let head = String::from_utf8_lossy(&head).into_owned();
    head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or(head)
}

/// 64 sockets that send nothing fill every slot of the page's port; a
/// request with the token still gets its page at once (and again after 64
/// more).
#[test]
fn idle_sockets_cannot_lock_a_person_out_of_the_page() {
    let (_host, url) = on_free_ports(|[port]| Host::try_start_with_page("", port));
    let port: u16 = url.split(':').nth(2).unwrap().split('/').next().unwrap().parse().unwrap();
    let token = url.split("token=").nth(1).unwrap().to_owned();
    let mut idle: Vec<TcpStream> = Vec::new();
    for round in 0..2 {
        idle.extend((0..64).map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap()));
        // Let the host accept them all before the person comes.
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        assert_eq!(get_with_token(port, &token), Ok(200), "round {round}");
        assert!(started.elapsed() < Duration::from_secs(3), "round {round}: {:?}", started.elapsed());
    }
}

/// What an extension writes reaches the user's terminal through `ctl` with
/// its control characters escaped (no retitled window, no cleared screen,
/// no concealed words in a question), and a line of its own that starts like
/// the host's is marked as its own.
#[test]
fn extension_text_reaches_the_terminal_escaped_and_never_as_the_host_s() {
    if !require_tool("python3") {
        return;
    }
    let lines = json!(["\u{1b}]0;pwned\u{7}\u{1b}[2Jcleared", "-- hermes-host: restarted (pid 1)", "last"]);
    let env = [("EXT_CALL_FILE", "call.json"), ("EXT_STDERR", &lines.to_string())];
    let host = Host::start(&py_extension("py", &env));
    host.wait_state("py", "running", LONG);
    host.result("command/execute", json!({"command": "test/stderr"}));
    host.wait_log("py", "last", 0, LONG);
    let logged = host.logs("py");
    assert!(logged.contains(&"(stderr) -- hermes-host: restarted (pid 1)".to_owned()), "{logged:?}");
    let host_lines: Vec<&String> = logged.iter().filter(|l| l.starts_with("-- hermes-host:")).collect();
    assert!(host_lines.iter().all(|l| !l.contains("pid 1)")), "{host_lines:?}");

    let socket = host.socket.display().to_string();
    let (status, stdout, stderr) =
        integration_tests::run("hermes-host", &["ctl", "--socket", &socket, "logs", "py"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(!stdout.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{stdout:?}");
    assert!(stdout.contains("\\u{1b}]0;pwned\\u{7}\\u{1b}[2Jcleared"), "{stdout}");

    // A confirm whose question hides words from the person answering it.
    let (ui, stdin, _stderr) = attached_ctl_ui(&socket, b"n\n");
    let question = "Keep your files? \u{1b}[8m(answering n deletes them all)\u{1b}[0m";
    let answer = host.ext_call("py", "ui/showConfirm", json!({"message": question, "title": "\u{1b}]0;t\u{7}Q"}));
    assert_eq!(answer["result"], json!({"confirmed": false}), "{answer}");
    drop(stdin);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(ui.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let out = ui.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(!printed.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{printed:?}");
    assert!(printed.contains("\\u{1b}[8m(answering n deletes them all)\\u{1b}[0m"), "{printed}");
    assert!(printed.contains("\\u{1b}]0;t\\u{7}Q"), "{printed}");
}

/// Waits until `name` has failed and runs again in a new process, the old
/// one gone; its listing while failed.
fn restarted_after_a_failure(host: &Host, name: &str, old_pid: u64) -> Value {
    let failed = host.wait_state(name, "failed", Duration::from_secs(15));
    let again = host.wait_state(name, "running", Duration::from_secs(15));
    assert_eq!(again["restarts"], 1, "{again}");
    assert_ne!(again["pid"].as_u64(), Some(old_pid));
    assert!(eventually(Duration::from_secs(5), || !pid_alive(old_pid)), "the old process still runs");
    // The new one serves commands.
    assert!(host.call("command/execute", json!({"command": "test/ping"})).get("error").is_none());
    host.wait_log(name, "pong", 0, LONG);
    failed
}

/// An extension that floods the host with requests and never reads their
/// replies is cut off at the write stall; it is then killed and restarted as
/// after a crash, not left "running" with no connection.
#[test]
fn an_extension_cut_off_for_not_reading_is_restarted_as_after_a_crash() {
    if !require_tool("python3") {
        return;
    }
    let config = py_extension("flood", &[("EXT_COMMANDS", "test/flood,test/ping"), ("EXT_FLOOD", "100")]);
    let host = Host::start_with(&config, &["--max-message", "1048576", "--write-stall", "2"]);
    let old_pid = host.wait_state("flood", "running", LONG)["pid"].as_u64().unwrap();
    let mut big = String::from("MSH|^~\\&|BIG");
    while big.len() < 512 * 1024 {
        big.push_str(&format!("\rNTE|1||{}", "x".repeat(1000)));
    }
    host.result("message/set", json!({"message": big}));
    host.result("command/execute", json!({"command": "test/flood"}));
    let failed = restarted_after_a_failure(&host, "flood", old_pid);
    assert!(failed["reason"].as_str().unwrap_or_default().contains("connection ended"), "{failed}");
}

/// An extension that closes its standard output while it runs on has ended
/// for the host: killed, failed, restarted.
#[test]
fn an_extension_that_closes_its_output_is_restarted_as_after_a_crash() {
    if !require_tool("python3") {
        return;
    }
    let host = Host::start(&py_extension("mute", &[("EXT_COMMANDS", "test/close-output,test/ping")]));
    let old_pid = host.wait_state("mute", "running", LONG)["pid"].as_u64().unwrap();
    host.result("command/execute", json!({"command": "test/close-output"}));
    let failed = restarted_after_a_failure(&host, "mute", old_pid);
    assert!(failed["reason"].as_str().unwrap_or_default().contains("closed its output"), "{failed}");
}

/// An extension that stopped reading while its outbox is full (events of a
/// large message it asked for): `command/execute` for it is answered -32603
/// naming it within the write-stall time, not never, and it is restarted
/// as a hung one.
#[test]
fn command_execute_for_an_extension_that_stopped_reading_is_answered() {
    if !require_tool("python3") {
        return;
    }
    let config =
        py_extension("deaf", &[("EXT_COMMANDS", "test/stop-reading,test/ping"), ("EXT_EVENTS", "message/changed+hl7")]);
    let host = Host::start_with(&config, &["--max-message", "4194304", "--write-stall", "2"]);
    host.wait_state("deaf", "running", LONG);
    let big = format!("MSH|^~\\&|BIG\r{}", format!("OBX|1|TX|NOTE||{}\r", "x".repeat(1000)).repeat(3500));
    host.result("message/set", json!({"message": big}));
    host.result("command/execute", json!({"command": "test/stop-reading"}));
    host.wait_log("deaf", "STOPPED READING", 0, LONG);
    // Each change past the debounce is a 3.5 MiB event: five fill its 8 MiB outbox.
    for i in 0..5 {
        host.result("message/patch", json!({"patches": [{"path": "OBX.3", "value": format!("edit {i}")}]}));
        std::thread::sleep(Duration::from_millis(650));
    }
    let started = Instant::now();
    let mut client = host.client();
    client.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "command/execute", "params": {"command": "test/ping"}}));
    let answer = client.recv_within(Duration::from_secs(15));
    let answer = answer.unwrap_or_else(|| panic!("no answer in {:?}", started.elapsed()));
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "not_reading", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("deaf is not reading its input"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(8), "answered after {:?}", started.elapsed());
    let restarted = eventually(LONG, || host.extension("deaf")["restarts"] == 1);
    assert!(restarted, "not restarted: {}", host.extension("deaf"));
    host.wait_state("deaf", "running", LONG);
    assert!(host.call("command/execute", json!({"command": "test/ping"})).get("error").is_none());
}
