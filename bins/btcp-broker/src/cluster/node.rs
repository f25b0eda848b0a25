//! This broker as a node of a cluster: the NATS connection and the tasks
//! that keep the node in the cluster (heartbeats, the directory's watch,
//! node loss, reconnection), and [`Cluster`], the one narrow interface the
//! rest of the broker uses: a browser seated, an agent joined or gone, a
//! call for a browser elsewhere, the cluster-wide lists.

use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::{ConnectOptions, Event};
use rpc_core::CallError;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::directory::{Change, Directory};
use super::link::{Command, Links, Owner};
use super::liveness::Liveness;
use super::remote::{self, Unrouted, Watchers};
use super::settings::{ClusterSettings, redact};
use super::subject::{Subjects, session_key};
use super::task;
use crate::sessions::session::{Session, SessionInfo};

/// The broker could not join its cluster at start (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("cannot join the cluster (BTCP_CLUSTER={urls}): {why}")]
pub struct JoinError {
    urls: String,
    why: String,
}

/// How long a browser's connection waits for its claim to be written.
const CLAIM_WAIT: Duration = Duration::from_secs(2);

pub struct Cluster {
    links: Arc<Links>,
    liveness: Arc<Liveness>,
    lost: broadcast::Sender<Arc<str>>,
    connected: watch::Receiver<bool>,
}

impl Cluster {
    /// Connects to NATS, opens the directory and starts the node's tasks.
    pub async fn join(settings: &ClusterSettings, max_agents: usize) -> Result<Arc<Cluster>, JoinError> {
        let urls = settings.urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",");
        let fail = |why: String| JoinError { urls: urls.clone(), why };
        let (events, mut event_rx) = mpsc::unbounded_channel();
        let options = connect_options(settings, events).await.map_err(|e| fail(e.to_string()))?;
        let client = options.connect(settings.urls.clone()).await.map_err(|e| fail(e.to_string()))?;
        let subjects = Subjects::new(&settings.name);
        let js = async_nats::jetstream::new(client.clone());
        let directory = Arc::new(open_directory(&js, &subjects.bucket()).await.map_err(fail)?);
        let node: Arc<str> = settings.node_id.as_str().into();
        let links = Arc::new(Links::new(client.clone(), subjects.clone(), directory.clone(), node.clone(), max_agents));
        let liveness = Arc::new(Liveness::new(node.clone(), settings.heartbeat));
        let (lost, _) = broadcast::channel(64);
        let (connected_tx, connected) = watch::channel(true);
        let cluster = Arc::new(Cluster { links, liveness: liveness.clone(), lost, connected });

        let (lost_tx, lost_rx) = mpsc::unbounded_channel();
        tokio::spawn(liveness.run(client, subjects, lost_tx));
        tokio::spawn(cluster.clone().on_lost_nodes(lost_rx));
        let (changes, change_rx) = mpsc::unbounded_channel();
        tokio::spawn(cluster.clone().on_changes(change_rx));
        let watcher = directory.clone();
        let (rewatch_tx, mut rewatch) = mpsc::unbounded_channel::<()>();
        tokio::spawn(async move {
            loop {
                // A watch may outlive the server it watched (NATS restarted):
                // a reconnection starts it again, with the history.
                tokio::select! {
                    watched = watcher.watch(&changes) => {
                        if let Err(e) = watched {
                            tracing::debug!(error = %e, "cluster: directory watch ended");
                        }
                        let _ = tokio::time::timeout(Duration::from_secs(1), rewatch.recv()).await;
                    }
                    Some(()) = rewatch.recv() => {}
                }
            }
        });
        let reannounce = cluster.clone();
        tokio::spawn(async move {
            while let Some(event) = event_rx.recv().await {
                match event {
                    Event::Connected => {
                        tracing::info!("cluster: connected to NATS; announcing this node's sessions");
                        let _ = connected_tx.send(true);
                        let _ = rewatch_tx.send(());
                        for link in reannounce.links.all() {
                            link.send(Command::Reannounce);
                        }
                    }
                    Event::Disconnected => {
                        tracing::warn!("cluster: NATS connection lost; calls to other nodes fail until it is back");
                        let _ = connected_tx.send(false);
                    }
                    other => tracing::debug!(event = %other, "cluster: NATS event"),
                }
            }
        });
        tracing::info!(node = %node, cluster = %settings.name, nats = %urls, "joined the cluster");
        Ok(cluster)
    }

    pub fn node(&self) -> &str {
        &self.links.node
    }

    /// The nodes alive now, this one included.
    pub fn nodes(&self) -> Vec<Arc<str>> {
        self.liveness.live()
    }

    /// A browser was seated here: this node takes the session (in the
    /// directory, by compare-and-set), and its previous owner elsewhere
    /// replaces its own browser.
    pub async fn claim(&self, session: &Arc<Session>) {
        let link = task::start(&self.links, session, session_key(&session.id)).await;
        let (done, claimed) = oneshot::channel();
        link.send(Command::Claim(done));
        let _ = tokio::time::timeout(CLAIM_WAIT, claimed).await;
    }

    /// An agent was counted in `session`, whose browser is not here: hear
    /// the owner's events, and be counted by it. `Err(max)`: the session has
    /// its maximum of agents across the cluster (the agent is to be removed).
    pub async fn follow(&self, session: &Arc<Session>) -> Result<(), usize> {
        let link = task::start(&self.links, session, session_key(&session.id)).await;
        if matches!(link.owner(), Owner::Here { .. }) {
            link.send(Command::Agents);
            return Ok(());
        }
        remote::join(&self.links, &link).await
    }

    /// An agent left `session` here.
    pub fn agent_left(&self, session: &Session) {
        if let Some(link) = self.links.get(&session_key(&session.id)) {
            link.send(Command::Agents);
        }
    }

    /// Whether the directory lists session `id` (owned by some node).
    pub fn knows(&self, id: &str) -> bool {
        self.links.directory.get(&session_key(id)).is_some()
    }

    /// Whether the directory says session `id` has a browser (on any node).
    pub fn has_browser(&self, id: &str) -> bool {
        self.links.directory.get(&session_key(id)).is_some_and(|listed| listed.info.has_browser)
    }

    /// A call for `session`'s browser, which is not on this node.
    pub async fn call(
        &self,
        session: &Arc<Session>,
        name: &str,
        arguments: &RawValue,
        timeout: Duration,
        abandoned: &CancellationToken,
    ) -> Result<Result<Box<RawValue>, CallError>, Unrouted> {
        if self.links.client.connection_state() != State::Connected {
            return Err(Unrouted::Unavailable);
        }
        let watchers = Watchers { lost: self.lost.subscribe(), connected: self.connected.clone() };
        let link = task::start(&self.links, session, session_key(&session.id)).await;
        remote::call(&self.links, &link, name, arguments, timeout, abandoned, watchers).await
    }

    /// Every session of the cluster: the directory's, and the sessions here
    /// that no node owns yet (agents waiting for a browser).
    pub fn list(&self, local: Vec<SessionInfo>) -> Vec<SessionInfo> {
        let mut rows = self.links.directory.entries();
        let listed: std::collections::HashSet<Arc<str>> = rows.iter().map(|r| r.id.clone()).collect();
        rows.extend(local.into_iter().filter(|row| !listed.contains(&row.id)));
        rows.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        rows
    }

    /// Ids of the sessions with a browser, on any node.
    pub fn with_browser(&self, local: Vec<Arc<str>>) -> Vec<Arc<str>> {
        let mut ids: Vec<Arc<str>> =
            self.links.directory.entries().into_iter().filter(|row| row.has_browser).map(|row| row.id).collect();
        ids.extend(local);
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// A lost node: its calls fail, its sessions' agents are told, and its
    /// directory entries go.
    async fn on_lost_nodes(self: Arc<Self>, mut lost: mpsc::UnboundedReceiver<Arc<str>>) {
        while let Some(node) = lost.recv().await {
            let _ = self.lost.send(node.clone());
            for link in self.links.all() {
                link.send(Command::NodeLost(node.clone()));
            }
            let dropped = self.links.directory.drop_node(&node).await;
            tracing::info!(node = %node, dropped, "cluster: the lost node's sessions left the directory");
        }
    }

    async fn on_changes(self: Arc<Self>, mut changes: mpsc::UnboundedReceiver<Change>) {
        while let Some(change) = changes.recv().await {
            match change {
                Change::Owned { key, node, revision } => {
                    if let Some(link) = self.links.get(&key) {
                        link.send(Command::Owned { node, revision });
                    }
                }
                Change::Removed { key } => {
                    if let Some(link) = self.links.get(&key) {
                        link.send(Command::Removed);
                    }
                }
            }
        }
    }
}

async fn connect_options(
    settings: &ClusterSettings,
    events: mpsc::UnboundedSender<Event>,
) -> std::io::Result<ConnectOptions> {
    let mut options = match &settings.creds {
        Some(path) => ConnectOptions::with_credentials_file(path).await?,
        None => ConnectOptions::new(),
    };
    if let Some(token) = &settings.token {
        options = options.token(token.clone());
    }
    Ok(options
        .name(format!("btcp-broker {}", settings.node_id))
        .connection_timeout(Duration::from_secs(5))
        // Back within a second of NATS: cross-node calls fail meanwhile.
        .reconnect_delay_callback(|attempts| Duration::from_millis(100 * attempts.min(10) as u64))
        .event_callback(move |event| {
            let events = events.clone();
            async move {
                let _ = events.send(event);
            }
        }))
}

/// JetStream may still be electing its leader when the brokers start with
/// their NATS (a fresh NATS cluster): try for a while before giving up.
async fn open_directory(js: &async_nats::jetstream::Context, bucket: &str) -> Result<Directory, String> {
    let mut last = String::new();
    for _ in 0..40 {
        match Directory::open(js, bucket).await {
            Ok(directory) => return Ok(directory),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(last)
}
