//! `host/status`: the daemon's own health, for scripts and service checks.

use rpc_core::{Ctx, NoParams, RpcError};
use serde::Serialize;

use crate::state::ControlSession;

#[derive(Serialize)]
pub struct Status {
    version: &'static str,
    pid: u32,
    extensions: usize,
    /// Log lines the daemon could not write since it started (stderr's
    /// reader not keeping up, or gone).
    log_lines_dropped: u64,
}

pub async fn status(ctx: Ctx<ControlSession>, _: NoParams) -> Result<Status, RpcError> {
    Ok(Status {
        version: env!("CARGO_PKG_VERSION"),
        pid: std::process::id(),
        extensions: ctx.state.host.extensions().len(),
        log_lines_dropped: rpc_core::log_sink::dropped_lines(),
    })
}
