//! What nodes say to each other over NATS, as JSON: a forwarded call and its
//! answer, the control messages to a session's owner, and the headers of
//! the owner's events. The directory's values are `SessionInfo` rows with
//! their `node` (sessions/session.rs).

use std::time::Duration;

use rpc_core::{CallError, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Header: the node that published an event.
pub const NODE: &str = "Btcp-Node";
/// Header: the owner's directory revision when it published an event; the
/// highest revision is the session's one owner.
pub const REVISION: &str = "Btcp-Rev";

/// A `tools/call` on its way to the owner (`<name>.s.<key>.call`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteCall<'a> {
    /// The agent's node's name for this call: what a cancel names.
    pub call_id: &'a str,
    pub name: &'a str,
    #[serde(borrow)]
    pub arguments: &'a RawValue,
    pub timeout_ms: u64,
}

/// The owner's answer to a [`RemoteCall`].
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    /// The browser's result (a tool's own failure is in it, `isError`).
    Result(Box<RawValue>),
    /// The browser's error object.
    Error(RpcError),
    Timeout(u64),
    Disconnected,
    Malformed(String),
    Cancelled,
    /// The owner has no browser now (it left, or was replaced).
    NoBrowser,
    /// The owner's browser registered no tool of that name.
    UnknownTool,
}

impl Answer {
    pub fn of(reply: Result<Box<RawValue>, CallError>) -> Answer {
        match reply {
            Ok(result) => Answer::Result(result),
            Err(CallError::Rpc(error)) => Answer::Error(error),
            Err(CallError::Timeout(limit)) => Answer::Timeout(limit.as_millis() as u64),
            Err(CallError::Disconnected) => Answer::Disconnected,
            Err(CallError::Malformed(problem)) => Answer::Malformed(problem),
            Err(CallError::Cancelled) => Answer::Cancelled,
        }
    }

    /// Back to what a local forward returns; `None` for the two answers that
    /// say the call could not be routed.
    pub fn into_reply(self) -> Result<Result<Box<RawValue>, CallError>, Unanswered> {
        Ok(match self {
            Answer::Result(result) => Ok(result),
            Answer::Error(error) => Err(CallError::Rpc(error)),
            Answer::Timeout(ms) => Err(CallError::Timeout(Duration::from_millis(ms))),
            Answer::Disconnected => Err(CallError::Disconnected),
            Answer::Malformed(problem) => Err(CallError::Malformed(problem)),
            Answer::Cancelled => Err(CallError::Cancelled),
            Answer::NoBrowser => return Err(Unanswered::NoBrowser),
            Answer::UnknownTool => return Err(Unanswered::UnknownTool),
        })
    }
}

/// Why the owner did not ask its browser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    NoBrowser,
    UnknownTool,
}

/// From an agent's node to a session's owner (`<name>.s.<key>.ctl`).
#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Control {
    /// A request: may one more agent join (the node then has `agents` in the
    /// session)? Answered with a [`Joined`].
    #[serde(rename_all = "camelCase")]
    Join { node: String, agents: usize },
    /// The node now has `agents` agents in the session (0: none left).
    #[serde(rename_all = "camelCase")]
    Agents { node: String, agents: usize },
    /// The agent gave up on call `call_id` (cancelled it, or left).
    #[serde(rename_all = "camelCase")]
    Cancel { call_id: String },
}

/// The owner's answer to [`Control::Join`].
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Joined {
    pub node: String,
    pub has_browser: bool,
    /// The session's tools, as registered (omitted when the join is refused).
    #[serde(default)]
    pub tools: Option<Box<RawValue>>,
    /// Set when the session already has its maximum of agents, cluster-wide.
    #[serde(default)]
    pub full: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_back_as_the_local_forward_gives_them() {
        let raw = RawValue::from_string(r#"{"content":[],"isError":true}"#.into()).unwrap();
        let text = serde_json::to_string(&Answer::of(Ok(raw))).unwrap();
        let back: Answer = serde_json::from_str(&text).unwrap();
        assert_eq!(back.into_reply().unwrap().unwrap().get(), r#"{"content":[],"isError":true}"#);
        let text = serde_json::to_string(&Answer::of(Err(CallError::Timeout(Duration::from_millis(5))))).unwrap();
        let back: Answer = serde_json::from_str(&text).unwrap();
        assert!(matches!(back.into_reply(), Ok(Err(CallError::Timeout(d))) if d == Duration::from_millis(5)));
        let back: Answer = serde_json::from_str(&serde_json::to_string(&Answer::NoBrowser).unwrap()).unwrap();
        assert_eq!(back.into_reply().err(), Some(Unanswered::NoBrowser));
    }
}
