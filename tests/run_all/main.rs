//! The README's main job, `scripts/run-all`, run as a newcomer runs it: it
//! builds, starts the four daemons on their default ports, prints a banner
//! with one command to try per daemon that answered, and one Ctrl-C (SIGINT
//! to its process group, as a terminal sends it) stops everything and leaves
//! nothing behind.
//!
//! The tests use the default ports, so they take turns (across processes:
//! nextest runs each test in its own), and each is skipped
//! when one of those ports is in use on this machine before it starts.
//!
//! A test binary of its own: run-all's build step may relink the daemons'
//! binaries (when this test run built them with other features, e.g. from
//! `cargo test -p integration-tests`), and no other test may be running them
//! meanwhile. `cargo test` runs test binaries one after another.

use parking_lot::Mutex;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::{bin_path, eventually, pids_matching};

const DAEMONS: &[&str] = &["supex-bridge", "btcp-broker", "hermes-host", "ralph-server"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The default TCP ports: supex-bridge's bridge and REPL, btcp-broker's,
/// hermes-host's editor page.
const DEFAULT_PORTS: [u16; 4] = [9876, 4433, 8765, 8767];

/// This test's turn on the default ports, or `None` (the test is skipped)
/// when something else listens on one of them. One run-all at a time, they
/// all want those ports: a lock on a file, since nextest runs each test in a
/// process of its own (and two test runs may share the machine). The turn
/// lasts until the returned file is dropped.
fn default_ports_turn() -> Option<File> {
    let path = std::env::temp_dir().join("rpc-daemons-run-all-default-ports.lock");
    let file = File::options().create(true).truncate(false).write(true).open(&path).expect("opening the lock file");
    file.lock().unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    if DEFAULT_PORTS.iter().any(|p| listening(*p)) {
        integration_tests::skip(&format!("a default port ({DEFAULT_PORTS:?}) is in use"), "stop what listens there");
        return None;
    }
    Some(file)
}

fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// `scripts/run-all` in its own process group, its stderr read as it comes.
struct RunAll {
    child: Option<Child>,
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl RunAll {
    /// Starts it for the profile and target directory this test was built in,
    /// so that its build step finds the binaries up to date.
    fn start(env: &[(&str, &str)]) -> RunAll {
        let bin_dir = bin_path("supex-bridge").parent().unwrap().to_owned();
        let profile = bin_dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut command = Command::new(repo().join("scripts/run-all"));
        command
            .current_dir(repo())
            .env("PROFILE", &profile)
            .env("CARGO_TARGET_DIR", bin_dir.parent().unwrap())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let reader = {
            let (log, stderr) = (log.clone(), child.stderr.take().unwrap());
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let mut log = log.lock();
                    log.push_str(&line);
                    log.push('\n');
                }
            })
        };
        RunAll { child: Some(child), log, reader: Some(reader) }
    }

    fn log(&self) -> String {
        self.log.lock().clone()
    }

    /// Waits for the banner's last line (the build may take minutes on a
    /// machine where the binaries are not built yet).
    fn wait_for_banner(&mut self) -> bool {
        eventually(Duration::from_secs(600), || {
            self.log().contains("Ctrl-C stops them all") || self.child.as_mut().unwrap().try_wait().unwrap().is_some()
        }) && self.log().contains("Ctrl-C stops them all")
    }

    /// The commands the banner says to try, in its order.
    fn try_commands(&self) -> Vec<(String, String)> {
        let log = self.log();
        let mut daemon = String::new();
        let mut commands = Vec::new();
        for line in log.lines() {
            if let Some(name) = DAEMONS.iter().find(|d| line.starts_with(&format!("  {d} "))) {
                daemon = (*name).to_owned();
            }
            if let Some(command) = line.trim_start().strip_prefix("try: ") {
                commands.push((daemon.clone(), command.to_owned()));
            }
        }
        commands
    }

    /// Ctrl-C: SIGINT to the script's process group, as a terminal sends it.
    /// Returns its exit status and everything it printed.
    fn interrupt(mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let group = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "run-all did not stop within 60 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        };
        self.reader.take().unwrap().join().unwrap();
        (status, self.log())
    }
}

impl Drop for RunAll {
    /// A failed test still stops the daemons: run-all's own Ctrl-C path.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT);
            let _ = eventually(Duration::from_secs(40), || child.try_wait().unwrap().is_some());
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs a try-it command as a person pasting it would: `sh -c`, from the
/// repository, with a time limit (a hang is a failure too).
fn run_pasted(command: &str) -> (Option<i32>, String) {
    let mut child = Command::new("sh")
        .args(["-c", command])
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let finished = eventually(Duration::from_secs(30), || child.try_wait().unwrap().is_some());
    if !finished {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (if finished { out.status.code() } else { None }, text)
}

/// Whether a try-it command succeeded. `ralph-server status` is the one
/// command whose exit status is the task's state (1: running, 0: completed),
/// as the banner says next to it; either is a status it printed.
fn try_it_succeeded(daemon: &str, code: Option<i32>, output: &str) -> bool {
    match daemon {
        "ralph-server" => {
            matches!(code, Some(0 | 1)) && (output.contains(": running") || output.contains(": completed"))
        }
        _ => code == Some(0),
    }
}

/// The scratch directory the banner names (every socket lives there).
fn scratch_dir(log: &str) -> PathBuf {
    const PREFIX: &str = "/tmp/rpc-daemons-run-all.";
    let at = log.find(PREFIX).expect("the banner names the scratch directory");
    let suffix: String = log[at + PREFIX.len()..].chars().take_while(char::is_ascii_alphanumeric).collect();
    PathBuf::from(format!("{PREFIX}{suffix}"))
}

/// After Ctrl-C: every daemon exited 0, nothing listens, no daemon process
/// of this run is left, and the scratch directory (with every socket file)
/// is gone.
fn assert_nothing_left(log: &str, scratch: &Path, started: &[&str]) {
    for daemon in started {
        assert!(log.contains(&format!("[{daemon}] exited with 0")), "{daemon} did not exit 0:\n{log}");
    }
    let still: Vec<u16> = DEFAULT_PORTS.iter().copied().filter(|p| listening(*p)).collect();
    assert!(still.is_empty(), "still listening on {still:?}:\n{log}");
    let left = pids_matching(&scratch.display().to_string());
    assert!(left.is_empty(), "processes of this run still alive: {left:?}:\n{log}");
    assert!(!scratch.exists(), "{} was not removed:\n{log}", scratch.display());
}

#[test]
fn run_all_starts_every_daemon_each_try_it_works_and_ctrl_c_leaves_nothing_behind() {
    let Some(_turn) = default_ports_turn() else { return };
    let mut run_all = RunAll::start(&[]);
    assert!(run_all.wait_for_banner(), "no banner:\n{}", run_all.log());
    let log = run_all.log();
    let scratch = scratch_dir(&log);
    assert!(log.contains("run-all: building"), "no build step:\n{log}");
    assert!(!log.contains("failed to start"), "{log}");
    // All four listening, each on its own protocol.
    for port in DEFAULT_PORTS {
        assert!(listening(port), "nothing listens on {port}:\n{log}");
    }
    assert!(scratch.join("hermes-host.sock").exists(), "{log}");
    assert!(log.contains("http://127.0.0.1:8765/?sessionId=demo"), "the demo link is not session demo:\n{log}");
    // Each try-it command, as printed, succeeds.
    let commands = run_all.try_commands();
    let daemons: Vec<&str> = commands.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(daemons, DAEMONS, "one try-it per daemon:\n{log}");
    for (daemon, command) in &commands {
        let (code, output) = run_pasted(command);
        assert!(try_it_succeeded(daemon, code, &output), "{daemon}'s try-it `{command}` gave {code:?}:\n{output}");
    }
    // The demo page's hint, pasted as printed, runs the broker's client (no
    // browser has opened the page here, so it says the session has none).
    let hint = log.split("then: ").nth(1).and_then(|rest| rest.split(')').next()).expect("the demo page's hint");
    let (code, output) = run_pasted(hint);
    assert!(code.is_some_and(|c| c != 127) && output.contains("demo"), "`{hint}` gave {code:?}:\n{output}");
    let (status, log) = run_all.interrupt();
    assert!(status.success(), "run-all exited with {status}:\n{log}");
    for daemon in DAEMONS {
        assert!(log.contains(&format!("[{daemon}] ")), "{daemon}'s lines are not prefixed:\n{log}");
    }
    assert_nothing_left(&log, &scratch, DAEMONS);
}

#[test]
fn run_all_with_the_bridge_port_taken_reports_supex_bridge_at_once_and_runs_the_others() {
    let Some(_turn) = default_ports_turn() else { return };
    // Taken by something that accepts and never answers: a client of it would hang.
    let taken = TcpListener::bind("127.0.0.1:9876").unwrap();
    let mut run_all = RunAll::start(&[]);
    // "At once": within seconds of the build's end (cargo's `Finished` line),
    // before the banner, with the daemon's own reason.
    let built = eventually(Duration::from_secs(600), || run_all.log().contains("Finished"));
    assert!(built, "the build did not finish:\n{}", run_all.log());
    let started = Instant::now();
    let failed = eventually(Duration::from_secs(30), || run_all.log().contains("run-all: supex-bridge failed"));
    assert!(failed, "supex-bridge's failure was not reported:\n{}", run_all.log());
    assert!(started.elapsed() < Duration::from_secs(5), "reported after {:?}", started.elapsed());
    assert!(run_all.wait_for_banner(), "no banner:\n{}", run_all.log());
    let log = run_all.log();
    let failure = log.lines().find(|l| l.starts_with("run-all: supex-bridge failed")).unwrap();
    assert!(failure.contains("9876") && failure.contains("in use"), "{failure}");
    assert!(log.find(failure).unwrap() < log.find("Ctrl-C stops them all").unwrap(), "{log}");
    let commands = run_all.try_commands();
    assert!(commands.iter().all(|(d, _)| d != "supex-bridge"), "a try-it for the failed daemon:\n{log}");
    assert!(!log.contains("  supex-bridge  "), "the banner lists the failed daemon:\n{log}");
    assert_eq!(commands.len(), 3, "{log}");
    for (daemon, command) in &commands {
        let (code, output) = run_pasted(command);
        assert!(try_it_succeeded(daemon, code, &output), "{daemon}'s try-it `{command}` gave {code:?}:\n{output}");
    }
    assert!(listening(8765), "btcp-broker is not up:\n{log}");
    let scratch = scratch_dir(&log);
    let (status, log) = run_all.interrupt();
    drop(taken);
    // One daemon failed: the run as a whole did not succeed.
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("[supex-bridge] failed to start"), "{log}");
    assert_nothing_left(&log, &scratch, &["btcp-broker", "hermes-host", "ralph-server"]);
}

#[test]
fn run_all_without_ruby_still_runs_the_bridge_and_its_try_it_says_how_to_get_ruby() {
    let Some(_turn) = default_ports_turn() else { return };
    let mut run_all = RunAll::start(&[("SUPEX_RUBY", "/nonexistent/ruby")]);
    assert!(run_all.wait_for_banner(), "no banner:\n{}", run_all.log());
    let log = run_all.log();
    assert!(log.contains("without Ruby:") && log.contains("Install Ruby"), "{log}");
    let (_, command) = run_all.try_commands().into_iter().find(|(d, _)| d == "supex-bridge").expect("a supex try-it");
    assert!(!command.contains("eval_ruby"), "a try-it that needs Ruby: {command}");
    let (code, output) = run_pasted(&command);
    assert_eq!(code, Some(0), "`{command}`:\n{output}");
    assert!(output.contains("\"unavailable\""), "{output}");
    let scratch = scratch_dir(&log);
    let (status, log) = run_all.interrupt();
    assert!(status.success(), "{log}");
    assert_nothing_left(&log, &scratch, DAEMONS);
}
