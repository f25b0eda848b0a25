//! `session/join` and `session/leave` (agents).

use std::sync::Arc;

use rpc_core::{Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};

use crate::errors;
use crate::state::ConnState;
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
            let session = state.broker.sessions.attach_agent(&params.session_id, false).map_err(errors::attach)?;
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
        None => Err(errors::not_joined()),
    }
}
