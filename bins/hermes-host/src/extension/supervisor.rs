//! The task that runs one extension: spawn, `initialize`, serve, and on an
//! exit nobody asked for, restart with backoff (1 s, 2 s, 4 s ...), until
//! three crashes within five minutes leave it `failed` until a reload.
//!
//! Hermes itself never noticed a dead extension. Here the process is waited
//! on (rpc-core's child module): the moment it exits its connection closes,
//! every request pending to it fails at once, and its state becomes `failed`.
//! The end of its connection is its end too, whether it closed its stdout or
//! the host cut it off (its input stalled): a process that runs on without
//! a connection can do nothing for anyone, so its process group is killed
//! and it is restarted as after a crash.
//!
//! An `initialize` that fails (an error, a malformed result, no answer
//! within the timeout) is not restarted: the same program would fail the
//! same way. The extension is killed and stays `failed` until a reload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::child::{self, ChildCommand, ChildProcess, CrashHistory, CrashLoop, CrashPolicy, Restart};
use rpc_core::peer::CloseReason;
use rpc_core::{CallError, PeerConfig, PeerHandle, Transport};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::events::{self, PendingEvents};
use super::log;
use super::protocol::InitializeResult;
use super::wire::AsciiContentLength;
use super::{Extension, State, StopReason};
use crate::state::{ExtensionSession, Host, Readiness, TOPIC_LOG};

/// The Hermes version extensions are told (`HERMES_VERSION`, `hermesVersion`).
pub const HERMES_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const API_VERSION: &str = "1.0";

/// How long `shutdown` may take, answer and exit together, before SIGKILL.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

/// How long the extension's own requests still running when it is stopped
/// (a dialog waiting for a person) get before they are answered
/// `shutting_down`: the grace the control socket's requests get at shutdown.
pub const REQUESTS_GRACE: Duration = rpc_core::shutdown::DEFAULT_GRACE;

/// How long after its connection ends a process may take to exit by itself
/// (its stdout usually closes as it exits) before its group is killed.
const EXIT_AFTER_EOF: Duration = Duration::from_millis(500);

fn crash_policy() -> CrashPolicy {
    CrashPolicy {
        first_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(60),
        healthy_after: Duration::from_secs(60),
        give_up: Some(CrashLoop { crashes: 3, within: Duration::from_secs(5 * 60) }),
    }
}

/// Starts the supervising task of `extension`.
pub fn start(host: Arc<Host>, extension: Arc<Extension>) {
    let stop = extension.stop.subscribe();
    let task = tokio::spawn(supervise(host, extension.clone(), stop));
    *extension.task.lock() = Some(task);
}

/// How one run of the process ended.
enum Ended {
    /// We stopped it.
    Stopped,
    /// `initialize` failed: not worth restarting.
    InitFailed(String),
    /// It exited (or could not start) on its own.
    Crashed(String),
}

async fn supervise(host: Arc<Host>, extension: Arc<Extension>, mut stop: watch::Receiver<Option<StopReason>>) {
    let mut history = CrashHistory::new(crash_policy());
    let mut first = true;
    loop {
        if !first {
            extension.restarted();
        }
        first = false;
        let started = Instant::now();
        let ended = run_once(&host, &extension, &mut stop).await;
        let state = match ended {
            Ended::Stopped => {
                extension.exited(State::Stopped);
                extension.log.note("stopped");
                host.publish_state(&extension);
                return;
            }
            Ended::InitFailed(reason) => {
                extension.log.note(&format!("failed: {reason}"));
                State::Failed(reason)
            }
            Ended::Crashed(reason) => match history.crashed(started, Instant::now()) {
                Restart::After(delay) => {
                    let note = format!("{reason}; restarting in {}", humanise(delay));
                    tracing::warn!(extension = extension.name(), "{note}");
                    extension.log.note(&note);
                    extension.exited(State::Failed(reason));
                    host.publish_state(&extension);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => continue,
                        _ = stop_requested(&mut stop) => {
                            extension.exited(State::Stopped);
                            host.publish_state(&extension);
                            return;
                        }
                    }
                }
                Restart::GiveUp => {
                    let reason = format!("{reason}; crashed 3 times within 5 minutes, not restarted until a reload");
                    tracing::error!(extension = extension.name(), "{reason}");
                    extension.log.note(&reason);
                    State::Failed(reason)
                }
            },
        };
        // Failed for good: wait for a reload or the daemon's exit.
        extension.exited(state);
        host.publish_state(&extension);
        stop_requested(&mut stop).await;
        return;
    }
}

/// Resolves with the reason once a stop is asked for (closing if the
/// extension itself is gone).
async fn stop_requested(stop: &mut watch::Receiver<Option<StopReason>>) -> StopReason {
    match stop.wait_for(Option::is_some).await {
        Ok(reason) => reason.unwrap_or(StopReason::Closing),
        Err(_) => StopReason::Closing,
    }
}

fn humanise(delay: Duration) -> String {
    format!("{:.1} s", delay.as_secs_f64())
}

/// One run of the process: spawn it, connect to it, `initialize` it and
/// serve it until it exits or is stopped.
async fn run_once(
    host: &Arc<Host>,
    extension: &Arc<Extension>,
    stop: &mut watch::Receiver<Option<StopReason>>,
) -> Ended {
    if stop.borrow().is_some() {
        return Ended::Stopped;
    }
    let data_dir = data_dir(host, extension);
    let mut run = match Run::start(host, extension, &data_dir) {
        Ok(run) => run,
        Err(ended) => return ended,
    };
    if let Err(ended) = run.initialize(&data_dir, stop).await {
        return ended;
    }
    run.serve(stop).await
}

/// `<data dir>/extensions/<name>`, its `HERMES_DATA_DIR`, made if missing
/// (one that cannot be made is the extension's problem, with a warning).
fn data_dir(host: &Host, extension: &Extension) -> PathBuf {
    let dir = host.data_dir.join("extensions").join(extension.name());
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(extension = extension.name(), dir = %dir.display(), error = %e, "cannot create the extension's data directory");
    }
    dir
}

/// A started process and its connection, from spawn to exit.
struct Run<'a> {
    host: &'a Arc<Host>,
    extension: &'a Arc<Extension>,
    process: ChildProcess,
    peer: PeerHandle,
    /// The task serving the connection, which says how it ended.
    connection: JoinHandle<CloseReason>,
    /// What the gate on its requests waits for (`methods::extension::gate`).
    ready: watch::Sender<Readiness>,
}

impl<'a> Run<'a> {
    /// Spawns the process and connects to it over its stdio; it is then
    /// `starting`, and says so to subscribers.
    fn start(host: &'a Arc<Host>, extension: &'a Arc<Extension>, data_dir: &Path) -> Result<Run<'a>, Ended> {
        let mut process = spawn(host, extension, data_dir)?;
        let (ready, readiness) = watch::channel(Readiness::Starting);
        let session = Arc::new(ExtensionSession { host: host.clone(), extension: extension.clone(), ready: readiness });
        let max = host.max_message;
        let peer_config = PeerConfig {
            // A 20 MiB setMessage must fit the backlog whole, and so must a few
            // of them; a reply of that size may wait in the outbox.
            backlog_bytes: (2 * max).max(rpc_core::peer::DEFAULT_BACKLOG_BYTES),
            write_budget: (2 * max).max(rpc_core::peer::DEFAULT_WRITE_BUDGET),
            write_stall: host.write_stall,
            ..PeerConfig::default()
        };
        let connected = child::connect(
            &mut process,
            |stdout, stdin| Transport::framed(stdout, stdin, AsciiContentLength::new(max)),
            host.extension_router(),
            session,
            peer_config,
        );
        let (peer, connection) = match connected {
            Ok(pair) => pair,
            Err(e) => {
                process.kill();
                return Err(Ended::Crashed(format!("cannot talk to it: {e}")));
            }
        };
        let pid = process.pid();
        extension.started(pid, peer.clone());
        extension.log.note(&format!("started {:?} (pid {pid})", extension.spec.argv));
        tracing::info!(extension = extension.name(), pid, "extension started");
        host.publish_state(extension);
        Ok(Run { host, extension, process, peer, connection, ready })
    }

    /// `initialize`, unless it exits or we are told to stop first. On
    /// success the extension is `running` and its requests go through.
    async fn initialize(
        &mut self,
        data_dir: &Path,
        stop: &mut watch::Receiver<Option<StopReason>>,
    ) -> Result<(), Ended> {
        let timeout = self.host.settings().initialize_timeout();
        let params = json!({"hermesVersion": HERMES_VERSION, "apiVersion": API_VERSION, "dataDirectory": data_dir});
        let answer = tokio::select! {
            answer = self.peer.request_raw("initialize", &params, Some(timeout)) => answer,
            reason = stop_requested(stop) => {
                let _ = self.ready.send(Readiness::Failed);
                self.shut_down(reason).await;
                return Err(Ended::Stopped);
            }
        };
        match handshake(answer) {
            Handshake::Done(info) => {
                self.running(*info);
                Ok(())
            }
            Handshake::Exited => {
                let _ = self.ready.send(Readiness::Failed);
                Err(Ended::Crashed(self.connection_ended("during initialize").await))
            }
            Handshake::Failed { reason, kill } => {
                let _ = self.ready.send(Readiness::Failed);
                let name = self.extension.name();
                if kill {
                    tracing::warn!(extension = name, "{reason}; killed");
                    self.process.kill();
                    let _ = self.process.exited().await;
                } else {
                    tracing::warn!(extension = name, "{reason}; stopping it");
                    self.shut_down(StopReason::Error).await;
                }
                Err(Ended::InitFailed(reason))
            }
        }
    }

    /// The extension answered `initialize`: it runs, its held requests go
    /// through, and the others learn what it declared.
    fn running(&self, info: InitializeResult) {
        let pending = PendingEvents::new();
        tokio::spawn(events::deliver(pending.clone(), self.peer.clone(), self.extension.clone()));
        self.extension.initialized(info, pending);
        let _ = self.ready.send(Readiness::Running);
        tracing::info!(extension = self.extension.name(), "extension running");
        self.extension.log.note("initialized");
        self.host.warn_about_shadowed_commands(self.extension);
        self.host.publish_state(self.extension);
    }

    /// Serves it until it exits or its connection ends (a crash either way)
    /// or we are told to stop it.
    async fn serve(mut self, stop: &mut watch::Receiver<Option<StopReason>>) -> Ended {
        tokio::select! {
            exit = self.process.exited() => {
                let _ = self.ready.send(Readiness::Failed);
                tracing::warn!(extension = self.extension.name(), %exit, "extension exited");
                Ended::Crashed(format!("exited unexpectedly ({exit})"))
            }
            () = self.peer.closed() => {
                let _ = self.ready.send(Readiness::Failed);
                Ended::Crashed(self.connection_ended("unexpectedly").await)
            }
            reason = stop_requested(stop) => {
                self.shut_down(reason).await;
                let _ = self.ready.send(Readiness::Failed);
                Ended::Stopped
            }
        }
    }

    /// Its connection ended while we did not stop it: it exits by itself
    /// (its stdout closed as it exited) or it is killed, process group and
    /// all. Why, for its failure reason.
    async fn connection_ended(&mut self, when: &str) -> String {
        let name = self.extension.name();
        if let Ok(exit) = tokio::time::timeout(EXIT_AFTER_EOF, self.process.exited()).await {
            tracing::warn!(extension = name, %exit, "extension exited");
            return format!("exited {when} ({exit})");
        }
        tracing::warn!(extension = name, "extension's connection ended while it runs; killing it");
        self.process.kill();
        let exit = self.process.exited().await;
        // Its pipes are closed now, so the connection's task has ended or soon will.
        let why = match tokio::time::timeout(EXIT_AFTER_EOF, &mut self.connection).await {
            Ok(Ok(CloseReason::Eof)) => "it closed its output".to_owned(),
            Ok(Ok(CloseReason::Failed(reason))) => reason,
            Ok(Ok(CloseReason::Closed | CloseReason::Shutdown)) => "the host closed it".to_owned(),
            Ok(Err(e)) => format!("its connection's task failed: {e}"),
            Err(_) => "it closed".to_owned(),
        };
        format!("its connection ended {when} ({why}); killed ({exit})")
    }

    /// Its requests answered first (new and held ones `shutting_down` at
    /// once, running ones after [`REQUESTS_GRACE`]), then `shutdown {reason}`
    /// and its exit, within [`SHUTDOWN_LIMIT`]; then SIGKILL to its process
    /// group. Closing our end after the answer gives its stdin EOF, which
    /// ends a read loop that did not exit by itself.
    async fn shut_down(&self, reason: StopReason) {
        let (peer, process, extension) = (&self.peer, &self.process, self.extension);
        // Requests held at the gate are answered as it sees this (after a
        // failed `initialize` they were already); the engine answers the
        // rest, and says when every answer is queued.
        self.ready.send_if_modified(|ready| {
            let held = matches!(ready, Readiness::Starting | Readiness::Running);
            if held {
                *ready = Readiness::Stopping;
            }
            held
        });
        peer.stop_serving(REQUESTS_GRACE).await;
        let deadline = tokio::time::Instant::now() + SHUTDOWN_LIMIT;
        let answer = peer.request_raw("shutdown", &json!({"reason": reason.as_str()}), Some(SHUTDOWN_LIMIT)).await;
        if let Err(e) = &answer {
            tracing::info!(extension = extension.name(), error = %e, "shutdown not answered");
        }
        peer.close(1000, "shutdown");
        match tokio::time::timeout_at(deadline, process.exited()).await {
            Ok(exit) => {
                tracing::info!(extension = extension.name(), %exit, reason = reason.as_str(), "extension stopped")
            }
            Err(_) => {
                tracing::warn!(
                    extension = extension.name(),
                    "did not exit within 5 s of shutdown; killing its process group"
                );
                extension.log.note("did not exit within 5 s of shutdown; killed");
                process.kill();
                let _ = process.exited().await;
            }
        }
    }
}

/// Starts the program with the Hermes environment in its own process group;
/// its stderr goes line by line to the extension's log and `log` subscribers.
fn spawn(host: &Arc<Host>, extension: &Arc<Extension>, data_dir: &Path) -> Result<ChildProcess, Ended> {
    let spec = &extension.spec;
    let (stderr_reader, stderr_writer) =
        std::io::pipe().map_err(|e| Ended::Crashed(format!("cannot make a pipe: {e}")))?;
    let mut command = ChildCommand::new(&spec.argv[0])
        .name(&spec.name)
        .args(&spec.argv[1..])
        .env("HERMES_VERSION", HERMES_VERSION)
        .env("HERMES_API_VERSION", API_VERSION)
        .env("HERMES_DATA_DIR", data_dir)
        .stdin(child::Stdin::Piped)
        .stdout(child::Stdout::Piped)
        .stderr(child::Stderr::Fd(stderr_writer.into()));
    for (key, value) in &spec.env {
        command = command.env(key, value);
    }
    if let Some(dir) = &spec.cwd {
        command = command.current_dir(dir);
    }
    let process = command.spawn().map_err(|e| Ended::Crashed(format!("cannot start {:?}: {e}", spec.argv[0])))?;
    match tokio::net::unix::pipe::Receiver::from_owned_fd(stderr_reader.into()) {
        Ok(pipe) => {
            let (host, extension) = (host.clone(), extension.clone());
            tokio::spawn(log::read_lines(pipe, move |line| {
                let entry = extension.log.push(line);
                host.publish(
                    TOPIC_LOG,
                    json!({"extension": extension.name(), "level": entry.level, "line": entry.line}),
                );
            }));
        }
        Err(e) => tracing::warn!(extension = %spec.name, error = %e, "cannot read the extension's stderr"),
    }
    Ok(process)
}

/// What became of `initialize`.
enum Handshake {
    Done(Box<InitializeResult>),
    /// Answered wrongly, or not at all (`kill`: it is not listening, so it
    /// is killed rather than told why it stops).
    Failed {
        reason: String,
        kill: bool,
    },
    /// The process went away before it answered.
    Exited,
}

/// Reads the answer to `initialize`. A timeout means it is not listening:
/// it is killed. An error or a malformed result comes from a live program,
/// which is told why it stops.
fn handshake(answer: Result<Box<RawValue>, CallError>) -> Handshake {
    let failed = |reason: String, kill| Handshake::Failed { reason, kill };
    match answer {
        Ok(raw) => match serde_json::from_str::<InitializeResult>(raw.get()) {
            Ok(info) => Handshake::Done(Box::new(info)),
            Err(e) => failed(format!("its initialize result is malformed: {e}"), false),
        },
        Err(CallError::Timeout(limit)) => failed(format!("no answer to initialize within {}", humanise(limit)), true),
        Err(CallError::Rpc(e)) => failed(format!("initialize failed: {} ({})", e.message, e.code), false),
        Err(CallError::Malformed(e)) => failed(format!("its initialize answer is malformed: {e}"), false),
        // Only `request_cancellable` gives up on its own; this request is not one.
        Err(CallError::Cancelled) => failed("initialize was abandoned".into(), true),
        Err(CallError::Disconnected) => Handshake::Exited,
    }
}
