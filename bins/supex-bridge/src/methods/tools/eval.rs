//! `eval_ruby` and `eval_ruby_file`: code through the runtime's FIFO queue,
//! which a connection enters one evaluation at a time, with room for its
//! reply ([`crate::state::QueueSeat`]).
//!
//! Each evaluation gets a fresh binding, so local variables do not carry over,
//! while globals, constants, required files and defined methods do (as
//! upstream). What the code prints is returned as `output`, also when it
//! raises (then in the error's `data.output`).

use std::io::Read;
use std::time::Duration;

use rpc_core::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::context::{ToolContext, ToolSpec, blocking};
use super::files;
use crate::errors;
use crate::paths::AllowedPath;
use crate::runtime::{Eval, Evaluated, Scope, Show};

pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "eval_ruby",
            description: "Evaluate Ruby code in the live runtime and return `value.to_s` and what it printed. \
                          Each call gets a fresh binding: local variables do not carry over; globals, \
                          constants, methods and required files do.",
            input_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "code": {"type": "string", "description": "Ruby source to evaluate."},
                        "timeout": {"type": "number", "exclusiveMinimum": 0,
                                    "description": "Seconds this evaluation may run (at most the server's SUPEX_EVAL_TIMEOUT). \
                                                    On timeout the runtime is restarted and its state lost."}
                    },
                    "required": ["code"],
                    "additionalProperties": false
                })
            },
        },
        ToolSpec {
            name: "eval_ruby_file",
            description: "Evaluate a Ruby file (inside the allowed roots) at the top level of the live runtime.",
            input_schema: || {
                json!({
                    "type": "object",
                    "properties": {
                        "file_path": {"type": "string",
                                      "description": "Path of the .rb file; relative paths start at the workspace or project root."},
                        "timeout": {"type": "number", "exclusiveMinimum": 0,
                                    "description": "Seconds the evaluation may run (at most SUPEX_EVAL_TIMEOUT)."}
                    },
                    "required": ["file_path"],
                    "additionalProperties": false
                })
            },
        },
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalArgs {
    code: String,
    #[serde(default)]
    timeout: Option<f64>,
}

#[derive(Serialize)]
pub struct EvalResult {
    success: bool,
    result: String,
    output: String,
}

pub async fn eval_ruby(cx: &ToolContext, args: EvalArgs) -> Result<EvalResult, RpcError> {
    let timeout = timeout(cx, args.timeout)?;
    let evaluated = run(cx, args.code, "(eval)".into(), timeout).await?;
    let (result, output) = value(evaluated)?;
    Ok(EvalResult { success: true, result, output })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileArgs {
    file_path: String,
    #[serde(default)]
    timeout: Option<f64>,
}

#[derive(Serialize)]
pub struct FileResult {
    success: bool,
    result: String,
    file_path: String,
    file_name: String,
    output: String,
}

pub async fn eval_ruby_file(cx: &ToolContext, args: FileArgs) -> Result<FileResult, RpcError> {
    let timeout = timeout(cx, args.timeout)?;
    let given = args.file_path;
    let policy_app = cx.app.clone();
    let workspace = cx.workspace.clone();
    let max = cx.app.max_message;
    // The daemon reads the file (after the path check) and hands Ruby its
    // source, so the check and the read concern the same file.
    let (path, source) = blocking(move || {
        let path = files::checked(&policy_app, &given, workspace.as_deref())?;
        let source = read_source(&given, &path, max)?;
        Ok((path, source))
    })
    .await?;
    let path = path.resolved();
    let file_path = path.display().to_string();
    let evaluated = run(cx, source, file_path.clone(), timeout).await?;
    let (result, output) = value(evaluated)?;
    Ok(FileResult {
        success: true,
        result,
        file_name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        file_path,
        output,
    })
}

fn read_source(given: &str, path: &AllowedPath, max: usize) -> Result<String, RpcError> {
    let fail = |e: std::io::Error| files::io_error("read", given, path, e);
    let root = path.open_root().map_err(fail)?;
    let file = files::open_for_reading(&root, path).map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    let shown = path.resolved().display();
    if !meta.is_file() {
        return Err(RpcError::invalid_params(format!("file_path: {shown} is not a regular file")));
    }
    let too_big = |size: u64| {
        RpcError::invalid_params(format!("file_path: {shown} is {size} bytes, more than SUPEX_MAX_MESSAGE ({max})"))
    };
    if meta.len() > max as u64 {
        return Err(too_big(meta.len()));
    }
    // The file may grow between the stat and the read: never more than `max`.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max as u64 + 1).read_to_end(&mut bytes).map_err(fail)?;
    if bytes.len() > max {
        return Err(too_big(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| RpcError::invalid_params(format!("file_path: {shown} is not UTF-8 text")))
}

/// The timeout of one call: the server's limit, or a shorter one it asked for.
fn timeout(cx: &ToolContext, asked: Option<f64>) -> Result<Duration, RpcError> {
    let limit = cx.app.eval_timeout;
    match asked {
        None => Ok(limit),
        Some(secs) if secs.is_finite() && secs > 0.0 => {
            Ok(Duration::try_from_secs_f64(secs).map_or(limit, |asked| asked.min(limit)))
        }
        Some(_) => Err(RpcError::invalid_params("arguments.timeout: must be a positive number of seconds")),
    }
}

async fn run(cx: &ToolContext, code: String, file: String, timeout: Duration) -> Result<Evaluated, RpcError> {
    let _seated = cx.conn.seat.take(&cx.peer).await?;
    cx.app
        .runtime
        .eval(Eval { code, scope: Scope::Fresh, file: Some(file), show: Show::ToS, timeout })
        .await
        .map_err(|e| errors::runtime(&e))
}

/// The value, or the exception as a -32000 error that keeps the output.
fn value(evaluated: Evaluated) -> Result<(String, String), RpcError> {
    match evaluated.result {
        Ok(value) => Ok((value, evaluated.output)),
        Err(exception) => Err(errors::ruby_exception(&exception, &evaluated.output)),
    }
}
