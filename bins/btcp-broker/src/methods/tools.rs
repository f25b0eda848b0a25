//! `tools/register` (browsers), `tools/list` and `tools/call` (agents).
//!
//! tools/call is the hot path: the agent's handler asks the session's browser
//! through the engine, which gives the forwarded request a fresh id on the
//! browser's connection and routes the answer back to this very future. So the
//! id is rewritten, the answer goes to the agent that asked, a browser that
//! drops fails the call at once, and a late answer finds nobody and is dropped.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use rpc_core::{CallError, CancelNotice, Ctx, Id, NoParams, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::codes;
use super::session::not_joined;
use crate::broker::ConnState;
use crate::metrics::Outcome;
use crate::session::ToolsUpdated;
use crate::toolset::ToolSet;

#[derive(Deserialize)]
pub struct RegisterParams {
    tools: Vec<Value>,
}

#[derive(Serialize)]
pub struct RegisterReply {
    registered: usize,
}

/// Replaces the session's tool list and tells its agents.
pub async fn register(cx: Ctx<ConnState>, params: RegisterParams) -> Result<RegisterReply, RpcError> {
    let state = &cx.state;
    let session = state.session().ok_or_else(not_joined)?;
    let max = state.broker.config.max_tools_per_session;
    let tools = ToolSet::validate(params.tools, max).map_err(|problems| {
        RpcError::invalid_params(format!("tools: {}", problems.join("; ")))
            .with_data(serde_json::json!({ "problems": problems }))
    })?;
    let tools = Arc::new(tools);
    let registered = tools.len();
    // A registration posted just before an SSE browser's stream closed (or
    // sent by a browser since replaced) would set tools nobody serves.
    if !state.is_listening() || !session.register_tools(cx.peer.conn_id(), tools.clone()) {
        return Err(RpcError::new(
            codes::CONNECTION,
            "this connection no longer serves the session (its event stream closed or another browser replaced it)",
        ));
    }
    session.notify_agents("tools/updated", &ToolsUpdated { session_id: &session.id, tools: tools.json() });
    session.notify_agents("notifications/tools/list_changed", &());
    tracing::info!(session = %session.id, registered, "tools registered");
    Ok(RegisterReply { registered })
}

#[derive(Serialize)]
pub struct ToolsReply {
    tools: Arc<ToolSet>,
}

/// The broker's copy of the list: no round trip to the browser.
pub async fn list(cx: Ctx<ConnState>, _: NoParams) -> Result<ToolsReply, RpcError> {
    let session = cx.state.session().ok_or_else(not_joined)?;
    Ok(ToolsReply { tools: session.tools() })
}

#[derive(Deserialize)]
pub struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Box<RawValue>>,
    /// Milliseconds; capped by BTCP_MAX_CALL_TIMEOUT.
    #[serde(default)]
    timeout: Option<u64>,
}

/// `arguments` when the agent sent none.
static NO_ARGUMENTS: LazyLock<Box<RawValue>> =
    LazyLock::new(|| RawValue::from_string("{}".into()).expect("{} is JSON"));

/// What the browser receives: the call without the broker's own `timeout`.
#[derive(Serialize)]
struct ForwardedCall<'a> {
    name: &'a str,
    arguments: &'a RawValue,
}

pub async fn call(cx: Ctx<ConnState>, params: CallParams) -> Result<Box<RawValue>, RpcError> {
    let state = &cx.state;
    let broker = &state.broker;
    let metrics = &broker.metrics;
    let refuse = |outcome: Outcome, error: RpcError| {
        metrics.call(outcome);
        Err(error)
    };

    if let Err(wait) = state.rate.lock().try_take() {
        return refuse(
            Outcome::RateLimited,
            RpcError::new(codes::RATE_LIMITED, "rate limited: too many tools/call")
                .with_data(serde_json::json!({ "retryAfterMs": wait.as_millis() as u64 })),
        );
    }
    let Some(session) = state.session() else {
        return refuse(Outcome::NotJoined, not_joined());
    };
    let (browser, tools) = session.browser_and_tools();
    let Some(browser) = browser else {
        return refuse(
            Outcome::NoBrowser,
            RpcError::new(codes::NO_BROWSER, format!("no browser connected to session {}", session.id))
                .with_data(serde_json::json!({ "sessionId": &*session.id })),
        );
    };
    if !tools.contains(&params.name) {
        return refuse(
            Outcome::UnknownTool,
            RpcError::new(codes::TOOL_NOT_FOUND, format!("tool not found: {:?}", params.name))
                .with_data(serde_json::json!({ "name": params.name, "sessionId": &*session.id })),
        );
    }
    let arguments = params.arguments.as_deref().unwrap_or(&NO_ARGUMENTS);
    if !arguments.get().starts_with('{') {
        return Err(RpcError::invalid_params("arguments: must be an object"));
    }
    let config = &broker.config;
    let timeout = match params.timeout {
        Some(0) | None => config.call_timeout,
        Some(ms) => Duration::from_millis(ms).min(config.max_call_timeout),
    };
    session.touch();
    let started = Instant::now();
    let forwarded = ForwardedCall { name: &params.name, arguments };
    // Fires when the agent cancels this call or goes away: the browser is
    // told which of its calls to stop, and its late answer is dropped.
    let abandoned = cx.cancel_token();
    let answer =
        browser.request_cancellable("tools/call", &forwarded, Some(timeout), &abandoned, Some(CancelNotice::MCP)).await;
    match answer {
        Ok(result) => {
            metrics.call(if reports_tool_error(&result) { Outcome::ToolError } else { Outcome::Ok });
            metrics.call_latency(started.elapsed());
            Ok(result)
        }
        Err(CallError::Rpc(error)) => {
            // The browser's own error (its tool failed) goes back as it is.
            metrics.call(Outcome::ToolError);
            metrics.call_latency(started.elapsed());
            Err(error)
        }
        Err(CallError::Timeout(limit)) => refuse(
            Outcome::Timeout,
            RpcError::new(codes::TIMEOUT, format!("tool call timed out after {} ms", limit.as_millis())).with_data(
                serde_json::json!({
                    "name": params.name,
                    "timeoutMs": limit.as_millis() as u64,
                }),
            ),
        ),
        Err(CallError::Disconnected) => refuse(
            Outcome::BrowserDisconnected,
            RpcError::new(codes::NO_BROWSER, "browser disconnected")
                .with_data(serde_json::json!({ "sessionId": &*session.id })),
        ),
        Err(CallError::Cancelled) => refuse(
            Outcome::Cancelled,
            RpcError::new(codes::CANCELLED, "request cancelled").with_data(serde_json::json!({ "name": params.name })),
        ),
        Err(CallError::Malformed(problem)) => refuse(
            Outcome::Malformed,
            RpcError::internal(format!("malformed answer from the browser: {problem}"))
                .with_data(serde_json::json!({ "reason": "malformed_answer", "sessionId": &*session.id })),
        ),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledParams {
    request_id: Id,
}

/// `notifications/cancelled {requestId}` from an agent: abandon that
/// forwarded call (MCP's cancellation, which BTCP agents speak).
pub async fn cancelled(cx: Ctx<ConnState>, params: CancelledParams) -> Result<(), RpcError> {
    if cx.peer.cancel_call(&params.request_id) {
        tracing::debug!(conn = cx.peer.conn_id(), "tools/call cancelled by the agent");
    }
    Ok(())
}

/// Whether a browser's result says that its tool failed (`isError: true`, how
/// the public client and MCP tools report it): a call that reached the tool
/// and failed there is a `tool_error` in the metrics, not an `ok`. Only a
/// result that names the key is parsed, and only its top level counts.
fn reports_tool_error(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct ToolResult {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    let text = result.get();
    text.contains("\"isError\"") && serde_json::from_str::<ToolResult>(text).is_ok_and(|r| r.is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn only_a_top_level_is_error_true_is_a_tool_error() {
        assert!(reports_tool_error(&raw(r#"{"content": [], "isError": true}"#)));
        assert!(!reports_tool_error(&raw(r#"{"content": [], "isError": false}"#)));
        assert!(!reports_tool_error(&raw(r#"{"content": []}"#)));
        assert!(!reports_tool_error(&raw(r#"{"content": [{"type": "json", "isError": true}]}"#)));
        assert!(!reports_tool_error(&raw(r#"{"isError": "yes"}"#)));
        assert!(!reports_tool_error(&raw(r#""isError""#)));
        assert!(!reports_tool_error(&raw("42")));
    }
}
