//! `get_status`: the seed's result shape, field for field; and
//! `get_server_status`, ours: the daemon's own health.

use std::sync::Arc;

use rpc_core::router::Answer;
use rpc_core::{ConnCtx, Ctx, NoParams, RpcError};

use super::events::Client;
use crate::state::{Session, StatusReply};

/// Answered in its turn (`method_now`): a snapshot can be large (the last
/// lines of output), and a batch or a queue of them is built one at a time,
/// as each is sent, never all at once when they are read.
pub fn get_status(
    session: Arc<Session>,
) -> impl Fn(&ConnCtx<Client>, NoParams) -> Answer<StatusReply> + Send + Sync + 'static {
    move |_, _| Answer::Now(Ok(session.snapshot()))
}

/// The daemon's own health: not the loop's (that is `get_status`, whose
/// shape is the seed's and stays so).
#[derive(serde::Serialize)]
pub struct ServerStatus {
    version: &'static str,
    pid: u32,
    /// Log lines the daemon could not write since it started (stderr's
    /// reader not keeping up, or gone).
    log_lines_dropped: u64,
}

pub async fn get_server_status(_: Ctx<Client>, _: NoParams) -> Result<ServerStatus, RpcError> {
    Ok(ServerStatus {
        version: env!("CARGO_PKG_VERSION"),
        pid: std::process::id(),
        log_lines_dropped: rpc_core::log_sink::dropped_lines(),
    })
}
