//! The task behind one session's [`Link`]: it owns the link's state (its
//! role, and as owner the subscriptions and remote agents), so it needs no
//! lock; others talk to it with [`Command`].

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{HeaderMap, Message, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use rpc_core::escape::OneLine;
use rpc_core::fanout::Event;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::directory::{DirectoryError, REFRESH};
use super::link::{Command, Link, Links, Owner};
use super::owner::Owned;
use super::wire::{self, Control};
use crate::sessions::session::{Session, SessionInfo};
use crate::toolset::ToolSet;

/// The session's link, started if it has none (or another session
/// object of the same id: the old one was removed).
pub async fn start(links: &Arc<Links>, session: &Arc<Session>, key: String) -> Arc<Link> {
    if let Some(link) = links.get(&key).filter(|l| Arc::ptr_eq(&l.session, session)) {
        return link;
    }
    let events = links.client.subscribe(links.subjects.events(&key)).await.ok();
    let mut map = links.map.lock();
    if let Some(link) = map.get(&key).filter(|l| Arc::ptr_eq(&l.session, session)) {
        return link.clone();
    }
    let owner = match links.directory.get(&key) {
        Some(listed) => match listed.info.node {
            Some(node) if node != links.node => Owner::There { node, has_browser: listed.info.has_browser },
            _ => Owner::Nobody,
        },
        None => Owner::Nobody,
    };
    let (commands, inbox) = mpsc::unbounded_channel();
    let link = Arc::new(Link { session: session.clone(), key: key.clone(), owner: Mutex::new(owner), commands });
    // A link of a session object since removed ends at its next refresh.
    map.insert(key, link.clone());
    drop(map);
    let task = LinkTask::new(links.clone(), link.clone(), events);
    tokio::spawn(task.run(inbox));
    link
}

/// The task behind one [`Link`].
struct LinkTask {
    links: Arc<Links>,
    link: Arc<Link>,
    events: Option<Subscriber>,
    owned: Option<Owned>,
    /// The highest owner revision heard of: older news is stale.
    seen_revision: u64,
    dirty: bool,
}

/// How long an owner waits before writing a changed entry: a burst of
/// changes is one write.
const SETTLE: Duration = Duration::from_millis(100);

impl LinkTask {
    fn new(links: Arc<Links>, link: Arc<Link>, events: Option<Subscriber>) -> LinkTask {
        LinkTask { links, link, events, owned: None, seen_revision: 0, dirty: false }
    }

    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Command>) {
        let mut refresh = tokio::time::interval(REFRESH);
        refresh.tick().await;
        let mut settle: Option<Instant> = None;
        loop {
            if !self.dirty {
                settle = None;
            } else if settle.is_none() {
                settle = Some(Instant::now() + SETTLE);
            }
            tokio::select! {
                command = inbox.recv() => match command {
                    Some(command) => if !self.on_command(command).await { break },
                    None => break,
                },
                Some(message) = next(&mut self.events) => self.on_event(message).await,
                heard = owner_inputs(&mut self.owned) => match heard {
                    OwnerInput::Call(message) => self.on_call(message),
                    OwnerInput::Control(message) => {
                        if let Some(owned) = &mut self.owned {
                            self.dirty |= owned.on_control(&self.links, &self.link.session, message).await;
                        }
                    }
                    OwnerInput::Own(event) => self.on_own_event(event).await,
                },
                () = until(settle) => {
                    settle = None;
                    self.write_entry().await;
                }
                _ = refresh.tick() => if !self.on_refresh().await { break },
            }
        }
        self.give_up_entry().await;
    }

    async fn on_command(&mut self, command: Command) -> bool {
        match command {
            Command::Claim(done) => {
                self.claim().await;
                let _ = done.send(());
            }
            Command::Owned { node, revision } => {
                if node != self.links.node {
                    self.learn_owner(node, revision, None).await;
                }
            }
            Command::Removed => {
                if !matches!(self.link.owner(), Owner::Here { .. }) {
                    self.lose_owner();
                } else if self.link.session.has_browser() || self.link.session.agent_count() > 0 {
                    // Our entry went (we were taken for lost): say it again.
                    self.claim().await;
                }
            }
            Command::NodeLost(node) => self.on_node_lost(&node),
            Command::Agents => {
                self.dirty |= self.owned.is_some();
                self.tell_owner_agents().await;
                if self.owned.is_none() && self.links.retire(&self.link, false) {
                    return false;
                }
            }
            Command::Reannounce => {
                if matches!(self.link.owner(), Owner::Here { .. }) {
                    self.claim().await;
                } else {
                    self.tell_owner_agents().await;
                }
            }
        }
        true
    }

    fn set_owner(&self, owner: Owner) {
        *self.link.owner.lock() = owner;
    }

    /// Writes the directory entry for this node, whoever had it, and serves
    /// the session. Without NATS it serves anyway and writes when it is back.
    async fn claim(&mut self) {
        // Calls are answered before the directory names this node: whoever
        // reads the entry finds a responder (NATS keeps one connection's
        // SUB before its PUB).
        if self.owned.is_none() {
            self.owned = Owned::serve(&self.links, &self.link).await;
        }
        let info = self.entry();
        let revision = match self.links.directory.claim(&self.link.key, &info).await {
            Ok(revision) => revision,
            Err(e) => {
                tracing::warn!(session = %OneLine(&self.link.session.id), error = %e, "cluster: session not announced yet");
                0
            }
        };
        self.seen_revision = self.seen_revision.max(revision);
        self.set_owner(Owner::Here { revision });
        // Replicas learn the browser and its tools from the new owner.
        self.announce().await;
    }

    /// `session/browserConnected` and the tools, for the nodes that knew
    /// another owner (or none).
    async fn announce(&self) {
        let session = &self.link.session;
        if !session.has_browser() {
            return;
        }
        let id = &session.id;
        let tools = session.tools();
        let mut events = vec![("session/browserConnected", serde_json::json!({ "sessionId": id }))];
        // An empty list is a browser that has not registered yet: the copies
        // elsewhere stay until it does, as a returning browser's would.
        if tools.len() > 0 {
            events.push(("tools/updated", serde_json::json!({ "sessionId": id, "tools": tools.json() })));
            events.push(("notifications/tools/list_changed", serde_json::json!({})));
        }
        for (method, params) in events {
            if let Ok(json) = rpc_core::message::request(None, method, &params) {
                self.publish_event(Bytes::from(json)).await;
            }
        }
    }

    async fn publish_event(&self, notification: Bytes) {
        let revision = match self.link.owner() {
            Owner::Here { revision } => revision,
            _ => return,
        };
        let mut headers = HeaderMap::new();
        headers.insert(wire::NODE, &*self.links.node);
        headers.insert(wire::REVISION, revision.to_string().as_str());
        let subject = self.links.subjects.events(&self.link.key);
        let _ = self.links.client.publish_with_headers(subject, headers, notification).await;
    }

    /// The owner's own notifications go out to the other nodes.
    async fn on_own_event(&mut self, event: Event<Bytes>) {
        if let Event::Item(notification) = event {
            self.publish_event(notification).await;
        }
        self.dirty = true;
    }

    /// Another node owns the session since `revision`: this node's browser,
    /// if any, was replaced, and this node becomes a replica.
    async fn learn_owner(&mut self, node: Arc<str>, revision: u64, has_browser: Option<bool>) -> bool {
        if revision < self.seen_revision {
            return false;
        }
        self.seen_revision = revision;
        let has_browser =
            has_browser.unwrap_or_else(|| self.links.directory.get(&self.link.key).is_some_and(|l| l.info.has_browser));
        if let Owner::Here { revision: ours } = self.link.owner() {
            if revision <= ours {
                return false;
            }
            self.owned = None;
            let session = &self.link.session;
            if let Some(old) = session.unseat_browser() {
                tracing::info!(session = %OneLine(&session.id), old = %old.client_id, node = %node, "browser replaced from another node");
                old.dismiss(session.id.clone(), "another browser connected with this session id (on another node)");
            }
        }
        let known = matches!(self.link.owner(), Owner::There { node: ref owner, .. } if *owner == node);
        self.set_owner(Owner::There { node, has_browser });
        if !known && self.link.session.agent_count() > 0 {
            // A new owner counts this node's agents against the session's limit.
            self.tell_owner_agents().await;
        }
        true
    }

    /// A notification from the owner: kept (tools) and passed to the agents.
    async fn on_event(&mut self, message: Message) {
        let headers = message.headers.as_ref();
        let header = |name: &str| headers.and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
        let (Some(node), Some(revision)) = (header(wire::NODE), header(wire::REVISION).and_then(|r| r.parse().ok()))
        else {
            return;
        };
        if *node == *self.links.node {
            return;
        }
        #[derive(Deserialize)]
        struct Notification {
            method: String,
            #[serde(default)]
            params: Value,
        }
        let Ok(notification) = serde_json::from_slice::<Notification>(&message.payload) else { return };
        let browser = match notification.method.as_str() {
            "session/browserConnected" => Some(true),
            "session/browserDisconnected" => Some(false),
            _ => None,
        };
        if !self.learn_owner(node.into(), revision, browser).await {
            return;
        }
        if notification.method == "tools/updated"
            && let Some(tools) = notification.params.get("tools").and_then(Value::as_array)
            && let Ok(tools) = ToolSet::validate(tools.clone(), usize::MAX)
        {
            self.link.session.mirror_tools(Arc::new(tools));
        }
        self.link.session.relay_to_agents(message.payload);
    }

    /// The owner elsewhere is gone (its node lost, or its entry removed);
    /// if it had a browser, the agents here hear that it left.
    fn lose_owner(&self) {
        if let Owner::There { has_browser, .. } = self.link.owner() {
            self.set_owner(Owner::Nobody);
            let session = &self.link.session;
            if has_browser {
                let event = serde_json::json!({ "sessionId": session.id });
                session.notify_agents("session/browserDisconnected", &event);
            }
        }
    }

    fn on_node_lost(&mut self, node: &str) {
        if matches!(self.link.owner(), Owner::There { node: owner, .. } if *owner == *node) {
            self.lose_owner();
        }
        if let Some(owned) = &mut self.owned
            && owned.remote_agents.remove(node).is_some()
        {
            self.dirty = true;
        }
    }

    fn on_call(&self, message: Message) {
        if let Some(owned) = &self.owned {
            owned.on_call(&self.links, &self.link.session, message);
        }
    }

    /// A replica tells the owner how many agents it has here.
    async fn tell_owner_agents(&self) {
        if !matches!(self.link.owner(), Owner::There { .. }) {
            return;
        }
        let control = Control::Agents { node: self.links.node.to_string(), agents: self.link.session.agent_count() };
        let subject = self.links.subjects.control(&self.link.key);
        let _ = self.links.client.publish(subject, serde_json::to_vec(&control).unwrap_or_default().into()).await;
    }

    /// This node's directory entry: the session as here, with every node's agents.
    fn entry(&self) -> SessionInfo {
        let mut info = self.link.session.info();
        info.node = Some(self.links.node.clone());
        if let Some(owned) = &self.owned {
            info.agent_count += owned.remote_agent_count();
        }
        info
    }

    async fn write_entry(&mut self) {
        let Owner::Here { revision } = self.link.owner() else { return };
        if revision == 0 {
            return self.claim().await;
        }
        match self.links.directory.update(&self.link.key, &self.entry(), revision).await {
            Ok(revision) => {
                self.dirty = false;
                self.seen_revision = self.seen_revision.max(revision);
                self.set_owner(Owner::Here { revision });
            }
            Err(DirectoryError::Conflict) => {
                self.dirty = false;
                if let Some(listed) = self.links.directory.get(&self.link.key)
                    && let Some(node) = listed.info.node.filter(|n| *n != self.links.node)
                {
                    self.learn_owner(node, listed.revision, Some(listed.info.has_browser)).await;
                } else {
                    self.claim().await;
                }
            }
            Err(DirectoryError::Nats(e)) => tracing::debug!(error = %e, "cluster: directory entry not written"),
        }
    }

    /// Every REFRESH: the owner rewrites its entry (before the bucket's max
    /// age drops it); a link whose session is gone ends. Returns false then.
    async fn on_refresh(&mut self) -> bool {
        let gone = self.link.session.is_removed();
        if gone {
            self.links.retire(&self.link, true);
            return false;
        }
        if self.owned.is_some() {
            self.write_entry().await;
            true
        } else {
            !self.links.retire(&self.link, false)
        }
    }

    /// An owner whose session is gone takes its entry out of the directory.
    async fn give_up_entry(&self) {
        if let Owner::Here { revision } = self.link.owner()
            && revision > 0
            && self.link.session.is_removed()
        {
            self.links.directory.remove(&self.link.key, revision).await;
        }
    }
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn next(subscriber: &mut Option<Subscriber>) -> Option<Message> {
    next_of(subscriber.as_mut()).await
}

async fn next_of(subscriber: Option<&mut Subscriber>) -> Option<Message> {
    match subscriber {
        Some(subscriber) => subscriber.next().await,
        None => std::future::pending().await,
    }
}

/// What an owner hears besides its commands and the events.
enum OwnerInput {
    Call(Message),
    Control(Message),
    /// One of the session's own notifications, to publish.
    Own(Event<Bytes>),
}

/// The owner's next input; never, for a replica (or a closed source).
async fn owner_inputs(owned: &mut Option<Owned>) -> OwnerInput {
    let Some(owned) = owned else { return std::future::pending().await };
    tokio::select! {
        Some(message) = owned.calls.next() => OwnerInput::Call(message),
        Some(message) = owned.controls.next() => OwnerInput::Control(message),
        Some(event) = owned.bridge.recv() => OwnerInput::Own(event),
        else => std::future::pending().await,
    }
}
