//! The bridge's tools, behind its `tools/list` (each with a JSON Schema) and
//! `tools/call` methods: this file is the tool table, every tool by name in
//! one place.
//!
//! One file per group: [`eval`] runs Ruby (through the FIFO queue), [`files`]
//! touches the file system under the path policy, [`runtime`] reports on and
//! manages the runtime without waiting for it; [`context`] is what they all
//! run with.
//!
//! The tools are methods in all but name (the legacy dialect calls them as
//! commands, the MCP front offers them as they are), so they live here with
//! the other methods rather than beside the runtime they use.

mod context;
mod eval;
pub mod files;
mod runtime;

use std::sync::Arc;

use rpc_core::{Ctx, RpcError};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use context::{ToolContext, ToolSpec};

use crate::state::{App, BridgeConn};

/// Every tool, in the order `tools/list` shows them.
fn specs() -> Vec<ToolSpec> {
    let mut all = runtime::specs();
    all.splice(1..1, eval::specs());
    all.splice(3..3, files::specs());
    all
}

pub fn list() -> Value {
    let tools: Vec<Value> = specs()
        .into_iter()
        .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": (t.input_schema)()}))
        .collect();
    json!({ "tools": tools })
}

#[derive(Deserialize)]
pub struct ToolCall {
    name: String,
    #[serde(default)]
    arguments: Option<Box<RawValue>>,
}

pub async fn call(app: Arc<App>, cx: Ctx<BridgeConn>, call: ToolCall) -> Result<Box<RawValue>, RpcError> {
    let cx = ToolContext { app, peer: cx.peer.clone(), conn: cx.state.clone(), workspace: cx.state.workspace() };
    let args = call.arguments.as_deref();
    match call.name.as_str() {
        "ping" => reply(runtime::ping(&cx)),
        "runtime_info" => reply(runtime::info(&cx)),
        "reset_runtime" => reply(runtime::reset(&cx).await?),
        "console_log" => reply(runtime::console_log(&cx, parse(args)?).await?),
        "eval_ruby" => reply(eval::eval_ruby(&cx, parse(args)?).await?),
        "eval_ruby_file" => reply(eval::eval_ruby_file(&cx, parse(args)?).await?),
        "read_file" => reply(files::read_file(&cx, parse(args)?).await?),
        "write_file" => reply(files::write_file(&cx, parse(args)?).await?),
        "list_dir" => reply(files::list_dir(&cx, parse(args)?).await?),
        other => {
            let known: Vec<&str> = specs().iter().map(|t| t.name).collect();
            Err(RpcError::invalid_params(format!("Unknown tool: {other}")).with_data(json!({ "tools": known })))
        }
    }
}

/// Parses a tool's arguments; errors name the field (`arguments.code: ...`).
fn parse<T: DeserializeOwned>(args: Option<&RawValue>) -> Result<T, RpcError> {
    rpc_core::router::parse_params_at("arguments", args)
}

fn reply<T: Serialize>(result: T) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(&result).map_err(|e| RpcError::internal(format!("result did not serialise: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_listed_once_with_an_object_schema() {
        let names: Vec<&str> = specs().iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "ping",
                "eval_ruby",
                "eval_ruby_file",
                "read_file",
                "write_file",
                "list_dir",
                "runtime_info",
                "reset_runtime",
                "console_log"
            ]
        );
        for spec in specs() {
            let schema = (spec.input_schema)();
            assert_eq!(schema["type"], "object", "{}", spec.name);
            assert_eq!(schema["additionalProperties"], false, "{}", spec.name);
            for required in schema["required"].as_array().into_iter().flatten() {
                let field = required.as_str().unwrap();
                assert!(schema["properties"].get(field).is_some(), "{}: {field}", spec.name);
            }
        }
    }

    #[test]
    fn argument_errors_name_the_field() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Args {
            code: String,
        }
        let raw = RawValue::from_string(r#"{"code": 5}"#.into()).unwrap();
        let err = parse::<Args>(Some(&raw)).unwrap_err();
        assert!(err.message.contains("arguments.code"), "{}", err.message);
        let err = parse::<Args>(None).unwrap_err();
        assert!(err.message.contains("arguments: missing field `code`"), "{}", err.message);
    }
}
