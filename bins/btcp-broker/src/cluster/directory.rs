//! The session directory: the JetStream KV bucket `<name>_sessions` (history
//! 1), encoded session id → [`SessionInfo`] with its owner `node`. Only a
//! session's owner writes its key, always by compare-and-set on the revision
//! it last wrote, so an owner that was replaced cannot overwrite its
//! successor: the highest revision is the owner.
//!
//! Every node keeps a mirror of the bucket, fed by a KV watch, so that
//! `/sessions`, `availableSessions` and a join's lookup cost no round trip.
//! Changes of other nodes' keys are handed on ([`Change`]) for the session
//! links to react (a takeover, an owner gone).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation, Store, UpdateErrorKind};
use async_nats::jetstream::stream;
use async_nats::jetstream::{self, context::KeyValueErrorKind};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::sessions::session::SessionInfo;

/// Keys not refreshed for this long expire (a node gone without anyone
/// noticing, a whole cluster stopped); owners refresh theirs well before.
pub const MAX_AGE: Duration = Duration::from_secs(120);
/// How often an owner rewrites its keys.
pub const REFRESH: Duration = Duration::from_secs(30);

/// A directory entry and the revision that wrote it.
#[derive(Clone, Debug)]
pub struct Listed {
    pub info: SessionInfo,
    pub revision: u64,
}

/// A change of the directory seen by the watch.
#[derive(Debug)]
pub enum Change {
    /// `key` is now owned by `node` at `revision`.
    Owned { key: String, node: Arc<str>, revision: u64 },
    /// `key` was removed (its owner let it go, or its node was lost).
    Removed { key: String },
}

#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    #[error("another node wrote the entry since")]
    Conflict,
    #[error("{0}")]
    Nats(String),
}

pub struct Directory {
    store: Store,
    mirror: Mutex<HashMap<String, Listed>>,
}

impl Directory {
    /// Opens the bucket, creating it the first time (three nodes starting
    /// together race for that: whoever loses finds it made).
    pub async fn open(js: &jetstream::Context, bucket: &str) -> Result<Directory, String> {
        let store = match js.get_key_value(bucket).await {
            Ok(store) => store,
            Err(e) if e.kind() == KeyValueErrorKind::GetBucket => {
                let created = js.create_stream(bucket_stream(bucket)).await;
                js.get_key_value(bucket).await.map_err(|e| match created {
                    Err(create) => format!("KV bucket {bucket}: {create}"),
                    Ok(_) => format!("KV bucket {bucket}: {e}"),
                })?
            }
            Err(e) => return Err(format!("KV bucket {bucket}: {e} (is JetStream enabled, `nats-server -js`?)")),
        };
        Ok(Directory { store, mirror: Mutex::new(HashMap::new()) })
    }

    /// Takes `key` for this node, whoever had it: compare-and-set over the
    /// revision found, again if another node wrote in between. Of browsers
    /// racing on several nodes, the last write wins and every other owner
    /// sees a higher revision than its own.
    pub async fn claim(&self, key: &str, info: &SessionInfo) -> Result<u64, DirectoryError> {
        let value = value_of(info);
        for _ in 0..16 {
            let found = self.store.entry(key).await.map_err(|e| DirectoryError::Nats(e.to_string()))?;
            let revision = found.map_or(0, |entry| entry.revision);
            match self.store.update(key, value.clone(), revision).await {
                Ok(revision) => return Ok(revision),
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => continue,
                Err(e) => return Err(DirectoryError::Nats(e.to_string())),
            }
        }
        Err(DirectoryError::Nats("the entry kept changing under 16 claims".into()))
    }

    /// Rewrites the entry this node owns at `revision`; `Conflict` if another
    /// node has written it since (this node is no longer its owner).
    pub async fn update(&self, key: &str, info: &SessionInfo, revision: u64) -> Result<u64, DirectoryError> {
        match self.store.update(key, value_of(info), revision).await {
            Ok(revision) => Ok(revision),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Err(DirectoryError::Conflict),
            Err(e) => Err(DirectoryError::Nats(e.to_string())),
        }
    }

    /// Removes the entry if it is still the one written at `revision`.
    pub async fn remove(&self, key: &str, revision: u64) {
        if let Err(e) = self.store.delete_expect_revision(key, Some(revision)).await {
            tracing::debug!(key, error = %e, "directory entry not removed (rewritten since?)");
        }
    }

    /// Removes every entry of a lost node (each only if unchanged since).
    pub async fn drop_node(&self, node: &str) -> usize {
        let owned: Vec<(String, u64)> = self
            .mirror
            .lock()
            .iter()
            .filter(|(_, listed)| listed.info.node.as_deref() == Some(node))
            .map(|(key, listed)| (key.clone(), listed.revision))
            .collect();
        for (key, revision) in &owned {
            self.remove(key, *revision).await;
            self.mirror.lock().remove(key);
        }
        owned.len()
    }

    pub fn get(&self, key: &str) -> Option<Listed> {
        self.mirror.lock().get(key).cloned()
    }

    /// Every entry, as the watch last saw them.
    pub fn entries(&self) -> Vec<SessionInfo> {
        self.mirror.lock().values().map(|listed| listed.info.clone()).collect()
    }

    /// Keeps the mirror current until the stream ends (the connection was
    /// replaced, the server restarted): then the caller watches again.
    /// Entries gone while nobody watched are pruned once the watch is up.
    pub async fn watch(&self, changes: &mpsc::UnboundedSender<Change>) -> Result<(), String> {
        let mut watch = self.store.watch_with_history(">").await.map_err(|e| e.to_string())?;
        self.prune().await;
        while let Some(entry) = watch.next().await {
            let entry = entry.map_err(|e| e.to_string())?;
            self.apply(entry, changes);
        }
        Ok(())
    }

    fn apply(&self, entry: kv::Entry, changes: &mpsc::UnboundedSender<Change>) {
        let key = entry.key;
        let info = (entry.operation == Operation::Put)
            .then(|| serde_json::from_slice::<SessionInfo>(&entry.value).ok())
            .flatten();
        match info {
            Some(info) => {
                let node = info.node.clone().unwrap_or_else(|| "".into());
                self.mirror.lock().insert(key.clone(), Listed { info, revision: entry.revision });
                let _ = changes.send(Change::Owned { key, node, revision: entry.revision });
            }
            None => {
                self.mirror.lock().remove(&key);
                let _ = changes.send(Change::Removed { key });
            }
        }
    }

    /// Drops mirrored keys the bucket no longer has.
    async fn prune(&self) {
        let Ok(keys) = self.store.keys().await else { return };
        let present: std::collections::HashSet<String> = keys.filter_map(|k| async { k.ok() }).collect().await;
        self.mirror.lock().retain(|key, _| present.contains(key));
    }
}

/// The stream behind a KV bucket of history 1, as the KV API lays it out.
/// Made by hand: async-nats' `create_key_value` first reads the account's
/// JetStream info in a shape nats-server 2.9 does not send.
fn bucket_stream(bucket: &str) -> stream::Config {
    stream::Config {
        name: format!("KV_{bucket}"),
        description: Some("btcp-broker cluster: session directory".into()),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        max_age: MAX_AGE,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        allow_direct: true,
        discard: stream::DiscardPolicy::New,
        num_replicas: 1,
        ..Default::default()
    }
}

fn value_of(info: &SessionInfo) -> Bytes {
    Bytes::from(serde_json::to_vec(info).expect("a session row serialises"))
}
