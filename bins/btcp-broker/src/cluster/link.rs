//! A session's link to the cluster, on one node: one task per session this
//! node owns (its browser is here, or was last) or has agents in.
//!
//! - **Owner**: answers `<name>.s.<key>.call` (asks its browser) and `.ctl`
//!   (joins, agent counts, cancels), writes the directory entry, and
//!   publishes the session's notifications on `.ev`.
//! - **Replica**: hears `.ev` and passes each notification to its agents,
//!   keeping its copy of the tools current; its agents' calls go to the
//!   owner (`remote.rs`).
//!
//! Here: a link as others see it ([`Link`]: the session, who owns it, how to
//! tell its task) and every link of this node ([`Links`]). The task that owns
//! a link's state is `task.rs`; what only an owner does is `owner.rs`.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use async_nats::Client;
use tokio::sync::{mpsc, oneshot};

use super::directory::Directory;
use super::subject::Subjects;
use crate::sessions::session::Session;

/// What the links of one node share: the connection and who they are.
pub struct Links {
    pub client: Client,
    pub subjects: Subjects,
    pub directory: Arc<Directory>,
    pub node: Arc<str>,
    pub max_agents: usize,
    pub(super) map: Mutex<HashMap<String, Arc<Link>>>,
}

/// Who owns a session, as this node knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// This node, since it wrote the directory at `revision` (0: not yet).
    Here {
        revision: u64,
    },
    There {
        node: Arc<str>,
        has_browser: bool,
    },
    Nobody,
}

pub enum Command {
    /// This node's browser was seated: take the session; answered when the
    /// directory says so (or could not be reached).
    Claim(oneshot::Sender<()>),
    /// The directory says `node` owns the session since `revision`.
    Owned {
        node: Arc<str>,
        revision: u64,
    },
    /// The directory entry was removed.
    Removed,
    NodeLost(Arc<str>),
    /// This node's agent count changed.
    Agents,
    /// NATS is back: write the entry again.
    Reannounce,
}

pub struct Link {
    pub session: Arc<Session>,
    pub key: String,
    pub(super) owner: Mutex<Owner>,
    pub(super) commands: mpsc::UnboundedSender<Command>,
}

impl Link {
    pub fn set_owner(&self, owner: Owner) {
        *self.owner.lock() = owner;
    }

    pub fn owner(&self) -> Owner {
        self.owner.lock().clone()
    }

    pub fn send(&self, command: Command) {
        let _ = self.commands.send(command);
    }
}

impl Links {
    pub fn new(
        client: Client,
        subjects: Subjects,
        directory: Arc<Directory>,
        node: Arc<str>,
        max_agents: usize,
    ) -> Links {
        Links { client, subjects, directory, node, max_agents, map: Mutex::new(HashMap::new()) }
    }

    pub fn get(&self, key: &str) -> Option<Arc<Link>> {
        self.map.lock().get(key).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Link>> {
        self.map.lock().values().cloned().collect()
    }

    /// Removes `link` if it is still the one for its key and may go:
    /// decided under the map's lock, which a new agent's `link` takes too.
    pub fn retire(&self, link: &Arc<Link>, force: bool) -> bool {
        let mut map = self.map.lock();
        let idle = link.session.agent_count() == 0 && !link.session.has_browser();
        let ours = map.get(&link.key).is_some_and(|l| Arc::ptr_eq(l, link));
        if ours && (force || idle) {
            map.remove(&link.key);
        }
        !ours || force || idle
    }
}
