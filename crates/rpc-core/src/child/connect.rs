//! An rpc-core peer over a child's stdio.

use std::io;
use std::sync::Arc;
use std::time::Duration;

pub use tokio::process::{ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

use crate::codec::Transport;
use crate::peer::{CloseReason, Connection, PeerConfig, PeerHandle};
use crate::router::Router;

use super::process::ChildProcess;

/// How long after the child's exit its stdout may still deliver what it wrote
/// last (a reply sent just before exiting) before the connection is closed.
const EXIT_DRAIN: Duration = Duration::from_millis(100);

/// Runs an rpc-core peer over the child's stdout and stdin (both must be
/// piped and not taken), framed by `frame` (e.g. `Transport::content_length`).
///
/// The connection closes when the child exits even if a grandchild keeps its
/// stdout open, so calls still pending fail at once instead of at their
/// timeouts. Returns the handle and the task serving the connection.
pub fn connect<S: Send + Sync + 'static>(
    child: &mut ChildProcess,
    frame: impl FnOnce(ChildStdout, ChildStdin) -> Transport,
    router: Arc<Router<S>>,
    state: Arc<S>,
    config: PeerConfig,
) -> io::Result<(PeerHandle, JoinHandle<CloseReason>)> {
    let (stdout, stdin) = match (child.stdout.take(), child.stdin.take()) {
        (Some(stdout), Some(stdin)) => (stdout, stdin),
        (stdout, stdin) => {
            (child.stdout, child.stdin) = (stdout, stdin);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: a peer needs the child's stdin and stdout piped and not taken", child.name),
            ));
        }
    };
    let (peer, connection) = Connection::new(frame(stdout, stdin), router, state, config);
    let exited = child.exited();
    let name = child.name.clone();
    let closer = peer.clone();
    tokio::spawn(async move {
        tokio::select! {
            exit = exited => {
                // Usually EOF ends the connection right after the exit; a
                // grandchild holding stdout would keep it open forever.
                if tokio::time::timeout(EXIT_DRAIN, closer.closed()).await.is_err() {
                    tracing::debug!(child = %name, %exit, "child exited; closing its connection");
                    closer.close(1000, &format!("{name} exited ({exit})"));
                }
            }
            _ = closer.closed() => {}
        }
    });
    Ok((peer, tokio::spawn(connection.run())))
}
