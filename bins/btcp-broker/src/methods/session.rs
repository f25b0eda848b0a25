//! `session/join` and `session/leave` (agents).

use std::sync::Arc;

use rpc_core::{Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};

use crate::errors;
use crate::peer;
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
            let broker = &state.broker;
            // In a cluster, a session owned by another node exists here too.
            let elsewhere = broker.cluster.as_ref().is_some_and(|c| c.knows(&params.session_id));
            let session = broker.sessions.attach_agent(&params.session_id, elsewhere).map_err(errors::attach)?;
            peer::follow(broker, &session).await.map_err(errors::attach)?;
            state.join(&cx.peer, session.clone());
            session
        }
    };
    let broker = &state.broker;
    let has_browser = session.has_browser() || broker.cluster.as_ref().is_some_and(|c| c.has_browser(&session.id));
    Ok(JoinReply { session_id: session.id.clone(), has_browser, tools: session.tools() })
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
