//! `supex-bridge repl` driven through a pseudo-terminal, as a person types and
//! pastes into it: lines typed while an evaluation runs, a block typed line by
//! line, a plain paste (every line at once) and a bracketed paste. Every line
//! must arrive and be evaluated; none may be dropped between two prompts.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use integration_tests::bin_path;
use rpc_core::child::{ChildCommand, ChildProcess, Exit};

use crate::support::{BIN, Bridge, evals_started, wait_for_evals};

/// What the terminal showed, and its keyboard.
struct Terminal {
    master: std::fs::File,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: String,
    /// Where the next `expect` starts looking: each result is looked for after
    /// the one before it.
    cursor: usize,
}

impl Terminal {
    /// Waits until `needle` appears after the last thing expected.
    fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(at) = self.seen[self.cursor..].find(needle) {
                self.cursor += at + needle.len();
                return;
            }
            match self.output.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("the REPL never showed {needle:?}; the terminal showed:\n{}", self.seen),
            }
        }
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.master.write_all(keys).unwrap();
    }
}

/// The `repl` command on a new pseudo-terminal, connected to `bridge`.
fn repl_on_a_terminal(bridge: &Bridge) -> (Terminal, ChildProcess) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let master = std::fs::File::from(pty.master);
    let mut reader = master.try_clone().unwrap();
    let (tx, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let repl = ChildCommand::new(bin_path(BIN))
        .args(["repl", "--history", bridge.base().join("history").to_str().unwrap()])
        .env("SUPEX_REPL_PORT", bridge.repl.port().to_string())
        .env("TERM", "xterm-256color")
        .terminal(pty.slave)
        .spawn()
        .unwrap();
    (Terminal { master, output, seen: String::new(), cursor: 0 }, repl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repl_keeps_every_line_typed_ahead_or_pasted() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let (mut terminal, repl) = repl_on_a_terminal(&bridge);
    terminal.expect("supex> ");

    // Typed while an evaluation runs: the terminal holds these lines until
    // the editor reads them, all at once.
    let mut probe = bridge.client();
    let before = evals_started(&mut probe);
    terminal.type_keys(b"sleep 1.5; :slept\r");
    wait_for_evals(&mut probe, before + 1);
    for line in [&b"def twice(x)\r"[..], b"  x * 2\r", b"end\r", b"twice(21)\r"] {
        terminal.type_keys(line);
        std::thread::sleep(Duration::from_millis(100));
    }
    terminal.expect("=> :slept");
    terminal.expect("=> :twice");
    terminal.expect("=> 42");

    // A block typed line by line, half a second apart.
    for line in [&b"def thrice(x)\r"[..], b"  x * 3\r", b"end\r", b"thrice(14)\r"] {
        terminal.type_keys(line);
        std::thread::sleep(Duration::from_millis(500));
    }
    terminal.expect("=> :thrice");
    terminal.expect("=> 42");

    // A plain paste (a terminal without bracketed paste): every line at once.
    terminal.type_keys(b"def quad(x)\r  x * 4\rend\rsix = 6\rquad(six) + 18\r");
    terminal.expect("=> :quad");
    terminal.expect("=> 6");
    terminal.expect("=> 42");

    // A bracketed paste: the block lands in the line as it is, Enter runs it.
    terminal.type_keys(b"\x1b[200~def half(x)\r  x / 2\rend\rhalf(84)\x1b[201~");
    terminal.expect("half(84)");
    terminal.type_keys(b"\r");
    terminal.expect("=> 42");
    terminal.type_keys(b"half(half(168))\r");
    terminal.expect("=> 42");

    terminal.type_keys(b"exit\r");
    let exit = tokio::time::timeout(Duration::from_secs(10), repl.exited()).await.expect("the REPL did not exit");
    assert_eq!(exit, Exit::Code(0), "{}", terminal.seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_the_repl_waits_for_a_server_that_is_not_up_yet() {
    if !integration_tests::require_tool("ruby") {
        return;
    }
    let held = integration_tests::HeldPort::new();
    let repl_port = held.port();
    let history = tempfile::tempdir().unwrap();
    let pty = nix::pty::openpty(None, None).unwrap();
    let master = std::fs::File::from(pty.master);
    let mut reader = master.try_clone().unwrap();
    let (tx, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let repl = ChildCommand::new(bin_path(BIN))
        .args(["repl", "--history", history.path().join("h").to_str().unwrap()])
        .env("SUPEX_REPL_PORT", repl_port.to_string())
        .env("TERM", "xterm-256color")
        .terminal(pty.slave)
        .spawn()
        .unwrap();
    let mut terminal = Terminal { master, output, seen: String::new(), cursor: 0 };
    terminal.expect(&format!("no supex-bridge is listening at 127.0.0.1:{repl_port}"));
    terminal.expect("start it with `supex-bridge serve`");
    terminal.expect("waiting up to 30 s for it");

    let port = held.release().to_string();
    let _bridge = Bridge::start_unchecked(&[("SUPEX_REPL_PORT", &port)]);
    terminal.expect("connected to");
    terminal.expect("supex> ");
    terminal.type_keys(b"6 * 7\r");
    terminal.expect("=> 42");
    terminal.type_keys(b"exit\r");
    let exit = tokio::time::timeout(Duration::from_secs(10), repl.exited()).await.expect("the REPL did not exit");
    assert_eq!(exit, Exit::Code(0), "{}", terminal.seen);
}
