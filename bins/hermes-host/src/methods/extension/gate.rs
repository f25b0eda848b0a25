//! The gate every extension request passes first: held while the
//! extension's `initialize` is under way (then served, in order), refused
//! with -32001 once it failed. An extension may send requests as soon as it
//! starts, before its `initialize` answer has reached the host. Once it is
//! being stopped, a request held here is answered `shutting_down` at once;
//! the engine answers the rest (`PeerHandle::stop_serving`).

use rpc_core::peer::not_serving;
use rpc_core::{ConnCtx, Gate, RpcError};

use crate::errors;
use crate::state::{ExtensionSession, Readiness};

fn not_initialised() -> RpcError {
    RpcError::new(errors::NOT_INITIALISED, "the extension is not initialised")
}

pub fn hold_until_initialized(conn: &ConnCtx<ExtensionSession>, _method: &str) -> Gate {
    // Read in place: only a request that has to wait takes a receiver of its own.
    let now = *conn.state.ready.borrow();
    match now {
        Readiness::Running => Gate::Open,
        Readiness::Stopping => Gate::Closed(not_serving()),
        Readiness::Failed => Gate::Closed(not_initialised()),
        Readiness::Starting => Gate::Wait(Box::pin({
            let mut ready = conn.state.ready.clone();
            async move {
                match ready.wait_for(|r| *r != Readiness::Starting).await.map(|r| *r) {
                    Ok(Readiness::Running) => Ok(()),
                    Ok(Readiness::Stopping) => Err(not_serving()),
                    _ => Err(not_initialised()),
                }
            }
        })),
    }
}
