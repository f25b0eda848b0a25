//! `ralph-server attach` driven through a pseudo-terminal, as a person would:
//! header and last lines, `i` to type to the agent, Esc, `q`; the terminal
//! comes back as it was.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use integration_tests::bin_path;
use nix::sys::termios::{LocalFlags, tcgetattr};
use rpc_core::child::{ChildCommand, Exit};

use crate::support::{Task, output_line};

struct Screen {
    master: std::fs::File,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: String,
    /// Where the next `expect` looks from: past what the last one found.
    read_to: usize,
}

impl Screen {
    /// Waits for `needle` to appear after what was expected before: what
    /// attach shows once it has acted on the keys sent before.
    fn expect(&mut self, needle: &str) {
        self.expect_all(&[needle]);
    }

    /// [`Screen::expect`] for things that come in no set order (attach's
    /// own line and the server's event for one key).
    fn expect_all(&mut self, needles: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found: Option<Vec<usize>> =
                needles.iter().map(|n| self.seen[self.read_to..].find(n).map(|at| at + n.len())).collect();
            if let Some(ends) = found {
                self.read_to += ends.into_iter().max().unwrap_or(0);
                return;
            }
            match self.output.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("attach never showed {needles:?}; it showed:\n{}", self.seen),
            }
        }
    }

    /// Types `keys`; attach reads them in one go, so the test waits for what
    /// they do before it types the next ones.
    fn keys(&mut self, keys: &[u8]) {
        self.master.write_all(keys).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_shows_the_task_types_to_the_agent_and_restores_the_terminal() {
    let task = Task::new("attached", 1);
    task.mode("interactive");
    let daemon = task.run(&[]);
    // The agent has asked its question (a line without its end) before
    // attach connects: attach shows it all the same.
    let mut client = task.connect(&daemon);
    client.call("subscribe", serde_json::json!({"events": ["output"]}));
    client.until(|e| output_line(e).is_some_and(|l| l.contains("your input:"))).expect("the agent's question");
    let pty = nix::pty::openpty(None, None).unwrap();
    let master = std::fs::File::from(pty.master);
    let before = tcgetattr(master.as_fd()).unwrap();
    assert!(before.local_flags.contains(LocalFlags::ICANON | LocalFlags::ECHO));
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
    let socket_dir = task.socket_dir();
    let attach = ChildCommand::new(bin_path("ralph-server"))
        .args(["attach", "attached"])
        .env("RALPH_SOCKET_DIR", &socket_dir)
        .terminal(pty.slave)
        .spawn()
        .unwrap();
    let mut screen = Screen { master, output, seen: String::new(), read_to: 0 };
    screen.expect("ralph-server: attached - running");
    screen.expect("keys: i interactive");
    screen.expect("your input:");
    // Raw while attached.
    let raw = tcgetattr(screen.master.as_fd()).unwrap();
    assert!(!raw.local_flags.contains(LocalFlags::ICANON), "attach puts the terminal in raw mode");
    // Each key's effect, the server's event included, is seen before the
    // next key: a late event would turn attach's mode back.
    let (on, off) = ("\"interactive_mode\":true", "\"interactive_mode\":false");
    screen.keys(b"i");
    screen.expect_all(&["interactive mode: keys go to the agent", on]);
    screen.keys(b"\x1b");
    screen.expect_all(&["interactive mode off", off]);
    screen.keys(b"i");
    screen.expect_all(&["interactive mode: keys go to the agent", on]);
    screen.keys(b"hi there\r");
    screen.expect("agent got: hi there");
    // The agent then finishes; `q` or the server going away, attach detaches either way.
    screen.keys(b"q");
    let exit = tokio::time::timeout(Duration::from_secs(10), attach.exited()).await.expect("attach did not detach");
    assert_eq!(exit, Exit::Code(0), "{}", screen.seen);
    let after = tcgetattr(screen.master.as_fd()).unwrap();
    assert_eq!(after.local_flags, before.local_flags, "the terminal is restored");
    assert_eq!(after.input_flags, before.input_flags);
}
