//! The older Supex dialect: `{"command": "eval_ruby", "parameters": {...}}`,
//! without `jsonrpc` or `method`. It is rewritten into a `tools/call` (and so
//! passes the same hello gate).
//!
//! With an `id`, it becomes a `tools/call` request with that id. Without one
//! (or with `"id": null`) its client still waits for an answer, and can only
//! match answers to calls by their order: such a frame becomes a notification
//! of [`unnumbered_method`], which the engine runs one at a time in arrival
//! order, and [`answer_unnumbered`] answers it with `"id": null`. As requests
//! they would all carry the id `null`, and a second one while the first runs
//! would be refused as a duplicate id in flight.

use std::sync::{Arc, LazyLock};

use rpc_core::message::{Kind, response_err, response_ok};
use rpc_core::{Ctx, Id, RpcError};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::methods::tools::{self, ToolCall};
use crate::state::{App, BridgeConn};

#[derive(Deserialize)]
struct Legacy<'a> {
    command: String,
    #[serde(default, borrow)]
    parameters: Option<&'a RawValue>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
}

/// The method an id-less legacy frame becomes: a name of this process alone,
/// so that no JSON-RPC client calls it (and gets an answer to a notification).
pub fn unnumbered_method() -> &'static str {
    static NAME: LazyLock<String> = LazyLock::new(|| format!("supex-bridge/legacy-{}", uuid::Uuid::new_v4().simple()));
    &NAME
}

pub fn adapt(frame: &[u8]) -> Option<Vec<u8>> {
    let legacy: Legacy<'_> = serde_json::from_slice(frame).ok()?;
    if legacy.method.is_some() {
        // A JSON-RPC message that is wrong in some other way: let it be refused as it is.
        return None;
    }
    let id = match legacy.id.map(RawValue::get) {
        None | Some("null") => None,
        Some(id) => match id.as_bytes().first() {
            Some(b'"' | b'-' | b'0'..=b'9') => Some(id),
            _ => return None,
        },
    };
    let arguments = match legacy.parameters {
        Some(p) if p.get() != "null" => p.get(),
        _ => "{}",
    };
    let mut out = Vec::with_capacity(frame.len() + 96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","#);
    if let Some(id) = id {
        out.extend_from_slice(br#""id":"#);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(br#","method":"tools/call","#);
    } else {
        out.extend_from_slice(br#""method":"#);
        serde_json::to_writer(&mut out, unnumbered_method()).ok()?;
        out.push(b',');
    }
    out.extend_from_slice(br#""params":{"name":"#);
    serde_json::to_writer(&mut out, &legacy.command).ok()?;
    out.extend_from_slice(br#","arguments":"#);
    out.extend_from_slice(arguments.as_bytes());
    out.extend_from_slice(b"}}");
    Some(out)
}

/// Runs an id-less legacy call if the gate `admitted` it (judged when the
/// call was read, as the engine judges a request), and writes its answer,
/// success or error, with `"id": null`.
pub async fn answer_unnumbered(
    app: Arc<App>,
    admitted: Result<(), RpcError>,
    cx: Ctx<BridgeConn>,
    call: ToolCall,
) -> Result<(), RpcError> {
    if cx.request_id().is_some() {
        // Only the rewrite sends this method, and never as a request.
        return Err(RpcError::method_not_found(unnumbered_method()));
    }
    let peer = cx.peer.clone();
    let outcome = match admitted {
        Ok(()) => tools::call(app, cx, call).await,
        Err(refused) => Err(refused),
    };
    let reply = match outcome {
        Ok(result) => response_ok(&Id::Null, result.get().as_bytes()),
        Err(error) => response_err(&Id::Null, &error),
    };
    // A closed connection has no one left to answer.
    let _ = peer.send_raw(Kind::Response, reply.into()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn adapted(text: &str) -> Option<Value> {
        adapt(text.as_bytes()).map(|out| serde_json::from_slice(&out).unwrap())
    }

    #[test]
    fn a_command_becomes_tools_call_with_its_id() {
        assert_eq!(
            adapted(r#"{"command":"eval_ruby","parameters":{"code":"1+1"},"id":7}"#),
            Some(json!({"jsonrpc":"2.0","id":7,"method":"tools/call",
                        "params":{"name":"eval_ruby","arguments":{"code":"1+1"}}}))
        );
    }

    #[test]
    fn no_id_makes_a_notification_of_the_unnumbered_method_and_no_parameters_empty_arguments() {
        for frame in [r#"{"command":"ping"}"#, r#"{"command":"ping","id":null,"parameters":null}"#] {
            assert_eq!(
                adapted(frame),
                Some(json!({"jsonrpc":"2.0","method":unnumbered_method(),
                            "params":{"name":"ping","arguments":{}}})),
                "{frame}"
            );
        }
        assert_eq!(adapted(r#"{"command":"ping","parameters":null,"id":"a"}"#).unwrap()["id"], json!("a"));
    }

    #[test]
    fn other_shapes_are_left_alone() {
        assert!(adapted(r#"{"jsonrpc":"1.0","method":"ping","id":1}"#).is_none());
        assert!(adapted(r#"{"command":"x","method":"y"}"#).is_none());
        assert!(adapted(r#"{"command":5}"#).is_none());
        assert!(adapted(r#"{"command":"x","id":{}}"#).is_none());
        assert!(adapted("not json").is_none());
    }
}
