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

use rpc_core::router::Answer;
use rpc_core::{ConnCtx, NoParams, Router};
use serde_json::json;

use crate::state::{App, BridgeConn, Handshaking, ReplConn};

const BRIDGE_HELLO_HINT: &str = "Send hello method with params: name, version, agent, pid";
const REPL_HELLO_HINT: &str = "Send hello first (params: name, version, pid, token)";

/// Every method the bridge serves. All but `hello` and `ping` wait for a
/// successful hello; a frame in the legacy dialect becomes a `tools/call`
/// (one without an id, a call answered in order with `"id": null`). Every
/// handler is a reply owed ([`handshake::owing`]).
pub fn bridge_router(app: Arc<App>) -> Arc<Router<BridgeConn>> {
    let token_required = app.token_required();
    let gate = move |conn: &BridgeConn| handshake::gate(conn, token_required, BRIDGE_HELLO_HINT);
    let hello_app = app.clone();
    let ping_app = app.clone();
    let call_app = app.clone();
    let legacy_app = app;
    Router::new()
        .method("hello", move |cx, params| {
            handshake::owing(&cx.clone(), true, bridge::hello::handle(hello_app.clone(), cx, params))
        })
        .method_now("ping", move |conn, _: NoParams| owing_later(conn, ping::ping(&ping_app)))
        .method("tools/list", |cx, _: NoParams| handshake::owing(&cx, true, async { Ok(tools::list()) }))
        .method("tools/call", move |cx, params| {
            handshake::owing(&cx.clone(), true, tools::call(call_app.clone(), cx, params))
        })
        // The Supex driver asks for resources; this runtime has none to offer.
        .method("resources/list", |cx, _: NoParams| handshake::owing(&cx, true, async { Ok(json!({"resources": []})) }))
        .method(bridge::legacy::unnumbered_method(), move |cx, call| {
            let request = cx.request_id().is_some();
            let admitted = gate(&cx.state);
            let answer = bridge::legacy::answer_unnumbered(legacy_app.clone(), admitted, cx.clone(), call);
            handshake::owing(&cx, request, answer)
        })
        .guard_conn(move |cx, method| match method {
            "hello" | "ping" => Ok(()),
            // Gated by its handler as it is read: the refusal is its answer, with `"id": null`.
            _ if method == bridge::legacy::unnumbered_method() => Ok(()),
            _ => gate(&cx.state),
        })
        .rewrite_invalid(bridge::legacy::adapt)
        .build()
        .expect("the bridge registers each method once")
}

/// Every method the REPL server serves. All but `hello` and `ping` wait for
/// a successful hello. Every handler is a reply owed ([`handshake::owing`]).
pub fn repl_router(app: Arc<App>) -> Arc<Router<ReplConn>> {
    let token_required = app.token_required();
    let hello_app = app.clone();
    let ping_app = app.clone();
    let eval_app = app.clone();
    let complete_app = app;
    Router::new()
        .method("hello", move |cx, params| {
            handshake::owing(&cx.clone(), true, repl::hello(hello_app.clone(), cx, params))
        })
        .method_now("ping", move |conn, _: NoParams| owing_later(conn, ping::ping(&ping_app)))
        .method("eval", move |cx, params| handshake::owing(&cx.clone(), true, repl::eval(eval_app.clone(), cx, params)))
        .method("complete", move |cx, params| handshake::owing(&cx, true, repl::complete(complete_app.clone(), params)))
        .guard_conn(move |cx, method| match method {
            "hello" | "ping" => Ok(()),
            _ => handshake::gate(&*cx.state, token_required, REPL_HELLO_HINT),
        })
        .build()
        .expect("the REPL registers each method once")
}

/// An answer of `ping` that has to wait (for a runtime that is starting) is a
/// reply owed like any other; one given at once is written before anything.
fn owing_later<S: Handshaking, R: Send + 'static>(conn: &ConnCtx<S>, answer: Answer<R>) -> Answer<R> {
    match answer {
        Answer::Later(run) => Answer::Later(Box::pin(handshake::owing(conn, true, run))),
        now => now,
    }
}
