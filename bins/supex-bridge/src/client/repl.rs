//! `supex-bridge repl`: an interactive Ruby console on the REPL server.
//!
//! Line editing and history (in the data directory) come from rustyline. A
//! line that is not a complete expression yet (the server's `complete` says
//! so) gets a continuation prompt, and the whole expression becomes one
//! history entry.
//!
//! With no server to talk to, it says so at once and how to start one; then
//! a person at a terminal gets [`START_WAIT`] to start it, while input from a
//! pipe or file ends the command with exit 1 (nothing in it could run). When
//! the server goes away mid-session the client reconnects with backoff; an
//! evaluation that was cut off is not sent again, since it may already have
//! run.
//!
//! Lines typed during an evaluation or pasted several at once reach the
//! editor in one read; rustyline keeps what it read past the first line for
//! the next `readline` only with its `buffer-redux` feature (without it they
//! were dropped), which the workspace turns on.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rpc_core::{CallError, PeerHandle};
use rustyline::error::ReadlineError;
use serde_json::{Value, json};

use super::connection::{Server, address, connect, describe, request};
use crate::config::ReplArgs;

const PROMPT: &str = "supex> ";
const CONTINUATION: &str = "  ...> ";
/// How long a person at a terminal gets to start a server that is not up.
const START_WAIT: Duration = Duration::from_secs(30);
/// Reconnection attempts after the server went away mid-session, with
/// doubling delays up to 2 s (about 11 s in all: a service restart).
const RECONNECT_ATTEMPTS: u32 = 10;

pub fn run(args: ReplArgs) -> ExitCode {
    rpc_core::cli::run_client(console(args))
}

/// Connects, then reads, evaluates and prints until end of input or `exit`.
/// Reading a line blocks the client's one thread, on purpose: while a person
/// types there is nothing else to do, and the connection is served again at
/// the next request.
async fn console(args: ReplArgs) -> Result<ExitCode, String> {
    let interactive = std::io::stdin().is_terminal();
    let mut session = Session { addr: address(&args.host, args.port), token: args.auth.auth_token.clone(), peer: None };
    session.connect_at_start(interactive).await?;
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| format!("cannot set up line editing: {e}"))?;
    let history = args.history.or_else(|| dirs::data_dir().map(|d| d.join("supex-bridge").join("repl_history")));
    if let Some(path) = &history {
        load_history(&mut editor, path);
    }
    let code = read_eval_print(&mut editor, &mut session, interactive).await;
    if let Some(path) = &history {
        save_history(&mut editor, path);
    }
    code
}

/// The loop: a line that does not complete an expression waits for the
/// next; a complete one is evaluated and becomes one history entry.
async fn read_eval_print(
    editor: &mut rustyline::DefaultEditor,
    session: &mut Session,
    interactive: bool,
) -> Result<ExitCode, String> {
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() { PROMPT } else { CONTINUATION };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(ReadlineError::Eof) => return Ok(ExitCode::SUCCESS),
            Err(e) => return Err(e.to_string()),
        };
        if buffer.is_empty() && matches!(line.trim(), "exit" | "quit") {
            return Ok(ExitCode::SUCCESS);
        }
        buffer.push_str(&line);
        buffer.push('\n');
        if buffer.trim().is_empty() {
            buffer.clear();
            continue;
        }
        let complete = session.complete(&buffer).await;
        if matches!(complete, Ok(false)) {
            continue;
        }
        let _ = editor.add_history_entry(buffer.trim_end());
        let evaluated = match complete {
            Err(gone @ SessionError::Gone(_)) => Err(gone),
            // Complete, or cannot tell: the evaluation says what is wrong.
            _ => session.eval(&buffer).await,
        };
        match evaluated {
            Ok(output) => print!("{output}"),
            // Piped input cannot wait for someone to restart the server.
            Err(SessionError::Gone(e)) if !interactive => return Err(e),
            Err(e) => eprintln!("{}", e.message()),
        }
        buffer.clear();
    }
}

fn load_history(editor: &mut rustyline::DefaultEditor, path: &Path) {
    // A first run has no history yet; anything else is worth a word.
    if let Err(e) = editor.load_history(path)
        && path.exists()
    {
        eprintln!("supex-bridge repl: cannot read history {}: {e}", path.display());
    }
}

fn save_history(editor: &mut rustyline::DefaultEditor, path: &Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = editor.save_history(path) {
        eprintln!("supex-bridge repl: cannot save history {}: {e}", path.display());
    }
}

/// The connection to the REPL server, re-made when it drops.
struct Session {
    addr: String,
    token: Option<String>,
    peer: Option<PeerHandle>,
}

impl Session {
    /// The first connection. Nothing listening: said at once, with how to
    /// start the daemon; then waited for while a person can start it.
    async fn connect_at_start(&mut self, interactive: bool) -> Result<(), String> {
        let deadline = Instant::now() + START_WAIT;
        let mut waiting = false;
        loop {
            match self.connect_once().await {
                Ok(peer) => {
                    if waiting {
                        eprintln!("connected to {}", self.addr);
                    }
                    self.peer = Some(peer);
                    return Ok(());
                }
                Err(Fatal(message)) => return Err(message),
                Err(Retry(message)) if !interactive => return Err(message),
                Err(Retry(message)) if Instant::now() >= deadline => {
                    return Err(format!("{message}\ngave up after waiting {} s", START_WAIT.as_secs()));
                }
                Err(Retry(message)) => {
                    if !waiting {
                        eprintln!(
                            "supex-bridge repl: {message}\nwaiting up to {} s for it (Ctrl-C to give up)...",
                            START_WAIT.as_secs()
                        );
                        waiting = true;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// The connection, re-made with backoff if it dropped.
    async fn ensure_connected(&mut self) -> Result<&PeerHandle, SessionError> {
        if self.peer.as_ref().is_some_and(|p| !p.is_closed()) {
            return Ok(self.peer.as_ref().expect("checked above"));
        }
        self.peer = None;
        let mut delay = Duration::from_millis(100);
        let mut last_error = String::new();
        for attempt in 0..RECONNECT_ATTEMPTS {
            if attempt == 1 {
                eprintln!("reconnecting to {} ({last_error})...", self.addr);
            }
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            match self.connect_once().await {
                Ok(peer) => {
                    self.peer = Some(peer);
                    return Ok(self.peer.as_ref().expect("just set"));
                }
                // A refused token will not get better by retrying.
                Err(Fatal(message)) => return Err(SessionError::Failed(message)),
                Err(Retry(message)) => last_error = message,
            }
        }
        Err(SessionError::Gone(format!("lost the REPL server: {last_error}")))
    }

    async fn connect_once(&self) -> Result<PeerHandle, ConnectError> {
        let peer = connect(Server::Repl, &self.addr, Duration::from_secs(5)).await.map_err(Retry)?;
        let mut hello = json!({
            "name": "supex-bridge-repl",
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
        });
        if let Some(token) = &self.token {
            hello["token"] = json!(token);
        }
        match request(&peer, "hello", &hello, Duration::from_secs(10)).await {
            Ok(_) => Ok(peer),
            Err(e @ CallError::Rpc(_)) => Err(Fatal(format!("hello refused: {}", describe(&e)))),
            Err(e) => Err(Retry(e.to_string())),
        }
    }

    /// Whether the code is complete; asked again after a reconnection, since
    /// asking twice is harmless.
    async fn complete(&mut self, code: &str) -> Result<bool, SessionError> {
        for _ in 0..2 {
            let peer = self.ensure_connected().await?.clone();
            match request(&peer, "complete", &json!({"code": code}), Duration::from_secs(10)).await {
                Ok(reply) => return Ok(reply["complete"].as_bool().unwrap_or(true)),
                Err(CallError::Disconnected) => self.peer = None,
                Err(e) => return Err(SessionError::Failed(describe(&e))),
            }
        }
        Err(SessionError::Failed("the connection keeps dropping".into()))
    }

    async fn eval(&mut self, code: &str) -> Result<String, SessionError> {
        let peer = self.ensure_connected().await?.clone();
        // No client-side timeout: the server enforces SUPEX_EVAL_TIMEOUT.
        let wait = Duration::from_secs(24 * 3600);
        match request(&peer, "eval", &json!({"code": code}), wait).await {
            Ok(reply) => {
                Ok(reply["output"].as_str().map_or_else(|| format!("{}\n", Value::to_string(&reply)), str::to_owned))
            }
            Err(CallError::Disconnected) => {
                self.peer = None;
                Err(SessionError::Failed(
                    "the connection dropped during the evaluation; it may or may not have run".into(),
                ))
            }
            Err(e) => Err(SessionError::Failed(describe(&e))),
        }
    }
}

enum ConnectError {
    Retry(String),
    Fatal(String),
}
use ConnectError::{Fatal, Retry};

/// Why a request of the session failed.
enum SessionError {
    /// The server is gone and did not come back.
    Gone(String),
    /// This request failed; the next one may not.
    Failed(String),
}

impl SessionError {
    fn message(&self) -> &str {
        match self {
            SessionError::Gone(message) | SessionError::Failed(message) => message,
        }
    }
}
