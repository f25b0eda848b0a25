//! `hello`: the bridge's handshake. The token is checked first (in constant
//! time), then the client's identity fields, then the optional workspace.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rpc_core::{Ctx, RpcError};
use serde::Serialize;
use serde_json::Value;

use crate::methods::handshake::{HelloFields, ServerInfo, check_token};
use crate::methods::tools::files::checked;
use crate::paths::resolve;
use crate::state::{App, BridgeConn};

#[derive(Serialize)]
pub struct Welcome {
    success: bool,
    message: &'static str,
    server: ServerInfo,
}

pub async fn handle(app: Arc<App>, cx: Ctx<BridgeConn>, params: Value) -> Result<Welcome, RpcError> {
    let handshake = &cx.state.handshake;
    handshake.admit(&cx)?;
    let fields = HelloFields::new(params).map_err(|e| handshake.fail(&cx, e))?;
    if let Err(e) = check_token(app.auth_token.as_deref(), fields.token()) {
        tracing::warn!(conn = cx.peer.conn_id(), "bridge authentication failed: invalid or missing token");
        return Err(handshake.fail(&cx, e));
    }
    let identity = (|| {
        let name = fields.text("name", true)?.unwrap_or_default();
        let version = fields.text("version", true)?.unwrap_or_default();
        let agent = fields.text("agent", true)?.unwrap_or_default();
        let pid = fields.pid(true)?.unwrap_or_default();
        let workspace = match fields.text("workspace", false)? {
            Some(dir) => Some(workspace(&app, &dir)?),
            None => None,
        };
        Ok::<_, RpcError>((name, version, agent, pid, workspace))
    })();
    let (name, version, agent, pid, workspace) = identity.map_err(|e| handshake.fail(&cx, e))?;
    tracing::info!(
        conn = cx.peer.conn_id(),
        %name, %version, %agent, pid,
        workspace = %workspace.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_default(),
        "bridge client identified"
    );
    cx.state.set_workspace(workspace);
    handshake.identify(&cx);
    Ok(Welcome {
        success: true,
        message: "Client identified",
        server: ServerInfo { name: "supex-runtime", version: env!("CARGO_PKG_VERSION") },
    })
}

/// Checks a `workspace`: an existing directory (relative ones are taken from
/// the project root), canonicalised. With SUPEX_ALLOWED_ROOTS set it must lie
/// inside them (-32002 otherwise, like any path outside); without, it becomes
/// a root for this connection, but `/` is refused unless every path is
/// allowed anyway: a client should not open the whole disk for itself.
fn workspace(app: &App, dir: &str) -> Result<PathBuf, RpcError> {
    let invalid = |why: String| RpcError::invalid_params(format!("workspace: {why}"));
    if dir.contains('\0') {
        return Err(invalid("contains a NUL byte".into()));
    }
    let resolved = if app.policy.workspace_is_a_root() {
        let path = app.policy.project_root().join(dir);
        resolve(&path).map_err(|e| invalid(format!("{dir}: {e}")))?
    } else {
        checked(app, dir, None)?.resolved().to_owned()
    };
    if !resolved.is_dir() {
        return Err(invalid(format!("{dir} is not an existing directory")));
    }
    if resolved == Path::new("/") && app.policy.roots().is_some() {
        return Err(invalid("/ would let file tools touch the whole disk; give the project directory".into()));
    }
    Ok(resolved)
}
