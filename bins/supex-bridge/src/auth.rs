//! The `hello` handshake both servers share: the token check and the count of
//! failed attempts per connection.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use rpc_core::token::token_matches;
use rpc_core::{Ctx, RpcError};

use crate::errors;

/// Failed `hello`s after which a connection is closed.
pub const MAX_FAILED_HELLOS: u32 = 3;

/// The handshake state of one connection.
#[derive(Debug, Default)]
pub struct Handshake {
    identified: AtomicBool,
    failures: AtomicU32,
}

impl Handshake {
    pub fn is_identified(&self) -> bool {
        self.identified.load(Ordering::Acquire)
    }

    /// Records a successful `hello`; the connection no longer counts against
    /// the listener's share of connections without a handshake, and its
    /// handshake deadline no longer applies.
    pub fn identify<S>(&self, cx: &Ctx<S>) {
        self.identified.store(true, Ordering::Release);
        cx.peer.handshake_done();
    }

    /// The first step of every `hello`: once [`MAX_FAILED_HELLOS`] have
    /// failed, the rest are refused without their token being looked at.
    /// Hellos in one batch run side by side, each before the connection can
    /// close, so without this a batch of 1000 would be 1000 token guesses.
    pub fn admit<S>(&self, cx: &Ctx<S>) -> Result<(), RpcError> {
        if self.failures.load(Ordering::Acquire) < MAX_FAILED_HELLOS {
            return Ok(());
        }
        Err(self.fail(cx, errors::too_many_failed_hellos()))
    }

    /// Counts a failed `hello`; from the third on, the connection closes once
    /// the reply (a whole batch's, for a batch) is written. Returns the error
    /// unchanged.
    pub fn fail<S>(&self, cx: &Ctx<S>, error: RpcError) -> RpcError {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures == MAX_FAILED_HELLOS {
            tracing::warn!(conn = cx.peer.conn_id(), failures, "too many failed hellos; closing the connection");
        }
        if failures >= MAX_FAILED_HELLOS {
            cx.peer.close_after_reply();
        }
        error
    }
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
