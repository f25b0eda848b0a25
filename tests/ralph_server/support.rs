//! A task directory, the daemon running it, and a line client on its socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use integration_tests::Daemon;
use serde_json::{Value, json};

pub fn fake_agent() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ralph_server/fake-agent.sh").display().to_string()
}

/// A temporary root holding a task directory and a socket directory.
pub struct Task {
    pub root: tempfile::TempDir,
    pub name: String,
}

impl Task {
    /// A task with `stories` stories, each on one line (the fake agent edits them with sed).
    pub fn new(name: &str, stories: usize) -> Task {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let lines: Vec<String> = (1..=stories)
            .map(|n| {
                format!(
                    r#"  {{"id": "US-00{n}", "title": "Story {n}", "priority": {n}, "passes": false, "size": "S"}}"#
                )
            })
            .collect();
        let prd = format!(
            "{{\"project\": \"demo\", \"branchName\": \"ralph/demo\", \"team\": \"kept\", \"userStories\": [\n{}\n]}}\n",
            lines.join(",\n")
        );
        std::fs::write(dir.join("prd.json"), prd).unwrap();
        Task { root, name: name.to_owned() }
    }

    pub fn dir(&self) -> PathBuf {
        self.root.path().join(&self.name)
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.root.path().join("sockets")
    }

    pub fn socket(&self) -> PathBuf {
        self.socket_dir().join(format!("{}.sock", self.name))
    }

    pub fn mode(&self, mode: &str) {
        std::fs::write(self.dir().join("fake-mode"), format!("{mode}\n")).unwrap();
    }

    /// Holds the agent at its start until [`Task::release`] (to subscribe first).
    pub fn hold(&self) {
        std::fs::write(self.dir().join("hold"), "").unwrap();
    }

    pub fn release(&self) {
        std::fs::remove_file(self.dir().join("hold")).unwrap();
    }

    pub fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir().join(file)).unwrap_or_default()
    }

    pub fn env(&self) -> Vec<(String, String)> {
        vec![("RALPH_SOCKET_DIR".into(), self.socket_dir().display().to_string())]
    }

    /// `ralph-server run` on this task with the fake agent and `extra` flags.
    pub fn run(&self, extra: &[&str]) -> Daemon {
        self.start(&self.dir(), &fake_agent(), extra)
    }

    /// `ralph-server run DIR --agent-cmd AGENT_CMD` with `extra` flags: the
    /// task's directory under another spelling, or another agent command.
    pub fn start(&self, dir: &Path, agent_cmd: &str, extra: &[&str]) -> Daemon {
        let dir = dir.display().to_string();
        let mut args = vec!["run", dir.as_str(), "--agent-cmd", agent_cmd, "--retry-delay", "0"];
        args.extend_from_slice(extra);
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Daemon::start("ralph-server", &args, &env)
    }

    /// The state file as JSON (`null` when there is none).
    pub fn state(&self) -> Value {
        serde_json::from_str(&self.read(".ralph/state.json")).unwrap_or(Value::Null)
    }

    /// The injected prompts waiting in `.ralph/injected.jsonl`, in order.
    pub fn injected(&self) -> Vec<String> {
        let journal = self.read(".ralph/injected.jsonl");
        let line = |l: &str| serde_json::from_str::<Value>(l).unwrap()["prompt"].as_str().unwrap().to_owned();
        journal.lines().map(line).collect()
    }

    /// Waits for the control socket to accept, or panics with the daemon's log.
    pub fn connect(&self, daemon: &Daemon) -> Client {
        self.connect_to(daemon, &self.name)
    }

    /// [`Task::connect`] for a run under another `--name`.
    pub fn connect_to(&self, daemon: &Daemon, name: &str) -> Client {
        let socket = self.socket_dir().join(format!("{name}.sock"));
        let mut stream = None;
        let up = integration_tests::eventually(Duration::from_secs(20), || {
            stream = UnixStream::connect(&socket).ok();
            stream.is_some()
        });
        assert!(up, "no socket at {}:\n{}", socket.display(), daemon.stderr());
        Client::new(stream.expect("connected"))
    }
}

/// An NDJSON client that keeps events apart from replies.
pub struct Client {
    pub reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    pub events: Vec<Value>,
    /// The agent's output lines so far, each put together from its pieces:
    /// a line comes in `partial` pieces when the agent pauses in it, or when
    /// the daemon happens to read it in two (the terminal writes a line's
    /// text and its `\r\n` separately) and is busy for 50 ms in between.
    pub lines: Vec<String>,
    partial: String,
}

impl Client {
    pub fn new(stream: UnixStream) -> Client {
        // Only a bound on a failure: 20 s was seen to run out on a machine
        // loaded by other builds (the daemon syncs its files on every change).
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Client {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
            next_id: 1,
            events: Vec::new(),
            lines: Vec::new(),
            partial: String::new(),
        }
    }

    /// Keeps an event; returns the output line it completes, if any.
    fn keep(&mut self, event: Value) -> Option<String> {
        let mut completed = None;
        if let Some(piece) = output_line(&event) {
            self.partial.push_str(piece);
            if event["params"]["data"]["partial"] != true {
                let line = std::mem::take(&mut self.partial);
                let line = line.strip_suffix('\r').map(str::to_owned).unwrap_or(line);
                self.lines.push(line.clone());
                completed = Some(line);
            }
        }
        self.events.push(event);
        completed
    }

    pub fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.writer.write_all(&line).unwrap();
    }

    /// The next message, `None` at EOF.
    pub fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))),
            Err(e) => {
                panic!("reading: {e}; the last events: {:?}", &self.events[self.events.len().saturating_sub(5)..])
            }
        }
    }

    /// Calls `method`; events that arrive meanwhile are kept in `events`.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.recv().expect("connection closed before the reply");
            if message["id"] == id {
                return message;
            }
            self.keep(message);
        }
    }

    /// Reads events until `done` holds for one of them (it is returned) or EOF (`None`).
    pub fn until(&mut self, mut done: impl FnMut(&Value) -> bool) -> Option<Value> {
        if let Some(found) = self.events.iter().find(|e| done(e)) {
            return Some(found.clone());
        }
        while let Some(message) = self.recv() {
            self.keep(message.clone());
            if done(&message) {
                return Some(message);
            }
        }
        None
    }

    /// Reads events until an output line (whole, see [`Client::lines`]) for
    /// which `done` holds: returns it, or `None` at EOF.
    pub fn until_line(&mut self, mut done: impl FnMut(&str) -> bool) -> Option<String> {
        if let Some(found) = self.lines.iter().find(|l| done(l)) {
            return Some(found.clone());
        }
        while let Some(message) = self.recv() {
            if let Some(line) = self.keep(message)
                && done(&line)
            {
                return Some(line);
            }
        }
        None
    }
}

pub fn event_type(event: &Value) -> &str {
    event["params"]["type"].as_str().unwrap_or_default()
}

pub fn is_status(event: &Value, status: &str) -> bool {
    event_type(event) == "state_change" && event["params"]["data"]["status"] == status
}

/// The piece of output an event carries (see [`Client::lines`] for whole lines).
pub fn output_line(event: &Value) -> Option<&str> {
    (event_type(event) == "output").then(|| event["params"]["data"]["line"].as_str().unwrap_or_default())
}
