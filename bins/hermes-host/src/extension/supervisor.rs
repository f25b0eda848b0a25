//! The task that runs one extension: spawn, `initialize`, serve, and on an
//! exit nobody asked for, restart with backoff (1 s, 2 s, 4 s ...), until
//! three crashes within five minutes leave it `failed` until a reload.
//!
//! Hermes itself never noticed a dead extension. Here the process is waited
//! on (rpc-core's child module): the moment it exits its connection closes,
//! every request pending to it fails at once, and its state becomes `failed`.
//!
//! An `initialize` that fails (an error, a malformed result, no answer
//! within the timeout) is not restarted: the same program would fail the
//! same way. The extension is killed and stays `failed` until a reload.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc_core::child::{self, ChildCommand, ChildProcess, CrashHistory, CrashLoop, CrashPolicy, Restart};
use rpc_core::{CallError, PeerConfig, PeerHandle, Transport};
use serde_json::json;
use tokio::sync::watch;

use super::protocol::InitializeResult;
use super::{Extension, State, StopReason};
use crate::state::{ExtensionSession, Host, Readiness, TOPIC_LOG};

/// The Hermes version extensions are told (`HERMES_VERSION`, `hermesVersion`).
pub const HERMES_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const API_VERSION: &str = "1.0";

/// How long `shutdown` may take, answer and exit together, before SIGKILL.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(5);

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

/// Spawns the process, initialises it and serves it until it exits or is stopped.
async fn run_once(
    host: &Arc<Host>,
    extension: &Arc<Extension>,
    stop: &mut watch::Receiver<Option<StopReason>>,
) -> Ended {
    if stop.borrow().is_some() {
        return Ended::Stopped;
    }
    let spec = &extension.spec;
    let data_dir = host.data_dir.join("extensions").join(&spec.name);
    if let Err(e) = std::fs::create_dir_all(&data_dir) {
        tracing::warn!(extension = %spec.name, dir = %data_dir.display(), error = %e, "cannot create the extension's data directory");
    }
    let (stderr_reader, stderr_writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return Ended::Crashed(format!("cannot make a pipe: {e}")),
    };
    let mut command = ChildCommand::new(&spec.argv[0])
        .name(&spec.name)
        .args(&spec.argv[1..])
        .env("HERMES_VERSION", HERMES_VERSION)
        .env("HERMES_API_VERSION", API_VERSION)
        .env("HERMES_DATA_DIR", &data_dir)
        .stdin(child::Stdin::Piped)
        .stdout(child::Stdout::Piped)
        .stderr(child::Stderr::Fd(stderr_writer.into()));
    for (key, value) in &spec.env {
        command = command.env(key, value);
    }
    if let Some(dir) = &spec.cwd {
        command = command.current_dir(dir);
    }
    let mut process = match command.spawn() {
        Ok(process) => process,
        Err(e) => return Ended::Crashed(format!("cannot start {:?}: {e}", spec.argv[0])),
    };
    match tokio::net::unix::pipe::Receiver::from_owned_fd(stderr_reader.into()) {
        Ok(pipe) => {
            let (host, extension) = (host.clone(), extension.clone());
            tokio::spawn(super::log::read_lines(pipe, move |line| {
                let entry = extension.log.push(line);
                host.publish(
                    TOPIC_LOG,
                    json!({"extension": extension.name(), "level": entry.level, "line": entry.line}),
                );
            }));
        }
        Err(e) => tracing::warn!(extension = %spec.name, error = %e, "cannot read the extension's stderr"),
    }

    let (ready, readiness) = watch::channel(Readiness::Starting);
    let state = Arc::new(ExtensionSession { host: host.clone(), extension: extension.clone(), ready: readiness });
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
        |stdout, stdin| Transport::framed(stdout, stdin, super::wire::AsciiContentLength::new(max)),
        host.extension_router(),
        state,
        peer_config,
    );
    let (peer, _connection) = match connected {
        Ok(pair) => pair,
        Err(e) => {
            process.kill();
            return Ended::Crashed(format!("cannot talk to it: {e}"));
        }
    };
    let pid = process.pid();
    extension.started(pid, peer.clone());
    extension.log.note(&format!("started {:?} (pid {pid})", spec.argv));
    tracing::info!(extension = %spec.name, pid, "extension started");
    host.publish_state(extension);

    // initialize, unless it exits or we are told to stop first.
    let timeout = host.settings().initialize_timeout();
    let params = json!({"hermesVersion": HERMES_VERSION, "apiVersion": API_VERSION, "dataDirectory": data_dir});
    let answer = tokio::select! {
        answer = peer.request_raw("initialize", &params, Some(timeout)) => answer,
        reason = stop_requested(stop) => {
            let _ = ready.send(Readiness::Failed);
            shut_down(&peer, &process, reason, extension).await;
            return Ended::Stopped;
        }
    };
    // A timeout means it is not listening: it is killed. An error or a
    // malformed result comes from a live program, which is told why it stops.
    let failure = match answer {
        Ok(raw) => match serde_json::from_str::<InitializeResult>(raw.get()) {
            Ok(info) => {
                extension.initialized(info);
                let _ = ready.send(Readiness::Running);
                tracing::info!(extension = %spec.name, "extension running");
                extension.log.note("initialized");
                host.warn_about_shadowed_commands(extension);
                host.publish_state(extension);
                None
            }
            Err(e) => Some((format!("its initialize result is malformed: {e}"), false)),
        },
        Err(CallError::Timeout(limit)) => Some((format!("no answer to initialize within {}", humanise(limit)), true)),
        Err(CallError::Rpc(e)) => Some((format!("initialize failed: {} ({})", e.message, e.code), false)),
        Err(CallError::Malformed(e)) => Some((format!("its initialize answer is malformed: {e}"), false)),
        // Only `request_cancellable` gives up on its own; this request is not one.
        Err(CallError::Cancelled) => Some(("initialize was abandoned".into(), true)),
        Err(CallError::Disconnected) => {
            let _ = ready.send(Readiness::Failed);
            let exit = process.exited().await;
            return Ended::Crashed(format!("exited during initialize ({exit})"));
        }
    };
    if let Some((reason, kill)) = failure {
        let _ = ready.send(Readiness::Failed);
        if kill {
            tracing::warn!(extension = %spec.name, "{reason}; killed");
            process.kill();
            let _ = process.exited().await;
        } else {
            tracing::warn!(extension = %spec.name, "{reason}; stopping it");
            shut_down(&peer, &process, StopReason::Error, extension).await;
        }
        return Ended::InitFailed(reason);
    }

    tokio::select! {
        exit = process.exited() => {
            let _ = ready.send(Readiness::Failed);
            tracing::warn!(extension = %spec.name, %exit, "extension exited");
            Ended::Crashed(format!("exited unexpectedly ({exit})"))
        }
        reason = stop_requested(stop) => {
            shut_down(&peer, &process, reason, extension).await;
            let _ = ready.send(Readiness::Failed);
            Ended::Stopped
        }
    }
}

/// `shutdown {reason}`, then its exit, all within [`SHUTDOWN_LIMIT`]; then
/// SIGKILL to its process group. Closing our end after the answer gives its
/// stdin EOF, which ends a read loop that did not exit by itself.
async fn shut_down(peer: &PeerHandle, process: &ChildProcess, reason: StopReason, extension: &Extension) {
    let deadline = tokio::time::Instant::now() + SHUTDOWN_LIMIT;
    let answer = peer.request_raw("shutdown", &json!({"reason": reason.as_str()}), Some(SHUTDOWN_LIMIT)).await;
    if let Err(e) = &answer {
        tracing::info!(extension = extension.name(), error = %e, "shutdown not answered");
    }
    peer.close(1000, "shutdown");
    match tokio::time::timeout_at(deadline, process.exited()).await {
        Ok(exit) => tracing::info!(extension = extension.name(), %exit, reason = reason.as_str(), "extension stopped"),
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
