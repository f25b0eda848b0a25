//! [`RpcError`]: the error object, and the error type every handler returns.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A JSON-RPC error object, and the error type every handler returns.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{} ({code})", crate::escape::OneLine(.message))]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;

    /// An error with a daemon's own code (the -32099..-32000 range, or an
    /// extension's range).
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(Self::PARSE_ERROR, format!("Parse error: {detail}"))
    }

    pub fn invalid_request(detail: impl fmt::Display) -> Self {
        Self::new(Self::INVALID_REQUEST, format!("Invalid Request: {detail}"))
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(Self::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    pub fn invalid_params(detail: impl fmt::Display) -> Self {
        Self::new(Self::INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    pub fn internal(detail: impl fmt::Display) -> Self {
        Self::new(Self::INTERNAL_ERROR, format!("Internal error: {detail}"))
    }
}
