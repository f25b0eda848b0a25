//! The method tables of both servers, every method in one place:
//! [`bridge_router`] (port 9876: the Supex bridge, for tools and agents) and
//! [`repl_router`] (port 4433: the console, for humans). Both share one
//! [`App`]; each connection has its own state ([`BridgeConn`], [`ReplConn`]).
//!
//! One file per group: [`ping`] (both servers), [`handshake`] (what both
//! `hello`s share), [`bridge`] (the bridge's `hello` and legacy dialect),
//! [`tools`] (`tools/list` and `tools/call`: the tool table and the tools),
//! [`repl`] (the REPL's `hello`, `eval`, `complete`).

pub mod bridge;
pub mod handshake;
mod ping;
mod repl;
pub mod tools;

use std::sync::Arc;

use rpc_core::{NoParams, Router};
use serde_json::json;

use crate::state::{App, BridgeConn, ReplConn};

const BRIDGE_HELLO_HINT: &str = "Send hello method with params: name, version, agent, pid";
const REPL_HELLO_HINT: &str = "Send hello first (params: name, version, pid, token)";

/// Every method the bridge serves. All but `hello` and `ping` wait for a
/// successful hello; a frame in the legacy dialect becomes a `tools/call`
/// (one without an id, a call answered in order with `"id": null`).
pub fn bridge_router(app: Arc<App>) -> Arc<Router<BridgeConn>> {
    let token_required = app.token_required();
    let gate = move |conn: &BridgeConn| match conn.handshake.is_identified() {
        true => Ok(()),
        false => Err(handshake::not_identified(token_required, BRIDGE_HELLO_HINT)),
    };
    let hello_app = app.clone();
    let ping_app = app.clone();
    let call_app = app.clone();
    let legacy_app = app;
    Router::new()
        .method("hello", move |cx, params| bridge::hello::handle(hello_app.clone(), cx, params))
        .method_now("ping", move |_, _: NoParams| ping::ping(&ping_app))
        .method("tools/list", |_, _: NoParams| async { Ok(tools::list()) })
        .method("tools/call", move |cx, params| tools::call(call_app.clone(), cx, params))
        // The Supex driver asks for resources; this runtime has none to offer.
        .method("resources/list", |_, _: NoParams| async { Ok(json!({"resources": []})) })
        .method(bridge::legacy::unnumbered_method(), move |cx, call| {
            bridge::legacy::answer_unnumbered(legacy_app.clone(), gate, cx, call)
        })
        .guard_conn(move |cx, method| match method {
            "hello" | "ping" => Ok(()),
            // Gated where it runs: the refusal is its answer, with `"id": null`.
            _ if method == bridge::legacy::unnumbered_method() => Ok(()),
            _ => gate(&cx.state),
        })
        .rewrite_invalid(bridge::legacy::adapt)
        .build()
        .expect("the bridge registers each method once")
}

/// Every method the REPL server serves. All but `hello` and `ping` wait for
/// a successful hello.
pub fn repl_router(app: Arc<App>) -> Arc<Router<ReplConn>> {
    let token_required = app.token_required();
    let hello_app = app.clone();
    let ping_app = app.clone();
    let eval_app = app.clone();
    let complete_app = app;
    Router::new()
        .method("hello", move |cx, params| repl::hello(hello_app.clone(), cx, params))
        .method_now("ping", move |_, _: NoParams| ping::ping(&ping_app))
        .method("eval", move |_, params| repl::eval(eval_app.clone(), params))
        .method("complete", move |_, params| repl::complete(complete_app.clone(), params))
        .guard_conn(move |cx, method| match method {
            "hello" | "ping" => Ok(()),
            _ if cx.state.handshake.is_identified() => Ok(()),
            _ => Err(handshake::not_identified(token_required, REPL_HELLO_HINT)),
        })
        .build()
        .expect("the REPL registers each method once")
}
