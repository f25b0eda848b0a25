//! Tools about the runtime itself: `ping`, `runtime_info`, `reset_runtime`,
//! `console_log`. None of them queues behind an evaluation.

use rpc_core::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::{ToolContext, ToolSpec};
use crate::errors;

pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "ping",
            description: "Check that the bridge is up and which Ruby it runs.",
            input_schema: no_arguments,
        },
        ToolSpec {
            name: "runtime_info",
            description: "Facts about the Ruby runtime: version, pid, start time, evaluations run, restarts.",
            input_schema: no_arguments,
        },
        ToolSpec {
            name: "reset_runtime",
            description: "Kill the Ruby process and start a fresh one (stopping a running evaluation). \
                          All Ruby state is lost.",
            input_schema: no_arguments,
        },
        ToolSpec {
            name: "console_log",
            description: "The last lines the runtime printed outside evaluations (warnings, \
                          background threads, start and exit notes). One reply carries at most half \
                          of SUPEX_MAX_MESSAGE, the newest lines; `left_out` counts those that did not fit.",
            input_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "lines": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 100,
                                  "description": "How many of the last lines to return."}
                    },
                    "additionalProperties": false
                })
            },
        },
    ]
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

#[derive(Serialize)]
pub struct Pong {
    success: bool,
    status: &'static str,
    version: &'static str,
    ruby_version: Option<String>,
    runtime: &'static str,
    /// Why the runtime is unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
    /// Log lines lost since start (stderr's reader not keeping up, or gone).
    log_lines_dropped: u64,
}

pub fn ping(cx: &ToolContext) -> Pong {
    let snapshot = cx.app.runtime.snapshot();
    Pong {
        success: true,
        status: "connected",
        version: env!("CARGO_PKG_VERSION"),
        ruby_version: snapshot.process.map(|p| p.ruby_version),
        runtime: snapshot.state,
        problem: snapshot.problem,
        log_lines_dropped: rpc_core::log_sink::dropped_lines(),
    }
}

#[derive(Serialize)]
pub struct Info {
    success: bool,
    /// `starting`, `running`, `unavailable` or `stopped`.
    state: &'static str,
    ruby_version: Option<String>,
    ruby_description: Option<String>,
    pid: Option<u32>,
    started_at: Option<String>,
    evals: u64,
    restarts: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

pub fn info(cx: &ToolContext) -> Info {
    let s = cx.app.runtime.snapshot();
    Info {
        success: true,
        state: s.state,
        ruby_version: s.process.as_ref().map(|p| p.ruby_version.clone()),
        ruby_description: s.process.as_ref().map(|p| p.ruby_description.clone()),
        pid: s.process.as_ref().map(|p| p.pid),
        started_at: s.process.as_ref().map(|p| humantime::format_rfc3339_seconds(p.started_at).to_string()),
        evals: s.evals,
        restarts: s.restarts,
        problem: s.problem,
    }
}

#[derive(Serialize)]
pub struct Reset {
    success: bool,
    pid: u32,
}

pub async fn reset(cx: &ToolContext) -> Result<Reset, RpcError> {
    let pid = cx.app.runtime.reset().await.map_err(|e| errors::runtime(&e))?;
    Ok(Reset { success: true, pid })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleArgs {
    #[serde(default = "default_lines")]
    lines: usize,
}

fn default_lines() -> usize {
    100
}

/// The most `console_log` returns, as its schema says.
const MAX_CONSOLE_LINES: usize = 10_000;

#[derive(Serialize)]
pub struct Console {
    success: bool,
    lines: Vec<String>,
    /// Lines asked for that did not fit in the reply (the oldest of them),
    /// and whether there were any: `log_file` has them all.
    left_out: usize,
    truncated: bool,
    log_file: Option<String>,
}

pub async fn console_log(cx: &ToolContext, args: ConsoleArgs) -> Result<Console, RpcError> {
    if !(1..=MAX_CONSOLE_LINES).contains(&args.lines) {
        return Err(RpcError::invalid_params(format!("arguments.lines: must be 1 to {MAX_CONSOLE_LINES}")));
    }
    let console = cx.app.runtime.console();
    // Half the message limit, as read_file's chunks: any Supex client reads it.
    let cap = cx.app.max_message / 2;
    // Measured before the lines are copied, so that the room is held first:
    // 32 of these for a client that never reads must not be 32 copies.
    let size = console.tail_within(args.lines, cap, false).json_bytes;
    let room = cx.peer.reserve_reply(size + 1024).await;
    let _room = room.map_err(|_| RpcError::internal("the connection closed"))?;
    let tail = console.tail_within(args.lines, cap, true);
    Ok(Console {
        success: true,
        lines: tail.lines,
        left_out: tail.left_out,
        truncated: tail.left_out > 0,
        log_file: console.path().map(|p| p.display().to_string()),
    })
}
