//! The child-process module with real processes: group stop, exit reports,
//! the stderr ring, a peer over a child's stdio, and no descendant outliving a
//! SIGKILLed parent. Linux only: processes are found through /proc, and only
//! Linux has the group leader.
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use rpc_core::child::{self, ChildCommand, ChildProcess, Exit, LineRing, Stderr, Stdin, Stdout};
use rpc_core::{CallError, PeerConfig, Router, Transport};
use tokio::io::AsyncBufReadExt;

/// Live (not zombie) processes whose process group is `group`.
fn members(group: u32) -> Vec<u32> {
    processes().into_iter().filter(|p| p.group == group).map(|p| p.pid).collect()
}

/// Live processes whose command line contains `marker`.
fn marked(marker: &str) -> Vec<u32> {
    processes().into_iter().filter(|p| p.cmdline.contains(marker)).map(|p| p.pid).collect()
}

/// Live processes in session `session`.
fn in_session(session: u32) -> Vec<u32> {
    processes().into_iter().filter(|p| p.session == session).map(|p| p.pid).collect()
}

struct Process {
    pid: u32,
    group: u32,
    session: u32,
    cmdline: String,
}

fn processes() -> Vec<Process> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        let number = |i: usize| fields.get(i).and_then(|n| n.parse().ok());
        let (Some(&state), Some(group), Some(session)) = (fields.first(), number(2), number(3)) else {
            continue;
        };
        if state == "Z" {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push(Process { pid, group, session, cmdline });
    }
    found
}

async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    check()
}

fn unique(what: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("rpc-core-child-test-{what}-{}-{n}", std::process::id())
}

fn sh(script: &str, marker: &str) -> ChildCommand {
    // The marker is `$0`, so it shows in the shell's command line.
    ChildCommand::new("sh").args(["-c", script, marker])
}

/// Kills what a test deliberately started outside any group it controls (a
/// grandchild that called setsid), by the pids carrying its marker.
fn kill_escaped(marker: &str) {
    for pid in marked(marker) {
        let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
}

/// Waits for the child to print its first line on a piped stdout (it is set up).
async fn first_line(child: &mut ChildProcess) -> String {
    let stdout = child.take_stdout().expect("stdout piped");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
    line.expect("no first line within 10 s").unwrap().unwrap_or_default()
}

#[tokio::test]
async fn stop_kills_the_whole_group() {
    let marker = unique("stop");
    let child = sh("sleep 300 & sleep 300 & wait", &marker).spawn().unwrap();
    let group = child.pid();
    // The leader (on Linux), the shell and its two sleeps.
    let expected = if cfg!(target_os = "linux") { 4 } else { 3 };
    assert!(eventually(Duration::from_secs(5), || members(group).len() >= expected).await);
    let exit = child.stop(Duration::from_secs(5)).await;
    assert_eq!(exit, Exit::Signal(Signal::SIGTERM as i32), "{exit}");
    assert!(
        eventually(Duration::from_secs(2), || members(group).is_empty()).await,
        "left in the group: {:?}",
        members(group)
    );
}

#[tokio::test]
async fn stop_kills_a_child_that_ignores_sigterm_after_the_grace() {
    let marker = unique("trap");
    let mut child = sh("trap '' TERM; sleep 300 & echo ready; wait", &marker).stdout(Stdout::Piped).spawn().unwrap();
    let group = child.pid();
    assert_eq!(first_line(&mut child).await, "ready");
    let grace = Duration::from_millis(500);
    let started = Instant::now();
    let exit = tokio::time::timeout(grace * 4, child.stop(grace)).await.expect("stop did not return");
    let took = started.elapsed();
    assert_eq!(exit.to_string(), "killed by SIGKILL");
    assert!(took >= grace && took < grace + Duration::from_secs(1), "stop took {took:?}");
    assert!(eventually(Duration::from_secs(2), || members(group).is_empty()).await, "{:?}", members(group));
}

/// A script that starts a grandchild which leaves the group (setsid), so
/// nothing kills it and its copies of stdin and stdout stay open after the
/// child exits; the grandchild carries `<marker>-escaped`. Then `then`.
fn with_escaped_grandchild(marker: &str, then: &str) -> ChildCommand {
    sh(&format!(r#"setsid sh -c "sleep 300; :" "$0-escaped" & {then}"#), marker)
}

async fn wait_for_escaped(marker: &str) {
    let escaped = format!("{marker}-escaped");
    assert!(eventually(Duration::from_secs(5), || !marked(&escaped).is_empty()).await, "no grandchild");
}

/// The program exits while a grandchild that left the group (setsid) holds
/// its stdout: the exit is seen at once with its real status, and the
/// grandchild goes with it (the leader, a subreaper, is handed it and kills it).
#[tokio::test]
async fn the_exit_is_reported_at_once_with_its_real_status_and_an_escaped_grandchild_goes_too() {
    let marker = unique("exit");
    let mut child = with_escaped_grandchild(&marker, "read -r line; exit 3")
        .stdin(Stdin::Piped)
        .stdout(Stdout::Piped)
        .spawn()
        .unwrap();
    let _stdout = child.take_stdout();
    wait_for_escaped(&marker).await;
    let mut stdin = child.take_stdin().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"go\n").await.unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(5), child.exited()).await;
    let escaped = format!("{marker}-escaped");
    let gone = eventually(Duration::from_secs(5), || marked(&escaped).is_empty()).await;
    kill_escaped(&marker);
    let exit = exit.expect("the exit was not seen within 5 s");
    assert!(gone, "the grandchild that left the group outlived its program");
    assert_eq!(exit, Exit::Code(3));
    assert_eq!(exit.to_string(), "exit status 3");
    assert!(child.has_exited());
}

/// A program that ignores SIGTERM, with a grandchild that left the group:
/// when the stop's grace runs out, the kill reaches the grandchild too (the
/// leader does it; a SIGKILL of the group from the daemon would have killed
/// the leader with it, and the grandchild would have gone to init).
#[tokio::test]
async fn a_kill_after_the_grace_takes_a_grandchild_that_left_the_group_too() {
    let marker = unique("kill-escaped");
    let mut child = with_escaped_grandchild(&marker, "trap '' TERM; echo ready; while :; do sleep 1; done")
        .stdout(Stdout::Piped)
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut child).await, "ready");
    assert_the_kill_takes_the_escaped_grandchild(&child, &marker).await;
}

/// Stops `child`, which ignores SIGTERM, with a short grace: the kill that
/// follows must take its grandchild that left the group too.
async fn assert_the_kill_takes_the_escaped_grandchild(child: &ChildProcess, marker: &str) {
    wait_for_escaped(marker).await;
    let exit = tokio::time::timeout(Duration::from_secs(10), child.stop(Duration::from_millis(300))).await;
    let escaped = format!("{marker}-escaped");
    let gone = eventually(Duration::from_secs(5), || marked(&escaped).is_empty()).await;
    kill_escaped(marker);
    assert_eq!(exit.expect("stop did not return").to_string(), "killed by SIGKILL");
    assert!(gone, "the grandchild that left the group outlived the kill");
}

/// The same on a terminal, where the leader leads the session and the group.
#[tokio::test]
async fn a_kill_after_the_grace_on_a_terminal_takes_a_grandchild_that_left_the_group_too() {
    let marker = unique("tty-kill-escaped");
    let (mut terminal, slave) = Terminal::open();
    let child = with_escaped_grandchild(&marker, "trap '' TERM; echo ready; while :; do sleep 1; done")
        .terminal(slave)
        .spawn()
        .unwrap();
    terminal.expect("ready");
    assert_the_kill_takes_the_escaped_grandchild(&child, &marker).await;
}

#[tokio::test]
async fn a_child_killed_by_a_signal_is_reported_as_such() {
    let marker = unique("signal");
    let child = sh("kill -USR1 $$", &marker).spawn().unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(5), child.exited()).await.unwrap();
    assert_eq!(exit.to_string(), "killed by SIGUSR1");

    let child = sh("sleep 300", &marker).spawn().unwrap();
    child.kill();
    let exit = tokio::time::timeout(Duration::from_secs(5), child.exited()).await.unwrap();
    assert_eq!(exit, Exit::Signal(Signal::SIGKILL as i32));
}

#[tokio::test]
async fn a_peer_over_the_child_fails_its_pending_call_when_the_child_exits() {
    let marker = unique("peer");
    // Reads the first header line of our request, then exits; the escaped
    // grandchild holds both pipes until the leader ends it: the call must
    // fail on the exit, not wait for the pipes' EOF.
    let mut child = with_escaped_grandchild(&marker, "read -r line; exit 3")
        .stdin(Stdin::Piped)
        .stdout(Stdout::Piped)
        .spawn()
        .unwrap();
    wait_for_escaped(&marker).await;
    let (peer, connection) = child::connect(
        &mut child,
        |stdout, stdin| Transport::content_length(stdout, stdin, 1 << 20),
        Router::<()>::empty(),
        Arc::new(()),
        PeerConfig::default(),
    )
    .unwrap();
    let started = Instant::now();
    let reply = peer.request_raw("hang", &(), Some(Duration::from_secs(60)));
    let reply = tokio::time::timeout(Duration::from_secs(5), reply).await;
    kill_escaped(&marker);
    let reply = reply.expect("the call was still pending 5 s after the child exited");
    assert_eq!(reply.unwrap_err(), CallError::Disconnected);
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert_eq!(child.exited().await, Exit::Code(3));
    let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
    // Asking for the pipes twice is an error, not a panic.
    let again = child::connect(
        &mut child,
        |stdout, stdin| Transport::ndjson(stdout, stdin, 1024),
        Router::<()>::empty(),
        Arc::new(()),
        PeerConfig::default(),
    );
    assert!(again.is_err());
}

#[tokio::test]
async fn the_stderr_ring_keeps_the_last_lines_within_its_limits() {
    let marker = unique("ring");
    let ring = LineRing::new(100, 500);
    let script = r#"i=0; while [ $i -lt 10000 ]; do echo "line $i" >&2; i=$((i+1)); done"#;
    let child =
        sh(script, &marker).stderr(Stderr::Lines { ring: ring.clone(), log: tracing::Level::DEBUG }).spawn().unwrap();
    assert_eq!(child.exited().await, Exit::Code(0));
    let last = || ring.tail(1).first().cloned().unwrap_or_default();
    assert!(eventually(Duration::from_secs(5), || last() == "line 9999").await, "last line: {}", last());
    let lines = ring.tail(usize::MAX);
    assert!(ring.bytes() <= 500, "{} bytes", ring.bytes());
    // The newest lines, in order, as many as 500 bytes hold.
    assert_eq!(lines.len(), 500 / "line 9999".len());
    let expected: Vec<String> = (10_000 - lines.len()..10_000).map(|i| format!("line {i}")).collect();
    assert_eq!(lines, expected);
    assert_eq!(child.stderr_lines().unwrap().tail(1), ["line 9999"]);
}

#[tokio::test]
async fn one_endless_stderr_line_is_cut_to_the_ring_limit() {
    let marker = unique("long");
    let ring = LineRing::new(10, 64 * 1024);
    let script = r#"echo before >&2; head -c 10000000 /dev/zero | tr '\0' x >&2; echo >&2; echo after >&2"#;
    let child =
        sh(script, &marker).stderr(Stderr::Lines { ring: ring.clone(), log: tracing::Level::DEBUG }).spawn().unwrap();
    assert_eq!(child.exited().await, Exit::Code(0));
    assert!(eventually(Duration::from_secs(5), || ring.tail(1) == ["after"]).await, "{:?}", ring.tail(1));
    // One cut line: the rest of it was skipped, not kept as more lines, and
    // the line before it is still there.
    let lines = ring.tail(10);
    assert_eq!(lines.len(), 3, "{:?}", lines.iter().map(String::len).collect::<Vec<_>>());
    assert_eq!(lines[0], "before");
    assert!(lines[1].len() <= child::LONGEST_LINE && lines[1].starts_with("xxx") && lines[1].ends_with('…'));
    assert!(ring.bytes() <= child::LONGEST_LINE + 20);
}

#[tokio::test]
async fn extra_fds_reach_the_child_at_their_numbers() {
    let marker = unique("fd");
    let (read, write) = nix::unistd::pipe().unwrap();
    let child = sh("echo on-fd-4 >&4", &marker).fd(write, 4).spawn().unwrap();
    assert_eq!(child.exited().await, Exit::Code(0));
    // Our copy of the write end was closed at spawn: the read ends at EOF.
    let text = tokio::task::spawn_blocking(move || std::io::read_to_string(std::fs::File::from(read)).unwrap());
    let text = tokio::time::timeout(Duration::from_secs(5), text).await.expect("no EOF on the fd pipe").unwrap();
    assert_eq!(text, "on-fd-4\n");
    let (_, write) = nix::unistd::pipe().unwrap();
    assert!(sh("true", &marker).fd(write, 1).spawn().is_err(), "fd 1 is stdio");
}

#[tokio::test]
async fn a_missing_program_fails_the_spawn() {
    let error = ChildCommand::new("/nonexistent/program").spawn().unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}

/// SIGKILLs a parent process (this test binary, re-run as `parent_of_children`)
/// whose children each started grandchildren, one in the child's group and
/// one that left it for a session of its own (`setsid`) and started a child
/// there: none of them may survive it. The second child was spawned from a
/// thread that ended at once, so its parent-death signal fired early and was
/// ignored; the leader still notices.
#[test]
fn no_descendant_outlives_a_sigkilled_parent() {
    let marker = unique("orphan");
    let mut parent = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child::parent_of_children", "--nocapture", "--test-threads=1"])
        .env("RPC_CORE_CHILD_PARENT", &marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut groups = Vec::new();
    for line in BufReader::new(parent.stdout.take().unwrap()).lines() {
        // libtest may print `test parent_of_children ... ` on the same line.
        if let Some((_, group)) = line.unwrap().split_once("child group ") {
            groups.push(group.trim().parse::<u32>().unwrap());
        }
        if groups.len() == 2 {
            break;
        }
    }
    assert_eq!(groups.len(), 2, "the parent did not start its children");
    let escaped = format!("{marker}-escaped");
    let sessions = || marked(&escaped);
    let settled = Instant::now() + Duration::from_secs(5);
    // Each group: the leader, the shell and its sleep; each escaped session:
    // a shell and its sleep.
    let started = || -> (Vec<usize>, Vec<usize>) {
        let sessions: Vec<usize> = sessions().into_iter().map(|s| in_session(s).len()).collect();
        (groups.iter().map(|&g| members(g).len()).collect(), sessions)
    };
    while started() != (vec![3, 3], vec![2, 2]) && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(25));
    }
    // The second child's parent-death signal, sent when its spawning thread
    // ended, did not end it: the daemon was still alive.
    assert_eq!(started(), (vec![3, 3], vec![2, 2]), "the children did not start, or one ended early");
    let escaped_sessions = sessions();

    kill(Pid::from_raw(parent.id() as i32), Signal::SIGKILL).unwrap();
    let _ = parent.wait();
    let left = || -> Vec<u32> {
        let sessions = escaped_sessions.iter().flat_map(|&s| in_session(s));
        groups.iter().flat_map(|&g| members(g)).chain(marked(&marker)).chain(sessions).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(25));
    }
    let left = left();
    for &pid in &left {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    assert!(left.is_empty(), "outlived their SIGKILLed parent: {left:?}");
}

/// Runs only as the parent in the test above.
#[test]
fn parent_of_children() {
    let Some(marker) = std::env::var_os("RPC_CORE_CHILD_PARENT") else {
        return;
    };
    let marker = marker.to_string_lossy().into_owned();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // A sleep in the group, and a shell that left it (a session of its own,
    // carrying `<marker>-escaped`) with a sleep of its own.
    let script = r#"sleep 300 & setsid sh -c "sleep 300; :" "${0%-thread}-escaped" & wait"#;
    let from_this_thread = runtime.block_on(async { sh(script, &marker).spawn().unwrap() });
    let handle = runtime.handle().clone();
    let from_a_thread_that_ended = std::thread::spawn(move || {
        let _entered = handle.enter();
        sh(script, &format!("{marker}-thread")).spawn().unwrap()
    })
    .join()
    .unwrap();
    println!("child group {}", from_this_thread.pid());
    println!("child group {}", from_a_thread_that_ended.pid());
    // Waits for its SIGKILL; a bounded wait, should the test die first.
    runtime.block_on(async { tokio::time::sleep(Duration::from_secs(60)).await });
}

// ---------------------------------------------------------------------------
// On a terminal
// ---------------------------------------------------------------------------

/// The master side of a pseudo-terminal, read by a thread into a channel.
struct Terminal {
    master: std::fs::File,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: String,
}

impl Terminal {
    /// A new pseudo-terminal and the slave side to give the child.
    fn open() -> (Terminal, std::os::fd::OwnedFd) {
        let pty = nix::pty::openpty(None, None).unwrap();
        let master = std::fs::File::from(pty.master);
        let mut reader = master.try_clone().unwrap();
        let (tx, output) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once no process holds the slave any more.
            while let Ok(n @ 1..) = std::io::Read::read(&mut reader, &mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        (Terminal { master, output, seen: String::new() }, pty.slave)
    }

    /// Waits until the terminal showed `needle`; returns everything shown so far.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.seen.contains(needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("the terminal never showed {needle:?}; it showed {:?}", self.seen),
            }
        }
        self.seen.clone()
    }

    fn type_keys(&mut self, keys: &[u8]) {
        std::io::Write::write_all(&mut self.master, keys).unwrap();
    }
}

/// `pid`'s process group and session, from /proc.
fn group_and_session(pid: u32) -> (u32, u32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    (fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

#[tokio::test]
async fn a_program_on_a_terminal_has_it_as_stdio_and_controlling_terminal_in_the_leaders_session() {
    let marker = unique("tty");
    let (mut terminal, slave) = Terminal::open();
    let script = r#"test -t 0 && test -t 1 && test -t 2 && echo "stdio is a tty"; echo "via /dev/tty" > /dev/tty; echo "pid=$$"; sleep 300"#;
    let child = sh(script, &marker).terminal(slave).spawn().unwrap();
    let shown = terminal.expect("pid=");
    assert!(shown.contains("stdio is a tty") && shown.contains("via /dev/tty"), "{shown}");
    let shown = terminal.expect("\n");
    let program: u32 = shown.split("pid=").nth(1).unwrap().trim().parse().unwrap();
    // The program is not the group's leader: the leader is, of the group and
    // of the session, and its pid is the group's id.
    assert_ne!(program, child.pid());
    assert_eq!(group_and_session(program), (child.pid(), child.pid()));
    assert_eq!(group_and_session(child.pid()), (child.pid(), child.pid()));
    assert_eq!(child.stop(Duration::from_secs(5)).await, Exit::Signal(Signal::SIGTERM as i32));
    assert!(eventually(Duration::from_secs(2), || members(child.pid()).is_empty()).await);
}

#[tokio::test]
async fn keys_typed_into_the_terminal_reach_the_program_and_ctrl_c_reaches_its_group() {
    let marker = unique("keys");
    let (mut terminal, slave) = Terminal::open();
    let script =
        r#"read line; echo "got:$line"; trap 'echo interrupted; exit 7' INT; echo ready; while :; do sleep 0.05; done"#;
    let child = sh(script, &marker).terminal(slave).spawn().unwrap();
    terminal.type_keys(b"hello\n");
    // The terminal echoes what was typed, then the program answers.
    assert!(terminal.expect("got:hello").contains("hello\r\n"));
    terminal.expect("ready");
    // Ctrl-C: the terminal sends SIGINT to its foreground group, the program's.
    terminal.type_keys(b"\x03");
    let exit = tokio::time::timeout(Duration::from_secs(10), child.exited()).await.expect("no exit after Ctrl-C");
    assert_eq!(exit, Exit::Code(7));
    terminal.expect("interrupted");
}

#[tokio::test]
async fn stop_kills_the_whole_group_on_a_terminal_and_the_real_status_comes_back() {
    let marker = unique("tty-stop");
    let (mut terminal, slave) = Terminal::open();
    let child = sh("sleep 300 & sleep 300 & echo started; wait", &marker).terminal(slave).spawn().unwrap();
    terminal.expect("started");
    // The leader, the shell and its two sleeps.
    assert!(eventually(Duration::from_secs(5), || members(child.pid()).len() >= 4).await, "{:?}", members(child.pid()));
    assert_eq!(child.stop(Duration::from_secs(5)).await, Exit::Signal(Signal::SIGTERM as i32));
    assert!(eventually(Duration::from_secs(2), || members(child.pid()).is_empty()).await, "{:?}", members(child.pid()));

    let (mut terminal, slave) = Terminal::open();
    let child = sh("echo bye; exit 3", &marker).terminal(slave).spawn().unwrap();
    assert_eq!(tokio::time::timeout(Duration::from_secs(10), child.exited()).await.unwrap(), Exit::Code(3));
    terminal.expect("bye");
}

#[tokio::test]
async fn a_terminal_child_refuses_other_stdio() {
    let (_terminal, slave) = Terminal::open();
    let error = sh("true", "x").stdout(Stdout::Piped).terminal(slave).spawn().unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}

/// As `no_descendant_outlives_a_sigkilled_parent`, for children on terminals:
/// the program and what it starts live in the session the leader started,
/// and go with the parent.
#[test]
fn no_descendant_on_a_terminal_outlives_a_sigkilled_parent() {
    let marker = unique("tty-orphan");
    let mut parent = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child::parent_of_terminal_children", "--nocapture", "--test-threads=1"])
        .env("RPC_CORE_CHILD_TTY_PARENT", &marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut group = None;
    for line in BufReader::new(parent.stdout.take().unwrap()).lines() {
        if let Some((_, g)) = line.unwrap().split_once("terminal group ") {
            group = Some(g.trim().parse::<u32>().unwrap());
            break;
        }
    }
    let group = group.expect("the parent did not start its child");
    let settled = Instant::now() + Duration::from_secs(5);
    while members(group).len() < 4 && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(members(group).len(), 4, "the leader, the shell and its two sleeps");

    kill(Pid::from_raw(parent.id() as i32), Signal::SIGKILL).unwrap();
    let _ = parent.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    while (!marked(&marker).is_empty() || !members(group).is_empty()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(25));
    }
    let left: Vec<u32> = members(group).into_iter().chain(marked(&marker)).collect();
    for &pid in &left {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    assert!(left.is_empty(), "outlived their SIGKILLed parent: {left:?}");
}

/// Runs only as the parent in the test above.
#[test]
fn parent_of_terminal_children() {
    let Some(marker) = std::env::var_os("RPC_CORE_CHILD_TTY_PARENT") else {
        return;
    };
    let marker = marker.to_string_lossy().into_owned();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (mut terminal, slave) = Terminal::open();
    let child = runtime
        .block_on(async { sh("sleep 300 & sleep 300 & echo started; wait", &marker).terminal(slave).spawn().unwrap() });
    terminal.expect("started");
    println!("terminal group {}", child.pid());
    runtime.block_on(async { tokio::time::sleep(Duration::from_secs(60)).await });
}
