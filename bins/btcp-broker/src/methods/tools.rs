//! `tools/register` (browsers), `tools/list` and `tools/call` (agents).
//!
//! tools/call is the hot path: admitted here (rate, session, arguments,
//! timeout), then routed to the session's browser and forwarded by
//! `sessions/forward.rs`; its outcome is counted here.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use memchr::memmem::Finder;
use rpc_core::escape::OneLine;
use rpc_core::message::empty_object;
use rpc_core::{CallError, Ctx, Id, NoParams, PeerHandle, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::cluster::Unrouted;
use crate::config::Config;
use crate::errors;
use crate::metrics::{Metrics, Outcome};
use crate::sessions::forward::{self, ToolCall, Unroutable};
use crate::sessions::{Session, ToolsUpdated};
use crate::state::ConnState;
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
    let session = state.session().ok_or_else(errors::not_joined)?;
    let max = state.broker.config.max_tools_per_session;
    let tools = Arc::new(ToolSet::validate(params.tools, max).map_err(errors::invalid_tools)?);
    let registered = tools.len();
    // A registration posted just before an SSE browser's stream closed (or
    // sent by a browser since replaced) would set tools nobody serves.
    if !state.is_listening() || !session.register_tools(cx.peer.conn_id(), tools.clone()) {
        return Err(errors::not_serving());
    }
    session.notify_agents("tools/updated", &ToolsUpdated { session_id: &session.id, tools: tools.json() });
    session.notify_agents("notifications/tools/list_changed", &());
    tracing::info!(session = %OneLine(&session.id), registered, "tools registered");
    Ok(RegisterReply { registered })
}

#[derive(Serialize)]
pub struct ToolsReply {
    tools: Arc<ToolSet>,
}

/// The broker's copy of the list: no round trip to the browser.
pub async fn list(cx: Ctx<ConnState>, _: NoParams) -> Result<ToolsReply, RpcError> {
    let session = cx.state.session().ok_or_else(errors::not_joined)?;
    Ok(ToolsReply { tools: session.tools() })
}

/// A call's params, as serde reads them. Only its errors are read this way
/// on the hot path: [`CallParams::read`] reads the common shape itself.
#[derive(Deserialize)]
struct OwnedCallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Box<RawValue>>,
    /// Milliseconds; capped by BTCP_MAX_CALL_TIMEOUT.
    #[serde(default, deserialize_with = "milliseconds")]
    timeout: Option<u64>,
}

/// A `timeout`: a non-negative integer, or null. One too large for u64
/// (serde_json reads it as a float) saturates: it is capped anyway, as the
/// docs promise, and refusing it would break that promise. Fractions,
/// negatives and strings stay refused.
fn milliseconds<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    struct Milliseconds;
    impl serde::de::Visitor<'_> for Milliseconds {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number of milliseconds (a non-negative integer)")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E: serde::de::Error>(self, ms: u64) -> Result<Self::Value, E> {
            Ok(Some(ms))
        }
        fn visit_i64<E: serde::de::Error>(self, ms: i64) -> Result<Self::Value, E> {
            u64::try_from(ms).map(Some).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(ms), &self))
        }
        fn visit_f64<E: serde::de::Error>(self, ms: f64) -> Result<Self::Value, E> {
            // Every float this large is a whole number: an integer beyond u64.
            if ms >= 18_446_744_073_709_551_616.0 {
                return Ok(Some(u64::MAX));
            }
            // `-0`, which serde_json reads as a float: zero, as before.
            if ms == 0.0 && ms.is_sign_negative() {
                return Ok(Some(0));
            }
            Err(E::invalid_value(serde::de::Unexpected::Float(ms), &self))
        }
    }
    deserializer.deserialize_any(Milliseconds)
}

/// A call's params, borrowed from its message where they can be.
struct CallParams<'a> {
    name: Cow<'a, str>,
    arguments: Option<Cow<'a, RawValue>>,
    timeout: Option<u64>,
}

impl<'a> CallParams<'a> {
    /// The params of the common shape read in one pass over their members
    /// (a third of serde's derive, with no copy); anything else, and every
    /// mistake, the way serde reads it, with its errors.
    fn read(params: &'a RawValue) -> Result<Self, RpcError> {
        if let Some(read) = Self::common(params.get()) {
            return Ok(read);
        }
        let owned: OwnedCallParams = rpc_core::router::parse_params(Some(params))?;
        Ok(CallParams { name: owned.name.into(), arguments: owned.arguments.map(Cow::Owned), timeout: owned.timeout })
    }

    /// Members `name` (a string without escapes), `arguments` and `timeout`
    /// (digits), each at most once, others ignored: what serde's derive
    /// would read the same way. `None` for anything else.
    fn common(text: &'a str) -> Option<Self> {
        let (mut name, mut arguments, mut timeout, mut twice) = (None, None, None, false);
        rpc_core::message::object_members(text, |key, value| {
            let slot = match key {
                "name" => &mut name,
                "arguments" => &mut arguments,
                "timeout" => &mut timeout,
                _ => return,
            };
            twice |= slot.replace(value).is_some();
        })?;
        if twice {
            return None;
        }
        let name = name?.get().strip_prefix('"')?.strip_suffix('"').filter(|name| !name.contains('\\'))?;
        let arguments = arguments.filter(|arguments| arguments.get() != "null").map(Cow::Borrowed);
        let timeout = match timeout.map(RawValue::get) {
            None | Some("null") => None,
            // Too many digits for u64 saturates, as serde's reading does.
            Some(digits) if digits.bytes().all(|c| c.is_ascii_digit()) => Some(digits.parse().unwrap_or(u64::MAX)),
            Some(_) => return None,
        };
        Some(CallParams { name: Cow::Borrowed(name), arguments, timeout })
    }
}

/// Forwards the call to the session's browser and passes its answer back.
/// Takes its params as they came and reads them itself ([`CallParams::read`]).
///
/// Not an `async fn`: the call's time starts when it is read, which is when
/// this runs; its body may start later, behind the agent's other calls, and
/// the agent's `timeout` counts that wait too.
pub fn call(cx: Ctx<ConnState>, params: Box<RawValue>) -> impl Future<Output = Result<Box<RawValue>, RpcError>> {
    let arrived = Instant::now();
    forward_call(cx, params, arrived)
}

async fn forward_call(cx: Ctx<ConnState>, params: Box<RawValue>, arrived: Instant) -> Result<Box<RawValue>, RpcError> {
    let params = CallParams::read(&params)?;
    let state = &cx.state;
    let broker = &state.broker;
    let metrics = &broker.metrics;
    let refused = |(outcome, error): (Outcome, RpcError)| {
        metrics.call(outcome);
        error
    };
    let (session, browser) = admit(state, &params.name).map_err(refused)?;
    let arguments = params.arguments.as_deref().unwrap_or(empty_object());
    if !arguments.get().starts_with('{') {
        return Err(RpcError::invalid_params("arguments: must be an object"));
    }
    let asked = timeout_of(params.timeout, &broker.config);
    let started = Instant::now();
    session.touch_at(started);
    // What is left of the agent's timeout after the wait for a handler slot.
    let Some(timeout) = asked.checked_sub(started - arrived).filter(|left| !left.is_zero()) else {
        return count_answer(metrics, Err(CallError::Timeout(asked)), started, &params.name, &session);
    };
    let answer = match browser {
        Some(browser) => forward::forward(&cx, &browser, &ToolCall { name: &params.name, arguments }, timeout).await,
        None => {
            let cluster = broker.cluster.as_ref().expect("admit routes elsewhere only in a cluster");
            // Boxed: the cross-node call's state is large, and every call's
            // future (moved into its box by the engine) would carry its size.
            let abandoned = cx.cancel_token();
            let answer = Box::pin(cluster.call(&session, &params.name, arguments, timeout, &abandoned)).await;
            answer.map_err(|why| unrouted(why, &params.name, &session.id)).map_err(refused)?
        }
    };
    // The agent is told the timeout it asked for.
    let answer = answer.map_err(|e| if let CallError::Timeout(_) = e { CallError::Timeout(asked) } else { e });
    count_answer(metrics, answer, started, &params.name, &session)
}

/// Why a call to another node's browser was not answered by it.
fn unrouted(why: Unrouted, tool: &str, session_id: &str) -> (Outcome, RpcError) {
    match why {
        Unrouted::NoBrowser => (Outcome::NoBrowser, errors::no_browser(session_id)),
        Unrouted::UnknownTool => (Outcome::UnknownTool, errors::tool_not_found(tool, session_id)),
        Unrouted::NodeLost => (Outcome::BrowserDisconnected, errors::node_lost(session_id)),
        Unrouted::Unavailable => (Outcome::NoBrowser, errors::cluster_unavailable(session_id)),
    }
}

/// The checks before the browser is bothered, in this order: the agent's
/// rate, its session, the session's browser, the tool's name. A refusal
/// comes with the outcome it is counted as. No browser here, in a cluster:
/// `None`, the call goes to the session's owner (which checks the name
/// again: the copy here may lag).
fn admit(state: &ConnState, tool: &str) -> Result<(Arc<Session>, Option<PeerHandle>), (Outcome, RpcError)> {
    if let Err(wait) = state.rate.lock().try_take() {
        return Err((Outcome::RateLimited, errors::rate_limited(wait)));
    }
    let session = state.session().ok_or_else(|| (Outcome::NotJoined, errors::not_joined()))?;
    match forward::route(&session, tool) {
        Ok(browser) => Ok((session, Some(browser))),
        Err(Unroutable::NoBrowser) if state.broker.cluster.is_some() => {
            let known = session.tools();
            if known.len() > 0 && !known.contains(tool) {
                return Err((Outcome::UnknownTool, errors::tool_not_found(tool, &session.id)));
            }
            Ok((session, None))
        }
        Err(Unroutable::NoBrowser) => Err((Outcome::NoBrowser, errors::no_browser(&session.id))),
        Err(Unroutable::UnknownTool) => Err((Outcome::UnknownTool, errors::tool_not_found(tool, &session.id))),
    }
}

/// The agent's `timeout` (ms) within BTCP_MAX_CALL_TIMEOUT; none or 0 is
/// BTCP_CALL_TIMEOUT.
fn timeout_of(asked: Option<u64>, config: &Config) -> Duration {
    match asked {
        Some(0) | None => config.call_timeout,
        Some(ms) => Duration::from_millis(ms).min(config.max_call_timeout),
    }
}

/// Counts how the call ended and turns a failure into the agent's error.
fn count_answer(
    metrics: &Metrics,
    answer: Result<Box<RawValue>, CallError>,
    started: Instant,
    name: &str,
    session: &Session,
) -> Result<Box<RawValue>, RpcError> {
    let (outcome, answered) = match answer {
        Ok(result) => (if reports_tool_error(&result) { Outcome::ToolError } else { Outcome::Ok }, Ok(result)),
        // The browser's own error (its tool failed) goes back as it is.
        Err(CallError::Rpc(error)) => (Outcome::ToolError, Err(error)),
        Err(CallError::Timeout(limit)) => (Outcome::Timeout, Err(errors::timed_out(name, limit))),
        Err(CallError::Disconnected) => (Outcome::BrowserDisconnected, Err(errors::browser_disconnected(&session.id))),
        Err(CallError::Cancelled) => (Outcome::Cancelled, Err(errors::cancelled(name))),
        Err(CallError::Malformed(problem)) => {
            (Outcome::Malformed, Err(errors::malformed_answer(&problem, &session.id)))
        }
    };
    metrics.call(outcome);
    // The latency is of the calls the browser answered: a result or its own error.
    if matches!(outcome, Outcome::Ok | Outcome::ToolError) {
        metrics.call_latency(started.elapsed());
    }
    answered
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
/// result where some `"isError"` is followed by `true` is parsed (most say
/// `false` or nothing: no parse on the hot path), and only its top level counts.
fn reports_tool_error(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct ToolResult {
        #[serde(rename = "isError", default)]
        is_error: bool,
    }
    static IS_ERROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new("\"isError\""));
    let text = result.get();
    may_say_true(text, &IS_ERROR) && serde_json::from_str::<ToolResult>(text).is_ok_and(|r| r.is_error)
}

/// Whether `key` occurs in `text` followed (after blanks, a colon, blanks) by
/// `true`. memchr's searcher, built once: building a searcher for each
/// answer was 2 % of a forwarded call with std's, 4 % with memchr's.
fn may_say_true(text: &str, key: &Finder<'_>) -> bool {
    let blank = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
    key.find_iter(text.as_bytes()).any(|at| {
        let rest = text[at + key.needle().len()..].trim_start_matches(blank);
        rest.strip_prefix(':').is_some_and(|value| value.trim_start_matches(blank).starts_with("true"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    /// Where the call's own reading answers, serde's derive reads the same;
    /// where serde refuses, it declines (and serde's error is the answer).
    #[test]
    fn a_calls_params_read_as_serde_reads_them() {
        let cases = [
            r#"{"name":"echo","arguments":{}}"#,
            r#"{"name":"echo"}"#,
            r#"{"name":"echo","arguments":null,"timeout":null}"#,
            r#" { "timeout" : 250 , "arguments" : {"a": [1, "\"", {"b": null}]}, "name" : "é 🦀", "extra": [1] } "#,
            r#"{"name":"echo","timeout":18446744073709551615}"#,
            r#"{"name":"echo","arguments":[1,2]}"#,
            // Beyond u64: saturated, then capped like any other.
            r#"{"name":"echo","timeout":18446744073709551616}"#,
            r#"{"name":"echo","timeout":99999999999999999999}"#,
            // Serde reads these, the common reading declines them.
            r#"{"name":"say \"hi\""}"#,
            r#"{"na\u006de":"echo"}"#,
            r#"{"name":"echo","timeout":-0}"#,
            r#"{"name":"echo","timeout":1e20}"#,
            // Serde refuses these.
            r#"{"name":"echo","name":"again"}"#,
            r#"{"name":"echo","timeout":1.5}"#,
            r#"{"name":"echo","timeout":1.0}"#,
            r#"{"name":"echo","timeout":-1}"#,
            r#"{"name":"echo","timeout":-99999999999999999999}"#,
            r#"{"name":"echo","timeout":"5"}"#,
            r#"{"name":"echo","timeout":true}"#,
            r#"{"name":"echo","timeout":{}}"#,
            r#"{"name":null}"#,
            r#"{"name":7}"#,
            r#"{"arguments":{}}"#,
            r#"{}"#,
            r#"["echo"]"#,
        ];
        let mut read_here = 0;
        for text in cases {
            let serde = serde_json::from_str::<OwnedCallParams>(text);
            let Some(common) = CallParams::common(text) else {
                continue;
            };
            read_here += 1;
            let serde = serde.unwrap_or_else(|e| panic!("{text}: read, where serde says {e}"));
            assert_eq!(common.name, serde.name, "{text}");
            assert_eq!(
                common.arguments.map(|a| a.get().to_owned()),
                serde.arguments.map(|a| a.get().to_owned()),
                "{text}"
            );
            assert_eq!(common.timeout, serde.timeout, "{text}");
        }
        assert_eq!(read_here, 8, "the first eight are of the common shape");
        let read = |text| CallParams::common(text).map(|p| (p.name.into_owned(), p.timeout));
        assert_eq!(read(r#"{"name":"echo","arguments":{}}"#), Some(("echo".into(), None)));
        assert_eq!(read(r#"{"name":"say \"hi\""}"#), None, "escapes go to serde");
        assert_eq!(read(r#"{"name":"echo","name":"again"}"#), None, "so do duplicates");
        // Through `read`, what the common reading declines gets serde's answer.
        let params = raw(r#"{"name":"say \"hi\"","timeout":5}"#);
        let read = CallParams::read(&params).unwrap();
        assert_eq!((read.name.as_ref(), read.timeout), ("say \"hi\"", Some(5)));
        let error = CallParams::read(&raw(r#"{"name":"echo","timeout":1.5}"#)).err().unwrap();
        assert_eq!(error.code, RpcError::INVALID_PARAMS);
        assert!(error.message.contains("timeout"), "{}", error.message);
    }

    /// Every shape of `timeout`, both ways it is read: whole milliseconds,
    /// saturating beyond u64 (then capped); anything else refused.
    #[test]
    fn a_timeout_is_whole_milliseconds_and_saturates_beyond_u64() {
        let max = Some(Some(u64::MAX));
        let cases: [(&str, Option<Option<u64>>); 16] = [
            ("null", Some(None)),
            ("0", Some(Some(0))),
            ("-0", Some(Some(0))),
            ("250", Some(Some(250))),
            ("18446744073709551615", max),
            ("18446744073709551616", max),
            ("99999999999999999999", max),
            ("1e20", max),
            ("1.5", None),
            ("1.0", None),
            ("-1", None),
            ("-99999999999999999999", None),
            (r#""5""#, None),
            ("true", None),
            ("{}", None),
            ("[]", None),
        ];
        for (timeout, expected) in cases {
            let params = raw(&format!(r#"{{"name":"echo","timeout":{timeout}}}"#));
            let serde = serde_json::from_str::<OwnedCallParams>(params.get()).map(|p| p.timeout).ok();
            assert_eq!(serde, expected, "serde, timeout {timeout}");
            let read = CallParams::read(&params).map(|p| p.timeout);
            assert_eq!(read.as_ref().ok().copied(), expected, "read, timeout {timeout}");
            if let Err(error) = read {
                assert_eq!(error.code, RpcError::INVALID_PARAMS, "{timeout}");
                assert!(error.message.contains("timeout"), "{}", error.message);
            }
        }
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
        assert!(reports_tool_error(&raw("{\"isError\" \n:\t true, \"content\": []}")));
        assert!(!reports_tool_error(&raw(r#"{"content": [{"text": "\"isError\": true"}]}"#)));
    }
}
