//! `ping` on both servers: the health of the Ruby runtime, answered without
//! a hello and without waiting for an evaluation.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use rpc_core::router::Answer;
use serde_json::value::RawValue;

use crate::state::App;

/// How long `ping` waits for a runtime that is starting to run or fail.
const PING_SETTLE: Duration = Duration::from_secs(3);

/// The answer to `ping` on both servers: `{"status": "ok"}` while Ruby runs,
/// written as the constant it is (health checks and benchmarks call it a
/// lot). Otherwise the status is the runtime's state (`starting`,
/// `unavailable`, `stopped`) with the `problem` when there is one: a bridge
/// that cannot evaluate must not look healthy.
pub struct Pong {
    status: &'static str,
    problem: Option<String>,
}

impl Pong {
    fn from_health((state, problem): (&'static str, Option<String>)) -> Pong {
        Pong { status: if state == "running" { "ok" } else { state }, problem }
    }
}

impl serde::Serialize for Pong {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        static HEALTHY: LazyLock<&RawValue> =
            LazyLock::new(|| serde_json::from_str(r#"{"status":"ok"}"#).expect("a constant JSON object"));
        if self.status == "ok" && self.problem.is_none() {
            return HEALTHY.serialize(s);
        }
        let mut pong = s.serialize_struct("Pong", 2)?;
        pong.serialize_field("status", self.status)?;
        if let Some(problem) = &self.problem {
            pong.serialize_field("problem", problem)?;
        }
        pong.end()
    }
}

/// The `ping` method of both servers, answered at once (`method_now`: no
/// future, no per-call context). Only a runtime that is starting makes it
/// wait (up to [`PING_SETTLE`]); it never waits for an evaluation.
pub fn ping(app: &Arc<App>) -> Answer<Pong> {
    // The healthy answer without `health`'s pair: returned and moved into a
    // `Pong`, it was a stalled copy on every ping (5 % of the bridge's time
    // at 8 connections, perf).
    if app.runtime.is_running() {
        return Answer::Now(Ok(Pong::from_health(("running", None))));
    }
    let now = app.runtime.health();
    if now.0 != "starting" {
        return Answer::Now(Ok(Pong::from_health(now)));
    }
    let app = app.clone();
    Answer::Later(Box::pin(async move { Ok(Pong::from_health(app.runtime.settled_health(PING_SETTLE).await)) }))
}
