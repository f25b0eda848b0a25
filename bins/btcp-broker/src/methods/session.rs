//! `session/join` and `session/leave` (agents).

use std::sync::Arc;

use rpc_core::{Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};

use super::codes;
use crate::broker::ConnState;
use crate::session::AttachError;
use crate::toolset::ToolSet;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinParams {
    session_id: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinReply {
    session_id: Arc<str>,
    has_browser: bool,
    tools: Arc<ToolSet>,
}

/// Joins an existing session (leaving the one joined before, if another).
pub async fn join(cx: Ctx<ConnState>, params: JoinParams) -> Result<JoinReply, RpcError> {
    let state = &cx.state;
    let current = state.session().filter(|s| *s.id == *params.session_id);
    let session = match current {
        Some(session) => session,
        None => {
            let session = state.broker.sessions.attach_agent(&params.session_id, false).map_err(attach_error)?;
            state.join(&cx.peer, session.clone());
            session
        }
    };
    Ok(JoinReply { session_id: session.id.clone(), has_browser: session.has_browser(), tools: session.tools() })
}

#[derive(Serialize)]
pub struct LeaveReply {
    left: Arc<str>,
}

pub async fn leave(cx: Ctx<ConnState>, _: NoParams) -> Result<LeaveReply, RpcError> {
    match cx.state.leave() {
        Some(left) => Ok(LeaveReply { left }),
        None => Err(not_joined()),
    }
}

pub fn not_joined() -> RpcError {
    RpcError::new(codes::SESSION_NOT_FOUND, "not in a session: connect with ?sessionId= or call session/join first")
}

pub fn attach_error(error: AttachError) -> RpcError {
    match &error {
        AttachError::NotFound(id) => {
            RpcError::new(codes::SESSION_NOT_FOUND, error.to_string()).with_data(serde_json::json!({ "sessionId": id }))
        }
        AttachError::TooManyAgents { session, max } => RpcError::new(codes::CONNECTION, error.to_string())
            .with_data(serde_json::json!({ "sessionId": session, "maxAgents": max })),
        AttachError::TooManySessions(max) => {
            RpcError::new(codes::CONNECTION, error.to_string()).with_data(serde_json::json!({ "maxSessions": max }))
        }
    }
}
