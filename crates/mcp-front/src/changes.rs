//! Change notifications: the door says what changed once; each MCP session
//! hears it the way its protocol era expects.
//!
//! - `initialize`-era sessions get `notifications/tools/list_changed` and,
//!   for URIs they `resources/subscribe`d, `notifications/resources/updated`
//!   on the session itself.
//! - 2026-07-28 sessions get them on their `subscriptions/listen` streams,
//!   filtered by rmcp to what each stream asked for.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::{Peer, SubscriptionContext};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// Something an agent may want to re-read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Tools,
    Resource(String),
}

/// The door's broadcaster. Cheap to clone; sending with no session listening
/// is not an error.
#[derive(Clone, Debug)]
pub struct Changes {
    tx: broadcast::Sender<Change>,
}

impl Default for Changes {
    fn default() -> Self {
        Self::new()
    }
}

impl Changes {
    pub fn new() -> Self {
        // A session that falls this far behind hears "everything changed"
        // (see `Missed`), which is what it would re-read anyway.
        Self { tx: broadcast::channel(64).0 }
    }

    pub fn send(&self, change: Change) {
        let _ = self.tx.send(change);
    }

    fn subscribe(&self) -> Receiver {
        Receiver { rx: self.tx.subscribe() }
    }

    /// Delivers to an `initialize`-era session until it closes or `stop` fires.
    pub(crate) fn deliver_to_session(
        &self,
        peer: Peer<RoleServer>,
        subscribed: Arc<Mutex<HashSet<String>>>,
        tools: bool,
        resources: Vec<String>,
        stop: CancellationToken,
    ) {
        let mut rx = self.subscribe();
        tokio::spawn(async move {
            loop {
                let changes = tokio::select! {
                    _ = stop.cancelled() => return,
                    changes = rx.next_or_all(&resources) => changes,
                };
                let Some(changes) = changes else { return };
                for change in changes {
                    let sent = match change {
                        Change::Tools if tools => peer.notify_tool_list_changed().await,
                        Change::Resource(uri) if subscribed.lock().contains(&uri) => {
                            peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await
                        }
                        _ => Ok(()),
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            }
        });
    }

    /// Delivers to one `subscriptions/listen` stream until the client closes it.
    pub(crate) async fn deliver_to_stream(&self, stream: SubscriptionContext, resources: Vec<String>) {
        let mut rx = self.subscribe();
        let sink = stream.sink().clone();
        loop {
            let changes = tokio::select! {
                _ = stream.cancelled() => return,
                changes = rx.next_or_all(&resources) => changes,
            };
            let Some(changes) = changes else { return };
            for change in changes {
                // rmcp refuses what this stream did not ask for; that is not
                // a failure of the stream.
                let _ = match change {
                    Change::Tools => sink.notify_tool_list_changed().await,
                    Change::Resource(uri) => sink.notify_resource_updated(uri).await,
                };
            }
        }
    }
}

struct Receiver {
    rx: broadcast::Receiver<Change>,
}

impl Receiver {
    /// The next change; after a lag, the tools and every resource in `all`.
    /// `None` once the door is gone.
    async fn next_or_all(&mut self, all: &[String]) -> Option<Vec<Change>> {
        match self.rx.recv().await {
            Ok(change) => Some(vec![change]),
            Err(RecvError::Lagged(_)) => {
                Some(std::iter::once(Change::Tools).chain(all.iter().cloned().map(Change::Resource)).collect())
            }
            Err(RecvError::Closed) => None,
        }
    }
}
