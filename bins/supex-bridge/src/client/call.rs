//! `supex-bridge call TOOL [--arg key=value ...] [--json '{...}']`: connects to
//! the bridge, says hello, calls the tool, prints the result as JSON. Exit 1
//! with the error on stderr when anything fails.
//!
//! A TOOL containing `/` is a method called as it is (`call tools/list`).

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::connection::{Server, address, connect, describe, pretty, request};
use crate::config::CallArgs;

pub fn run(args: CallArgs) -> ExitCode {
    rpc_core::cli::run_client(async {
        let result = call(args).await?;
        println!("{}", pretty(&result));
        Ok::<_, String>(ExitCode::SUCCESS)
    })
}

async fn call(args: CallArgs) -> Result<Value, String> {
    let mut arguments = match &args.json {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("--json must be a JSON object".into()),
            Err(e) => return Err(format!("--json is not JSON: {e}")),
        },
        None => Map::new(),
    };
    let mut pairs = Vec::new();
    for arg in &args.args {
        let (key, raw) = arg
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--arg {arg:?}: expected key=value"))?;
        pairs.push((key.to_owned(), raw.to_owned()));
    }

    let addr = address(&args.bridge.host, args.bridge.port);
    let peer = connect(Server::Bridge, &addr, Duration::from_secs(10)).await?;
    let short = Duration::from_secs(10);
    let mut hello = json!({
        "name": "supex-bridge-cli",
        "version": env!("CARGO_PKG_VERSION"),
        "agent": "cli",
        "pid": std::process::id(),
    });
    if let Some(token) = &args.bridge.auth.auth_token {
        hello["token"] = json!(token);
    }
    if let Some(dir) = &args.workspace {
        let dir = std::path::absolute(dir).map_err(|e| format!("--workspace: {e}"))?;
        hello["workspace"] = json!(dir.to_string_lossy());
    }
    request(&peer, "hello", &hello, short).await.map_err(|e| format!("hello failed: {}", describe(&e)))?;

    if !pairs.is_empty() {
        let string_fields = string_fields(&peer, &args.tool).await;
        for (key, raw) in pairs {
            let value = if string_fields.contains(&key) {
                Value::String(raw)
            } else {
                serde_json::from_str(&raw).unwrap_or(Value::String(raw))
            };
            arguments.insert(key, value);
        }
    }
    let (method, params) = if args.tool.contains('/') {
        (args.tool.as_str(), Value::Object(arguments))
    } else {
        ("tools/call", json!({"name": args.tool, "arguments": Value::Object(arguments)}))
    };
    request(&peer, method, &params, args.timeout).await.map_err(|e| describe(&e))
}

/// The arguments of `tool` whose schema says string: `--arg code=42` means the
/// Ruby code `42`, not the number.
async fn string_fields(peer: &rpc_core::PeerHandle, tool: &str) -> Vec<String> {
    let Ok(list) = request(peer, "tools/list", &json!({}), Duration::from_secs(10)).await else {
        return Vec::new();
    };
    list["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["name"] == tool)
        .flat_map(|t| t["inputSchema"]["properties"].as_object().cloned())
        .flatten()
        .filter(|(_, schema)| schema["type"] == "string")
        .map(|(name, _)| name)
        .collect()
}
