//! Which of the page's connections have shown the token, and the rule for
//! those that have not, so that idle sockets can never lock a person out.
//!
//! The port serves at most `MAX_CONNECTIONS` connections, and anyone on the
//! machine can open them without a token. So, as the engine does for
//! connections that have not completed their handshake: those that have not
//! yet sent a request with the token ("unproven") may hold at most a share
//! of the slots ([`UNPROVEN_SHARE`] of them), the oldest of them closed to
//! admit a new one past it, and each is closed if it has shown nothing within
//! [`PROOF_DEADLINE`]. A person's request with the token always finds a slot,
//! and its connection then counts as theirs.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long a new connection may take to send a request with the token.
pub const PROOF_DEADLINE: Duration = Duration::from_secs(10);

/// One connection to the page.
#[derive(Debug)]
pub struct PageConnection {
    id: u64,
    proven: AtomicBool,
    /// Cancelled to close it (evicted or past its deadline).
    close: CancellationToken,
}

impl PageConnection {
    /// It sent a request with the token: it no longer counts as unproven.
    pub fn prove(&self) {
        self.proven.store(true, Ordering::Relaxed);
    }

    pub fn is_proven(&self) -> bool {
        self.proven.load(Ordering::Relaxed)
    }

    /// Resolves once the connection is to be closed: evicted to admit a
    /// newer one, or unproven at [`PROOF_DEADLINE`].
    pub async fn closing(&self) {
        tokio::select! {
            () = self.close.cancelled() => {}
            () = self.deadline() => {}
        }
    }

    async fn deadline(&self) {
        tokio::time::sleep(PROOF_DEADLINE).await;
        if self.is_proven() {
            std::future::pending::<()>().await;
        }
        tracing::debug!(conn = self.id, "page connection closed: no request with the token in time");
    }
}

/// The connections that have not shown the token, oldest first.
#[derive(Debug)]
pub struct UnprovenConnections {
    share: usize,
    next_id: AtomicU64,
    connections: Mutex<VecDeque<Arc<PageConnection>>>,
}

impl UnprovenConnections {
    /// At most `share` connections may be unproven at once.
    pub fn new(share: usize) -> UnprovenConnections {
        UnprovenConnections { share: share.max(1), next_id: AtomicU64::new(0), connections: Mutex::default() }
    }

    /// A new connection, unproven; the oldest unproven one is closed if the
    /// share is taken.
    pub fn admit(&self) -> Arc<PageConnection> {
        let connection = Arc::new(PageConnection {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            proven: AtomicBool::new(false),
            close: CancellationToken::new(),
        });
        let mut connections = self.connections.lock();
        connections.retain(|c| !c.is_proven() && !c.close.is_cancelled());
        if connections.len() >= self.share
            && let Some(oldest) = connections.pop_front()
        {
            tracing::warn!(
                conn = oldest.id,
                share = self.share,
                "too many page connections without the token; closing the oldest"
            );
            oldest.close.cancel();
        }
        connections.push_back(connection.clone());
        connection
    }

    /// A connection that ended is no longer counted.
    pub fn forget(&self, connection: &PageConnection) {
        connection.close.cancel();
        self.connections.lock().retain(|c| !c.is_proven() && !c.close.is_cancelled());
    }

    /// How many connections are unproven.
    #[cfg(test)]
    fn count(&self) -> usize {
        let mut connections = self.connections.lock();
        connections.retain(|c| !c.is_proven() && !c.close.is_cancelled());
        connections.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_share_the_oldest_unproven_connection_is_closed() {
        let unproven = UnprovenConnections::new(2);
        let first = unproven.admit();
        let second = unproven.admit();
        second.prove();
        let third = unproven.admit();
        assert_eq!(unproven.count(), 2);
        assert!(!first.close.is_cancelled(), "a proven one does not count");
        let fourth = unproven.admit();
        assert!(first.close.is_cancelled(), "the oldest unproven one makes room");
        assert!(!second.close.is_cancelled() && !third.close.is_cancelled() && !fourth.close.is_cancelled());
        unproven.forget(&third);
        assert_eq!(unproven.count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unproven_connection_is_closed_at_its_deadline_a_proven_one_is_not() {
        let unproven = UnprovenConnections::new(4);
        let idle = unproven.admit();
        let person = unproven.admit();
        person.prove();
        let closed = tokio::time::timeout(PROOF_DEADLINE + Duration::from_secs(1), idle.closing()).await;
        assert!(closed.is_ok());
        let kept = tokio::time::timeout(PROOF_DEADLINE * 3, person.closing()).await;
        assert!(kept.is_err());
    }
}
