//! What the `hello` of both servers share: the token check, the answer to
//! a method called before a successful hello, the server's name in the
//! welcome, the params read field by field, and [`owing`], which counts a
//! handler as a reply owed (the close after failed hellos waits for those).
//! The count of failed hellos is the connection's state
//! ([`crate::state::Handshake`]).

use std::future::Future;

use rpc_core::token::token_matches;
use rpc_core::{ConnCtx, RpcError};
use serde::Serialize;

use crate::errors;
use crate::state::{Handshaking, OwedReply};

/// Who answers, in both servers' welcome.
#[derive(Serialize)]
pub struct ServerInfo {
    pub name: &'static str,
    pub version: &'static str,
}

/// Checks the token of a `hello` when one is required.
pub fn check_token(required: Option<&str>, given: Option<&str>) -> Result<(), RpcError> {
    match required {
        None => Ok(()),
        Some(expected) if given.is_some_and(|t| token_matches(expected, t)) => Ok(()),
        Some(_) => Err(errors::auth_failed()),
    }
}

/// What the guards answer to a method other than `hello`/`ping` before a
/// successful `hello`: with a token configured the client is unauthenticated
/// (-32001), without one merely unidentified (-32600).
pub fn not_identified(token_required: bool, hint: &str) -> RpcError {
    if token_required {
        errors::auth_failed()
    } else {
        RpcError::new(RpcError::INVALID_REQUEST, "Client must identify with 'hello' method first")
            .with_data(serde_json::json!({ "hint": hint }))
    }
}

/// A handler made for a call on `conn` (`request`: it has an id), run as
/// a reply owed to the connection ([`OwedReply`]) from now until it returns.
pub fn owing<S: Handshaking, F: Future>(
    conn: &ConnCtx<S>,
    request: bool,
    run: F,
) -> impl Future<Output = F::Output> + use<S, F> {
    let owed = OwedReply::new(&conn.state, &conn.peer, request);
    async move {
        let _owed = owed;
        run.await
    }
}

/// The gate of every method but `hello` and `ping`: refused after too many
/// failed hellos (the connection is closing) and before a successful one.
pub fn gate<S: Handshaking>(conn: &S, token_required: bool, hint: &str) -> Result<(), RpcError> {
    let handshake = conn.handshake();
    if handshake.is_closing() {
        Err(errors::too_many_failed_hellos())
    } else if handshake.is_identified() {
        Ok(())
    } else {
        Err(not_identified(token_required, hint))
    }
}

/// The params of a `hello`, read field by field, so that the token is checked
/// before anything else is judged.
#[derive(Debug)]
pub struct HelloFields(serde_json::Map<String, serde_json::Value>);

impl HelloFields {
    pub fn new(params: serde_json::Value) -> Result<Self, RpcError> {
        match params {
            serde_json::Value::Object(map) => Ok(HelloFields(map)),
            serde_json::Value::Null => Ok(HelloFields(serde_json::Map::new())),
            _ => Err(RpcError::invalid_params("hello takes named params (an object)")),
        }
    }

    /// The token, if it is a string (anything else cannot match).
    pub fn token(&self) -> Option<&str> {
        self.0.get("token").and_then(|t| t.as_str())
    }

    /// A string field; `required` ones must be present and not empty.
    pub fn text(&self, field: &str, required: bool) -> Result<Option<String>, RpcError> {
        match self.0.get(field) {
            None | Some(serde_json::Value::Null) if required => {
                Err(RpcError::invalid_params(format!("missing field `{field}`")))
            }
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) if required && s.trim().is_empty() => {
                Err(RpcError::invalid_params(format!("{field}: must not be empty")))
            }
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => {
                Err(RpcError::invalid_params(format!("{field}: expected a string, got {}", json_type(other))))
            }
        }
    }

    /// The client's process id: a non-negative integer.
    pub fn pid(&self, required: bool) -> Result<Option<u64>, RpcError> {
        match self.0.get("pid") {
            None | Some(serde_json::Value::Null) if required => Err(RpcError::invalid_params("missing field `pid`")),
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(value) => value.as_u64().map(Some).ok_or_else(|| {
                RpcError::invalid_params(format!("pid: expected a non-negative integer, got {}", json_type(value)))
            }),
        }
    }
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_token_requires_the_token_only_when_configured() {
        assert!(check_token(None, None).is_ok());
        assert!(check_token(None, Some("anything")).is_ok());
        assert!(check_token(Some("t"), Some("t")).is_ok());
        assert_eq!(check_token(Some("t"), None).unwrap_err().code, errors::AUTH_FAILED);
        assert_eq!(check_token(Some("t"), Some("u")).unwrap_err().code, errors::AUTH_FAILED);
    }
}
