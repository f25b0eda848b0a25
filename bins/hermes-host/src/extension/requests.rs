//! The extension's own requests to the host while they are served, so that
//! stopping it answers every one before its `shutdown`: the rule the engine
//! keeps for the daemon's clients (not started → -32603 `shutting_down` at
//! once; running → a grace period, then the same). The extension's stdio is
//! a connection the host opened, which the daemon's drain does not reach,
//! and closing it after `shutdown` dropped whatever still ran, unanswered.

use std::sync::Arc;
use std::time::Duration;

use rpc_core::{PeerHandle, RpcError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The requests of one run of an extension that passed the gate or wait at
/// it, and the two steps of stopping them.
pub struct Requests {
    /// No request is served any more: new ones are refused at the gate.
    closing: CancellationToken,
    /// The grace is over: those still running are answered now.
    abort: CancellationToken,
    /// How many are held at the gate or running.
    count: watch::Sender<usize>,
}

/// One request counted while it waits or runs.
pub struct Counted(Arc<Requests>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.count.send_modify(|n| *n -= 1);
    }
}

/// -32603 with `data.reason: "shutting_down"`, as the engine answers.
pub fn shutting_down() -> RpcError {
    RpcError::internal("the extension is being stopped").with_data(serde_json::json!({"reason": "shutting_down"}))
}

impl Requests {
    pub fn new() -> Arc<Requests> {
        let (count, _) = watch::channel(0);
        Arc::new(Requests { closing: CancellationToken::new(), abort: CancellationToken::new(), count })
    }

    pub fn count(self: &Arc<Self>) -> Counted {
        self.count.send_modify(|n| *n += 1);
        Counted(self.clone())
    }

    pub fn is_closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    pub async fn closing(&self) {
        self.closing.cancelled().await;
    }

    /// Resolves once the grace is over: what still runs is answered now.
    pub async fn aborted(&self) {
        self.abort.cancelled().await;
    }

    /// Stops serving: new requests are refused, those held at the gate are
    /// answered now, running ones get `grace`, then `shutting_down`.
    /// Returns once every one has its answer queued on `peer`, ahead of
    /// whatever the caller sends next (its `shutdown`).
    pub async fn close(&self, peer: &PeerHandle, grace: Duration) {
        self.closing.cancel();
        let mut count = self.count.subscribe();
        if tokio::time::timeout(grace, count.wait_for(|n| *n == 0)).await.is_err() {
            self.abort.cancel();
            let _ = count.wait_for(|n| *n == 0).await;
        }
        // A handler is counted off as it ends, before the engine queues its
        // answer: the engine says when the answers are queued (bounded, for
        // a request that never reached the counting gate).
        let _ = tokio::time::timeout(grace, peer.all_answered()).await;
    }
}
