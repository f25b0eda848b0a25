//! `hermes-host mcp`: a Model Context Protocol server on stdio in front of
//! the running host. It is a client of the host's control socket (the one
//! `ctl` uses, same `--socket`/`HERMES_HOST_SOCKET`), so an agent does what
//! `ctl` does, through the same methods, and nothing more.
//!
//! Each tool is one control method. The held message is also two resources
//! (HL7 text and the JSON tree); the connection subscribes to the host's
//! `message_changed` events and turns each into `resources/updated`. A
//! background task keeps that connection open between tool calls and makes a
//! new one (subscribing again) when the host comes back after a restart.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_front::{
    CallToolResult, Caller, Change, Changes, Door, Failure, JsonObject, Link, McpError, ServerName, Tool, Upstream,
};
use rpc_core::{Ctx, PeerHandle, Router, RpcError, Transport};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::config::{McpArgs, client_socket};

/// The message as HL7 text, one segment per line.
pub const HL7_URI: &str = "hermes://message.hl7";
/// The message as the JSON tree of `message/get {format: "json"}`.
pub const JSON_URI: &str = "hermes://message.json";

/// The longest wait for the socket and the subscription when connecting
/// (shorter when `--timeout` is).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause between attempts to reach a host that is down.
const RETRY: Duration = Duration::from_secs(1);

/// Serves MCP on stdio until the agent closes it.
pub async fn run(args: McpArgs) -> Result<ExitCode, String> {
    let changes = Changes::new();
    let connect_timeout = CONNECT_TIMEOUT.min(args.timeout);
    let socket = HostSocket::new(client_socket(args.socket), connect_timeout, changes.clone())?;
    let door = Arc::new(HostDoor { link: Link::new(socket), timeout: args.timeout, changes });
    // Holds the connection while the server runs, so the host's change
    // events reach the agent between tool calls too.
    let (keeper, stop) = (door.clone(), mcp_front::CancellationToken::new());
    let stopped = stop.clone();
    tokio::spawn(async move {
        mcp_front::keep_connected(&keeper.link, &stopped, RETRY, |peer| async move { peer.closed().await }).await
    });
    let served = mcp_front::serve_stdio(door).await;
    stop.cancel();
    served.map(|()| ExitCode::SUCCESS)
}

/// The host's control socket as the agent's upstream: connect, then
/// subscribe to `message_changed`.
struct HostSocket {
    path: PathBuf,
    timeout: Duration,
    /// Handles the host's event notifications on every connection.
    events: Arc<Router<Changes>>,
    changes: Changes,
    /// Whether a connection was made before: a new one may face a restarted
    /// host holding another message.
    connected_before: AtomicBool,
}

impl HostSocket {
    fn new(path: PathBuf, timeout: Duration, changes: Changes) -> Result<HostSocket, String> {
        let events = Router::new()
            .method("message_changed", message_changed)
            .method("missed", missed)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(HostSocket { path, timeout, events, changes, connected_before: AtomicBool::new(false) })
    }
}

/// Both resources change together: they are one message.
fn announce(changes: &Changes) {
    changes.send(Change::Resource(HL7_URI.into()));
    changes.send(Change::Resource(JSON_URI.into()));
}

/// `message_changed {change: opened|edited|saved, ...}`. A save changes the
/// file, not the text the resources show.
fn message_changed(ctx: Ctx<Changes>, params: Value) -> std::future::Ready<Result<(), RpcError>> {
    if params["change"] != "saved" {
        announce(&ctx.state);
    }
    std::future::ready(Ok(()))
}

/// Events were lost while this connection lagged: any of them may have been a change.
fn missed(ctx: Ctx<Changes>, _: Value) -> std::future::Ready<Result<(), RpcError>> {
    announce(&ctx.state);
    std::future::ready(Ok(()))
}

impl Upstream for HostSocket {
    async fn connect(&self) -> Result<PeerHandle, String> {
        let unreachable = |why: String| {
            format!(
                "hermes-host is not reachable at {}: {why}. Start it with `hermes-host serve` (or point \
                 --socket / HERMES_HOST_SOCKET at its control socket).",
                self.path.display()
            )
        };
        let stream = match tokio::time::timeout(self.timeout, tokio::net::UnixStream::connect(&self.path)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => return Err(unreachable(format!("no connection within {:?}", self.timeout))),
        };
        let (read, write) = stream.into_split();
        let transport = Transport::ndjson(read, write, rpc_core::codec::DEFAULT_MAX_MESSAGE);
        let peer = rpc_core::client::spawn(transport, self.events.clone(), self.changes.clone());
        let subscribed =
            peer.request_raw("subscribe", &json!({"events": ["message_changed"]}), Some(self.timeout)).await;
        if let Err(e) = subscribed {
            peer.close(1000, "subscribe failed");
            return Err(format!(
                "hermes-host at {} took the connection but did not subscribe it to its changes: {e}",
                self.path.display()
            ));
        }
        if self.connected_before.swap(true, Ordering::Relaxed) {
            announce(&self.changes);
        }
        Ok(peer)
    }
}

struct HostDoor {
    link: Link<HostSocket>,
    timeout: Duration,
    changes: Changes,
}

const FORMATS: [&str; 4] = ["hl7", "json", "yaml", "toml"];

/// Every tool, in the order they are listed: the message's, then the extensions'.
fn tools() -> Vec<Tool> {
    let mut tools = message_tools();
    tools.extend(extension_tools());
    tools
}

/// The message: open, get, set, patch, save.
fn message_tools() -> Vec<Tool> {
    let format = json!({"type": "string", "enum": FORMATS, "default": "hl7",
        "description": "hl7: the text, one segment per line; json, yaml, toml: the same tree of segments and 1-based fields"});
    let patch = patch_schema();
    vec![
        mcp_front::tool(
            "open_message",
            "Open a message, replacing the one held: a file (`path`; relative to this server's working \
             directory), or text (`message`, in `format`) as a new message not saved anywhere yet, or with \
             neither a new message holding only an MSH header. Extensions are told it was opened.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "an HL7 v2 file to open"},
                "message": {"type": "string", "description": "the message itself, instead of a file"},
                "format": format,
            }}),
        ),
        mcp_front::tool(
            "get_message",
            "The message in a format; also whether and where it is saved.",
            json!({"type": "object", "properties": {"format": format}}),
        ),
        mcp_front::tool(
            "set_message",
            "Replace the whole message with `message` (in `format`); it keeps its file. Extensions hear \
             message/changed. Prefer patch_message for a few fields.",
            json!({"type": "object", "properties": {
                "message": {"type": "string"},
                "format": format,
            }, "required": ["message"]}),
        ),
        mcp_front::tool(
            "patch_message",
            "Change parts of the message: patches apply in order; a bad one is reported (this call is then an \
             error listing it) and the others still apply.",
            json!({"type": "object", "properties": {
                "patches": {"type": "array", "items": patch, "minItems": 1}
            }, "required": ["patches"]}),
        ),
        mcp_front::tool(
            "save_message",
            "Save the message atomically to its file, or to `path` (then that becomes its file).",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        ),
    ]
}

/// One patch of `patch_message`, as `message/patch` takes it.
fn patch_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "HL7 location, 1-based: PID.5, PID.5.1, PID.5.1.2, OBX[2].5 (second OBX), PID.3[2].1 (second repetition), or a segment (NTE, OBX[2]) with create/remove"},
            "value": {"type": ["string", "null"], "description": "the value of one leaf; delimiters in it are escaped; missing or null clears"},
            "create": {"type": "boolean", "description": "on a segment path: add the segment"},
            "remove": {"type": "boolean", "description": "on a segment path: delete the segment; on a field path: clear it"}
        },
        "required": ["path"]
    })
}

/// The extensions: list them, run a command, read their logs, their schemas.
fn extension_tools() -> Vec<Tool> {
    vec![
        mcp_front::tool(
            "list_extensions",
            "The extensions: name, state (starting, running, failed with a reason, stopped), version, the \
             commands they offer, toolbar buttons, pid and restarts.",
            json!({"type": "object", "properties": {}}),
        ),
        mcp_front::tool(
            "run_command",
            "Run an extension command (one listed by list_extensions). It returns once the command is sent; \
             the extension then works on its own: its edits show in the message, its output in \
             extension_logs.",
            json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        ),
        mcp_front::tool(
            "extension_logs",
            "The last lines an extension wrote to stderr, with their levels.",
            json!({"type": "object", "properties": {
                "name": {"type": "string"},
                "lines": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
            }, "required": ["name"]}),
        ),
        mcp_front::tool(
            "get_schema",
            "The extensions' schemas for the message, merged in configuration order.",
            json!({"type": "object", "properties": {}}),
        ),
    ]
}

/// A tool call as a control request: the method and its params, or what is
/// wrong with the arguments.
fn request(tool: &str, args: &JsonObject) -> Result<(&'static str, Value), String> {
    let format = optional_str(args, "format")?.unwrap_or("hl7");
    Ok(match tool {
        "open_message" => match (optional_str(args, "path")?, optional_str(args, "message")?) {
            (Some(_), Some(_)) => return Err("give `path` or `message`, not both".into()),
            (Some(path), None) => ("message/open", json!({"path": absolute(path)})),
            (None, Some(text)) => ("message/new", json!({"message": text, "format": format})),
            (None, None) => ("message/new", json!({})),
        },
        "get_message" => ("message/get", json!({"format": format})),
        "set_message" => ("message/set", json!({"message": required_str(args, "message")?, "format": format})),
        // The host checks each patch and names the field that is wrong.
        "patch_message" => ("message/patch", json!({"patches": args.get("patches")})),
        "save_message" => ("message/save", json!({"path": optional_str(args, "path")?.map(absolute)})),
        "list_extensions" => ("extensions/list", json!({})),
        "run_command" => ("command/execute", json!({"command": required_str(args, "command")?})),
        "extension_logs" => {
            ("extensions/logs", json!({"name": required_str(args, "name")?, "lines": args.get("lines")}))
        }
        "get_schema" => ("schema/get", json!({})),
        other => return Err(format!("no tool named {other:?}")),
    })
}

fn optional_str<'a>(args: &'a JsonObject, key: &str) -> Result<Option<&'a str>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("`{key}` must be a string, not {other}")),
    }
}

fn required_str<'a>(args: &'a JsonObject, key: &str) -> Result<&'a str, String> {
    optional_str(args, key)?.ok_or_else(|| format!("`{key}` is required"))
}

/// Paths are the agent's, relative to where it started this server; the
/// host runs elsewhere.
fn absolute(path: &str) -> String {
    std::path::absolute(Path::new(path)).map_or_else(|_| path.to_owned(), |p| p.display().to_string())
}

/// HL7 text with one segment per line (the host takes `\n` back as well as `\r`).
fn readable(text: &str, format: &str) -> String {
    if format == "hl7" { text.replace('\r', "\n") } else { text.to_owned() }
}

/// The host's answer as what the model reads.
fn result_of(tool: &str, args: &JsonObject, result: Value) -> CallToolResult {
    match tool {
        "get_message" => {
            let format = optional_str(args, "format").ok().flatten().unwrap_or("hl7");
            let text = readable(result["message"].as_str().unwrap_or_default(), format);
            let file = match result["filePath"].as_str() {
                Some(path) => format!("(saved as {path})"),
                None => "(not saved to a file yet)".to_owned(),
            };
            mcp_front::success_text([text, file], result)
        }
        "patch_message" if result["success"] != true => {
            let failed = result["errors"].as_array().map_or(0, Vec::len);
            let message = format!(
                "{failed} patch(es) failed and were skipped; {} applied:",
                result["patchesApplied"].as_u64().unwrap_or(0)
            );
            mcp_front::failure(message, Some(&result["errors"]))
        }
        "extension_logs" => {
            let lines: Vec<String> = result["lines"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| format!("[{}] {}", l["level"].as_str().unwrap_or(""), l["line"].as_str().unwrap_or("")))
                .collect();
            let text = if lines.is_empty() { "(no lines)".to_owned() } else { lines.join("\n") };
            mcp_front::success_text([text], result)
        }
        _ => mcp_front::success(result),
    }
}

impl Door for HostDoor {
    fn server_name(&self) -> ServerName {
        ServerName {
            name: "hermes-host",
            version: env!("CARGO_PKG_VERSION"),
            instructions: "Edits the HL7 v2 message held by a running hermes-host and runs its extensions' \
                           commands. One message at a time: open_message (a file or text), get_message, \
                           patch_message for fields (PID.5.1, OBX[2].5), set_message for all of it, \
                           save_message. Extensions offer commands (list_extensions, run_command) and log to \
                           extension_logs. The message is also a resource, as HL7 and as JSON, updated when \
                           anyone changes it."
                .into(),
        }
    }

    fn changes(&self) -> &Changes {
        &self.changes
    }

    async fn list_tools(&self, _caller: &Caller) -> Result<Vec<Tool>, McpError> {
        Ok(tools())
    }

    async fn call_tool(
        &self,
        _caller: &Caller,
        name: &str,
        arguments: JsonObject,
        cancel: CancellationToken,
    ) -> CallToolResult {
        let (method, params) = match request(name, &arguments) {
            Ok(request) => request,
            Err(message) => return mcp_front::failure(message, None),
        };
        match self.link.call(method, &params, Some(self.timeout), &cancel).await {
            Ok(result) => result_of(name, &arguments, result),
            Err(failure) => failure.into_result(),
        }
    }

    fn resources(&self) -> Vec<Value> {
        vec![
            json!({"uri": HL7_URI, "name": "message.hl7", "title": "The message (HL7)",
                   "description": "The HL7 v2 message the host holds, one segment per line.",
                   "mimeType": "text/plain"}),
            json!({"uri": JSON_URI, "name": "message.json", "title": "The message (JSON tree)",
                   "description": "The same message as a tree: segments, then fields by 1-based number.",
                   "mimeType": "application/json"}),
        ]
    }

    async fn read_resource(&self, _caller: &Caller, uri: &str) -> Result<Vec<Value>, McpError> {
        let (format, mime) = match uri {
            HL7_URI => ("hl7", "text/plain"),
            JSON_URI => ("json", "application/json"),
            _ => return Err(McpError::resource_not_found(format!("no resource {uri}"), None)),
        };
        let never = CancellationToken::new();
        let result = match self.link.call("message/get", &json!({"format": format}), Some(self.timeout), &never).await {
            Ok(result) => result,
            // No message open: there is nothing to read, which is not the server failing.
            Err(Failure::Rpc(e)) => return Err(McpError::resource_not_found(e.message, e.data)),
            Err(failure) => return Err(failure.into_error()),
        };
        let Some(text) = result["message"].as_str() else {
            return Err(Failure::Malformed("message/get without a message".into()).into_error());
        };
        Ok(vec![mcp_front::resource_text(uri, mime, readable(text, format))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn every_tool_is_one_control_method() {
        let listed: Vec<String> = tools().iter().map(|t| t.name.to_string()).collect();
        for name in &listed {
            let sample = args(json!({"message": "MSH|^~\\&", "command": "x", "name": "x", "patches": []}));
            let sample = if name == "open_message" { args(json!({})) } else { sample };
            assert!(request(name, &sample).is_ok(), "{name}");
        }
        assert_eq!(request("open_message", &args(json!({}))).unwrap(), ("message/new", json!({})));
        let (method, params) = request("open_message", &args(json!({"message": "{}", "format": "json"}))).unwrap();
        assert_eq!((method, params), ("message/new", json!({"message": "{}", "format": "json"})));
        let (method, params) = request("open_message", &args(json!({"path": "a.hl7"}))).unwrap();
        assert_eq!(method, "message/open");
        assert!(Path::new(params["path"].as_str().unwrap()).is_absolute(), "{params}");
    }

    #[test]
    fn wrong_arguments_are_named() {
        let both = request("open_message", &args(json!({"path": "a", "message": "b"}))).unwrap_err();
        assert!(both.contains("not both"), "{both}");
        assert_eq!(request("set_message", &args(json!({}))).unwrap_err(), "`message` is required");
        let number = request("get_message", &args(json!({"format": 3}))).unwrap_err();
        assert!(number.contains("`format` must be a string"), "{number}");
        assert!(request("reticulate", &args(json!({}))).unwrap_err().contains("no tool named"));
    }

    #[test]
    fn a_partly_failed_patch_is_an_error_naming_what_failed() {
        let result = json!({"success": false, "patchesApplied": 1,
            "errors": [{"index": 1, "path": "PID.5x", "message": "invalid path"}]});
        let shown = result_of("patch_message", &JsonObject::new(), result);
        assert_eq!(shown.is_error, Some(true));
        let text = serde_json::to_value(&shown.content[0]).unwrap()["text"].as_str().unwrap().to_owned();
        assert!(text.contains("1 patch(es) failed") && text.contains("1 applied") && text.contains("PID.5x"), "{text}");
        let fine = result_of("patch_message", &JsonObject::new(), json!({"success": true, "patchesApplied": 2}));
        assert_eq!(fine.is_error, Some(false));
    }
}
