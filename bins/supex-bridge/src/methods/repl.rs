//! The REPL server's own methods (port 4433), an interactive Ruby console for
//! humans: `hello`, `eval`, `complete`. Its method table is in
//! [`crate::methods`].
//!
//! All REPL clients share one top-level binding, as in a Ruby console: locals
//! defined by one client are there for the next. Evaluations queue FIFO with
//! the bridge's. An exception is an ordinary `success: false` result whose
//! `output` reads like a console's (`#<ZeroDivisionError: divided by 0>` and
//! up to 5 backtrace lines); only runtime problems (timeout, crash, no Ruby)
//! are JSON-RPC errors.

use std::sync::Arc;

use rpc_core::{Ctx, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::errors;
use crate::methods::handshake::{HelloFields, ServerInfo, check_token};
use crate::runtime::{Eval, Scope, Show};
use crate::state::{App, ReplConn};

/// Backtrace lines shown under an exception.
const BACKTRACE_LINES: usize = 5;

#[derive(Serialize)]
pub struct Welcome {
    success: bool,
    session: String,
    server: ServerInfo,
}

pub async fn hello(app: Arc<App>, cx: Ctx<ReplConn>, params: Value) -> Result<Welcome, RpcError> {
    let handshake = &cx.state.handshake;
    handshake.admit(&cx)?;
    let fields = HelloFields::new(params).map_err(|e| handshake.fail(&cx, e))?;
    if let Err(e) = check_token(app.auth_token.as_deref(), fields.token()) {
        tracing::warn!(conn = cx.peer.conn_id(), "REPL authentication failed: invalid or missing token");
        return Err(handshake.fail(&cx, e));
    }
    let identity =
        (|| Ok::<_, RpcError>((fields.text("name", false)?, fields.text("version", false)?, fields.pid(false)?)))();
    let (name, version, pid) = identity.map_err(|e| handshake.fail(&cx, e))?;
    let session = cx
        .state
        .session
        .get_or_init(|| {
            let id = uuid::Uuid::new_v4().simple().to_string();
            format!("s{}-{}", &id[..12], pid.unwrap_or(0))
        })
        .clone();
    tracing::info!(
        conn = cx.peer.conn_id(),
        name = name.as_deref().unwrap_or("unknown"),
        version = version.as_deref().unwrap_or("-"),
        pid = pid.unwrap_or(0),
        %session,
        "REPL client identified"
    );
    handshake.identify(&cx);
    Ok(Welcome {
        success: true,
        session,
        server: ServerInfo { name: "supex-repl", version: env!("CARGO_PKG_VERSION") },
    })
}

#[derive(Deserialize)]
pub struct Code {
    code: String,
}

#[derive(Serialize)]
pub struct Evaluated {
    success: bool,
    output: String,
}

pub async fn eval(app: Arc<App>, cx: Ctx<ReplConn>, params: Code) -> Result<Evaluated, RpcError> {
    // One evaluation of this connection in the queue at a time, with room for its reply.
    let _seated = cx.state.seat.take(&cx.peer).await?;
    let evaluated = app
        .runtime
        .eval(Eval {
            code: params.code,
            scope: Scope::Repl,
            file: Some("(repl)".into()),
            show: Show::Inspect,
            timeout: app.eval_timeout,
        })
        .await
        .map_err(|e| errors::runtime(&e))?;
    let mut output = evaluated.output;
    if !output.is_empty() && !output.ends_with('\n') {
        output.push('\n');
    }
    let success = match evaluated.result {
        Ok(inspected) => {
            output.push_str("=> ");
            output.push_str(&inspected);
            output.push('\n');
            true
        }
        Err(exception) => {
            output.push_str(&format!("#<{}: {}>\n", exception.class, exception.message));
            for line in exception.backtrace.iter().take(BACKTRACE_LINES) {
                output.push_str("\tfrom ");
                output.push_str(line);
                output.push('\n');
            }
            false
        }
    };
    Ok(Evaluated { success, output })
}

pub async fn complete(app: Arc<App>, params: Code) -> Result<Value, RpcError> {
    let complete = app.runtime.complete(&params.code).await.map_err(|e| errors::runtime(&e))?;
    Ok(json!({ "complete": complete }))
}
