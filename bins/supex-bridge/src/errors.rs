//! The daemon's own error codes and the errors built with them.
//!
//! | code | meaning |
//! |---|---|
//! | -32000 | Ruby error: an exception, a timeout, a crash, no interpreter |
//! | -32001 | authentication failed |
//! | -32002 | path access denied |
//!
//! Upstream Supex sends -32603 for Ruby errors and denied paths although its
//! docs say -32000/-32002; we send what the docs say. Every -32000 carries
//! `data: {reason, class, message, backtrace}` so a client can tell an
//! exception in its code (`reason: "exception"`) from a runtime problem.

use std::path::Path;

use rpc_core::RpcError;
use serde_json::json;

use crate::runtime::{RubyException, RuntimeError};

pub const RUBY_ERROR: i64 = -32000;
pub const AUTH_FAILED: i64 = -32001;
pub const PATH_DENIED: i64 = -32002;

/// Backtrace lines kept in a -32000 error.
pub const BACKTRACE_LINES: usize = 20;

/// Bytes of the exception's message repeated in the error's own `message`;
/// `data.message` has all the driver sent (at most 1 MiB).
const MESSAGE_SHOWN: usize = 4096;

/// A Ruby exception raised by evaluated code. `output` is what the code printed
/// before it raised: kept, not lost.
pub fn ruby_exception(error: &RubyException, output: &str) -> RpcError {
    let backtrace: Vec<&str> = error.backtrace.iter().take(BACKTRACE_LINES).map(String::as_str).collect();
    let shown = shorten(&error.message, MESSAGE_SHOWN);
    RpcError::new(RUBY_ERROR, format!("Ruby error: {}: {shown}", error.class)).with_data(json!({
        "reason": "exception",
        "class": error.class,
        "message": error.message,
        "backtrace": backtrace,
        "output": output,
    }))
}

/// `text` cut at `max` bytes (on a character boundary), saying so: a long
/// message is sent once whole, not twice.
fn shorten(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let cut = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}... [{} bytes in all: see data.message]", &text[..cut], text.len()).into()
}

/// The runtime could not evaluate at all (timeout, crash, no interpreter).
pub fn runtime(error: &RuntimeError) -> RpcError {
    let (reason, class) = match error {
        RuntimeError::Timeout { .. } => ("timeout", Some("Timeout::Error")),
        RuntimeError::Crashed { .. } => ("crashed", None),
        RuntimeError::Unavailable { .. } => ("unavailable", None),
        RuntimeError::UnusableReply { .. } => ("unusable_reply", None),
        RuntimeError::Reset => ("reset", None),
        RuntimeError::Stopped => ("shutting_down", None),
    };
    let mut data = json!({
        "reason": reason,
        "class": class,
        "message": error.to_string(),
        "backtrace": [],
    });
    if let RuntimeError::Timeout { after } = error {
        data["timeout"] = json!(after.as_secs_f64());
    }
    RpcError::new(RUBY_ERROR, error.to_string()).with_data(data)
}

pub fn auth_failed() -> RpcError {
    RpcError::new(AUTH_FAILED, "Authentication failed: invalid or missing token")
}

/// A `hello` after the connection's third failed one: refused whatever it
/// carries, and the connection closes.
pub fn too_many_failed_hellos() -> RpcError {
    RpcError::new(AUTH_FAILED, "Authentication failed: too many failed hello attempts; the connection is closing")
}

pub fn path_denied(given: &str, resolved: Option<&Path>, reason: &str) -> RpcError {
    RpcError::new(PATH_DENIED, "Path access denied").with_data(json!({
        "path": given,
        "resolved": resolved.map(|p| p.to_string_lossy()),
        "reason": reason,
    }))
}

/// A file operation on an allowed path failed. Problems with the argument
/// itself (nothing there, a directory where a file was expected) are -32602;
/// anything else (disk full, I/O error) is -32603.
pub fn file_operation(what: &str, given: &str, resolved: &Path, error: &std::io::Error) -> RpcError {
    use std::io::ErrorKind::*;
    let data = json!({
        "path": given,
        "resolved": resolved.to_string_lossy(),
        "error": error.to_string(),
    });
    let message = format!("cannot {what} {}: {error}", resolved.display());
    match error.kind() {
        NotFound | NotADirectory | IsADirectory | AlreadyExists | PermissionDenied | InvalidInput
        | DirectoryNotEmpty => RpcError::invalid_params(message).with_data(data),
        _ => RpcError::internal(message).with_data(data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_exception_message_is_sent_whole_once() {
        let long = "é".repeat(10_000);
        let error = RubyException { class: "RuntimeError".into(), message: long.clone(), backtrace: vec![] };
        let rpc = ruby_exception(&error, "");
        assert!(rpc.message.len() < MESSAGE_SHOWN + 100, "{}", rpc.message.len());
        assert!(rpc.message.ends_with("[20000 bytes in all: see data.message]"), "{}", rpc.message);
        assert_eq!(rpc.data.unwrap()["message"], long);
        let short =
            RubyException { class: "ZeroDivisionError".into(), message: "divided by 0".into(), backtrace: vec![] };
        assert_eq!(ruby_exception(&short, "").message, "Ruby error: ZeroDivisionError: divided by 0");
    }
}
