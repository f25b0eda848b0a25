//! A task's control socket as the client commands reach it: the task named
//! by its name or its directory, the connection, and one call.

use std::path::PathBuf;

use rpc_core::{Ctx, PeerHandle, Router, Transport};
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::config::SocketArgs;

/// A task given as its name or as its directory (then its name is the directory's).
pub fn socket_path(task: &str, sockets: &SocketArgs) -> Result<PathBuf, String> {
    let dir = sockets.dir().map_err(|e| e.to_string())?;
    let (name, _) = task_name(task)?;
    Ok(dir.join(format!("{name}.sock")))
}

/// The name of a task given as its name or as its directory, and the
/// directory (canonical) when it was given as one.
pub fn task_name(task: &str) -> Result<(String, Option<PathBuf>), String> {
    let path = std::path::Path::new(task);
    let (name, dir) = if task.contains('/') || path.join("prd.json").exists() {
        let canonical = std::fs::canonicalize(path).map_err(|e| format!("{task}: {e}"))?;
        let name = canonical.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        (name, Some(canonical))
    } else {
        (task.to_owned(), None)
    };
    crate::config::check_task_name(&name).map_err(|e| format!("task {e}"))?;
    Ok((name, dir))
}

/// A connection to a task and the events it sends (after `subscribe`).
pub struct Connected {
    pub peer: PeerHandle,
    pub events: mpsc::UnboundedReceiver<Value>,
}

pub async fn connect(task: &str, sockets: &SocketArgs) -> Result<Connected, String> {
    let path = socket_path(task, sockets)?;
    let stream = UnixStream::connect(&path).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            format!("task {task:?} is not running (no server at {})", path.display())
        }
        _ => format!("{}: {e}", path.display()),
    })?;
    let (read, write) = stream.into_split();
    let (sender, events) = mpsc::unbounded_channel();
    let router = Router::new()
        .method("event", |ctx: Ctx<mpsc::UnboundedSender<Value>>, params: Value| {
            let _ = ctx.state.send(params);
            std::future::ready(Ok(()))
        })
        .build()
        .map_err(|e| e.to_string())?;
    let transport = Transport::ndjson(read, write, rpc_core::codec::DEFAULT_MAX_MESSAGE);
    let peer = rpc_core::client::spawn_with(transport, router, sender, rpc_core::PeerConfig::default());
    Ok(Connected { peer, events })
}

/// Calls `method` and returns its result, or a message for the user.
pub async fn call(peer: &PeerHandle, method: &str, params: Value) -> Result<Value, String> {
    let raw = peer.request_raw(method, &params, Some(std::time::Duration::from_secs(10))).await;
    let raw = raw.map_err(|e| format!("{method}: {e}"))?;
    serde_json::from_str(raw.get()).map_err(|e| format!("{method}: {e}"))
}
