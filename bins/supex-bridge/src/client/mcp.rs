//! `supex-bridge mcp`: a Model Context Protocol server on stdio in front of
//! the running bridge. It connects like `call` does (same host, port, token
//! and workspace settings), says `hello` with the MCP client's name, and
//! offers the bridge's tools one for one.
//!
//! A Ruby error, a denied path, the bridge being down: each is a tool result
//! with `isError: true` and the bridge's message, so the model reads it (with
//! the bridge down, `tools/list` offers the tools this build serves). The
//! next call after the bridge restarts connects again.

use parking_lot::Mutex;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mcp_front::{
    CallToolResult, Caller, Changes, Door, Failure, JsonObject, Link, McpError, ServerName, Tool, Upstream,
};
use rpc_core::PeerHandle;
use rpc_core::config::ConfigError;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::connection::{Server, address, connect, describe, request};
use crate::config::McpArgs;

/// Serves MCP on stdio until the agent closes it. An unusable `--workspace`
/// is bad configuration (exit 2), found before anything starts.
pub fn run(args: McpArgs) -> ExitCode {
    let workspace = match args.workspace.as_deref().map(std::path::absolute).transpose() {
        Ok(dir) => dir,
        Err(e) => return rpc_core::cli::bad_configuration(&ConfigError::new("--workspace", e)),
    };
    let bridge = Bridge {
        addr: address(&args.bridge.host, args.bridge.port),
        token: args.bridge.auth.auth_token,
        workspace,
        client: Mutex::new(Caller::default()),
    };
    let door = Arc::new(BridgeDoor { link: Link::new(bridge), timeout: args.timeout, changes: Changes::new() });
    rpc_core::cli::run_client(async move {
        mcp_front::serve_stdio(door).await?;
        Ok::<_, String>(ExitCode::SUCCESS)
    })
}

/// The bridge as the agent's upstream: TCP, then `hello`.
struct Bridge {
    addr: String,
    token: Option<String>,
    workspace: Option<PathBuf>,
    /// Who the agent is, for `hello`: the bridge logs it per connection.
    client: Mutex<Caller>,
}

impl Upstream for Bridge {
    async fn connect(&self) -> Result<PeerHandle, String> {
        // Says how to start the bridge when nothing listens.
        let peer = connect(Server::Bridge, &self.addr, Duration::from_secs(10)).await?;
        let caller = self.client.lock().clone();
        let mut hello = json!({
            "name": caller.name(),
            "version": caller.version(),
            "agent": "mcp",
            "pid": std::process::id(),
        });
        if let Some(token) = &self.token {
            hello["token"] = json!(token);
        }
        if let Some(dir) = &self.workspace {
            hello["workspace"] = json!(dir.to_string_lossy());
        }
        request(&peer, "hello", &hello, Duration::from_secs(10))
            .await
            .map_err(|e| format!("the bridge at {} refused hello: {}", self.addr, describe(&e)))?;
        Ok(peer)
    }
}

struct BridgeDoor {
    link: Link<Bridge>,
    timeout: Duration,
    changes: Changes,
}

impl BridgeDoor {
    fn remember(&self, caller: &Caller) {
        if caller.client.is_some() {
            *self.link.upstream().client.lock() = caller.clone();
        }
    }
}

impl Door for BridgeDoor {
    fn server_name(&self) -> ServerName {
        ServerName {
            name: "supex-bridge",
            version: env!("CARGO_PKG_VERSION"),
            instructions: "Tools of a live Ruby runtime behind supex-bridge: evaluate Ruby (state persists \
                           between calls), read, write and list files inside the bridge's allowed roots, \
                           reset the runtime. A Ruby exception comes back as a tool error with its backtrace."
                .into(),
        }
    }

    fn changes(&self) -> &Changes {
        &self.changes
    }

    async fn list_tools(&self, caller: &Caller) -> Result<Vec<Tool>, McpError> {
        self.remember(caller);
        let never = CancellationToken::new();
        let list = match self.link.call("tools/list", &json!({}), Some(Duration::from_secs(30)), &never).await {
            Ok(list) => list,
            // The bridge is down: the tools this build of it serves, so that
            // the agent can call one and read how to start the bridge.
            Err(Failure::Unreachable(why)) => {
                tracing::warn!("{why}");
                crate::methods::tools::list()
            }
            Err(failure) => return Err(failure.into_error()),
        };
        Ok(list["tools"].as_array().into_iter().flatten().filter_map(mcp_front::tool_from_json).collect())
    }

    async fn call_tool(
        &self,
        caller: &Caller,
        name: &str,
        arguments: JsonObject,
        cancel: CancellationToken,
    ) -> CallToolResult {
        self.remember(caller);
        let params = json!({"name": name, "arguments": Value::Object(arguments)});
        match self.link.call("tools/call", &params, Some(self.timeout), &cancel).await {
            Ok(result) => mcp_front::success(result),
            Err(failure) => failure.into_result(),
        }
    }
}
