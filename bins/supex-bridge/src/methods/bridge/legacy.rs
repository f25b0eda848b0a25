//! The older Supex dialect: `{"command": "eval_ruby", "parameters": {...}}`,
//! without `jsonrpc` or `method`. It is rewritten into a `tools/call` request
//! (and so passes the same hello gate). Without an `id` it is answered with
//! `"id": null`, because clients of that dialect wait for an answer.

use serde::Deserialize;
use serde_json::value::RawValue;

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

pub fn adapt(frame: &[u8]) -> Option<Vec<u8>> {
    let legacy: Legacy<'_> = serde_json::from_slice(frame).ok()?;
    if legacy.method.is_some() {
        // A JSON-RPC message that is wrong in some other way: let it be refused as it is.
        return None;
    }
    let id = match legacy.id {
        None => "null",
        Some(id) => match id.get().as_bytes().first() {
            Some(b'"' | b'-' | b'0'..=b'9' | b'n') => id.get(),
            _ => return None,
        },
    };
    let arguments = match legacy.parameters {
        Some(p) if p.get() != "null" => p.get(),
        _ => "{}",
    };
    let mut out = Vec::with_capacity(frame.len() + 64);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(br#","method":"tools/call","params":{"name":"#);
    serde_json::to_writer(&mut out, &legacy.command).ok()?;
    out.extend_from_slice(br#","arguments":"#);
    out.extend_from_slice(arguments.as_bytes());
    out.extend_from_slice(b"}}");
    Some(out)
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
    fn no_id_is_answered_with_null_and_no_parameters_with_empty_arguments() {
        assert_eq!(
            adapted(r#"{"command":"ping"}"#),
            Some(json!({"jsonrpc":"2.0","id":null,"method":"tools/call",
                        "params":{"name":"ping","arguments":{}}}))
        );
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
