//! The gate every extension request passes first: held while the
//! extension's `initialize` is under way (then served, in order), refused
//! with -32001 once it failed. An extension may send requests as soon as it
//! starts, before its `initialize` answer has reached the host. Once it
//! is being stopped, a request is answered `shutting_down` here; one that
//! runs is counted until answered ([`served`]).

use std::future::Future;
use std::pin::Pin;

use rpc_core::{ConnCtx, Ctx, Gate, RpcError};

use crate::errors;
use crate::extension::requests::shutting_down;
use crate::state::{ExtensionSession, Readiness};

fn not_initialised() -> RpcError {
    RpcError::new(errors::NOT_INITIALISED, "the extension is not initialised")
}

pub fn hold_until_initialized(conn: &ConnCtx<ExtensionSession>, _method: &str) -> Gate {
    let requests = &conn.state.requests;
    // Being stopped: answered at once, before it is told `shutdown`.
    if requests.is_closing() {
        return Gate::Closed(shutting_down());
    }
    // Read in place: only a request that has to wait takes a receiver of its own.
    let now = *conn.state.ready.borrow();
    match now {
        Readiness::Running => Gate::Open,
        Readiness::Failed => Gate::Closed(not_initialised()),
        Readiness::Starting => Gate::Wait(Box::pin({
            let mut ready = conn.state.ready.clone();
            // Counted while held, so that stopping waits for its answer.
            let (requests, counted) = (requests.clone(), requests.count());
            async move {
                let _counted = counted;
                let ready = tokio::select! {
                    ready = ready.wait_for(|r| *r != Readiness::Starting) => ready.map(|r| *r),
                    () = requests.closing() => return Err(shutting_down()),
                };
                match ready {
                    Ok(Readiness::Running) => Ok(()),
                    _ => Err(not_initialised()),
                }
            }
        })),
    }
}

type Served<R> = Pin<Box<dyn Future<Output = Result<R, RpcError>> + Send>>;

/// `handler`, counted while it runs, and answered `shutting_down` once the
/// extension is stopping and the grace is over.
pub fn served<P, R, F, Fut>(handler: F) -> impl Fn(Ctx<ExtensionSession>, P) -> Served<R> + Send + Sync + 'static
where
    F: Fn(Ctx<ExtensionSession>, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
    R: 'static,
{
    move |cx, params| {
        let requests = cx.state.requests.clone();
        let counted = requests.count();
        let work = handler(cx, params);
        Box::pin(async move {
            let _counted = counted;
            tokio::select! {
                biased;
                answer = work => answer,
                () = requests.aborted() => Err(shutting_down()),
            }
        })
    }
}
