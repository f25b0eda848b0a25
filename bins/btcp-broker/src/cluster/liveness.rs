//! Which nodes are alive: every node publishes `<name>.node.<id>.hb` each
//! heartbeat and hears everyone's. A node silent for 4 heartbeats is lost.
//!
//! Four heartbeats of silence alone would find a killed node only after 1 s
//! or more (the kill falls anywhere between two beats). NATS knows sooner:
//! a node's subscriptions go when its connection does. So a node silent for
//! 1.5 heartbeats is probed (`<name>.node.<id>.ping`): "no responders" means
//! its connection is gone, and it is lost at once (a killed node is found in
//! about 0.4 s at the default 250 ms). A node that is only slow answers the
//! probe, and is lost only after the 4 heartbeats.
//!
//! While this node's own NATS connection is down it hears nobody: it judges
//! nobody, and on reconnection everyone's silence starts afresh.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::client::RequestErrorKind;
use async_nats::connection::State;
use async_nats::{Client, Request};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::subject::Subjects;

/// Heartbeats a node may miss before it is lost.
pub const MISSED: u32 = 4;

struct Seen {
    last: Instant,
    probing: bool,
}

pub struct Liveness {
    me: Arc<str>,
    heartbeat: Duration,
    seen: Mutex<HashMap<Arc<str>, Seen>>,
}

impl Liveness {
    pub fn new(me: Arc<str>, heartbeat: Duration) -> Liveness {
        Liveness { me, heartbeat, seen: Mutex::new(HashMap::new()) }
    }

    /// This node and every node heard within the last 4 heartbeats, sorted.
    pub fn live(&self) -> Vec<Arc<str>> {
        let mut nodes: Vec<Arc<str>> = self.seen.lock().keys().cloned().collect();
        nodes.push(self.me.clone());
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    fn heard(&self, node: &str) {
        if node == &*self.me {
            return;
        }
        let mut seen = self.seen.lock();
        match seen.get_mut(node) {
            Some(entry) => entry.last = Instant::now(),
            None => {
                tracing::info!(node, "cluster node joined");
                seen.insert(node.into(), Seen { last: Instant::now(), probing: false });
            }
        }
    }

    /// Subscribes to the heartbeats and to this node's probe; then beats,
    /// listens and judges until the connection closes for good. Lost nodes
    /// are sent on `lost`.
    pub async fn run(self: Arc<Self>, client: Client, subjects: Subjects, lost: mpsc::UnboundedSender<Arc<str>>) {
        let (Ok(mut beats), Ok(mut probes)) =
            (client.subscribe(subjects.heartbeats()).await, client.subscribe(subjects.probe(&self.me)).await)
        else {
            tracing::error!("cluster: cannot subscribe to the heartbeats; node loss will not be detected");
            return;
        };
        let mut beat = tokio::time::interval(self.heartbeat);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut judge = tokio::time::interval(self.heartbeat / 5);
        judge.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let hb_subject = subjects.heartbeat(&self.me);
        let mut was_down = false;
        loop {
            tokio::select! {
                _ = beat.tick() => {
                    let _ = client.publish(hb_subject.clone(), self.me.as_bytes().to_vec().into()).await;
                }
                Some(message) = beats.next() => {
                    if let Ok(node) = std::str::from_utf8(&message.payload) {
                        self.heard(node);
                    }
                }
                Some(message) = probes.next() => {
                    if let Some(reply) = message.reply {
                        let _ = client.publish(reply, bytes::Bytes::new()).await;
                    }
                }
                _ = judge.tick() => {
                    let up = client.connection_state() == State::Connected;
                    if !up {
                        was_down = true;
                    } else if was_down {
                        was_down = false;
                        self.forgive();
                    } else {
                        self.judge(&client, &subjects, &lost);
                    }
                }
                else => return,
            }
        }
    }

    /// Everyone's silence starts afresh (this node was cut off).
    fn forgive(&self) {
        for entry in self.seen.lock().values_mut() {
            entry.last = Instant::now();
        }
    }

    /// Loses the nodes silent for 4 heartbeats; probes those silent for 1.5.
    fn judge(self: &Arc<Self>, client: &Client, subjects: &Subjects, lost: &mpsc::UnboundedSender<Arc<str>>) {
        let give_up = self.heartbeat * MISSED;
        let suspect = self.heartbeat * 3 / 2;
        let mut seen = self.seen.lock();
        let mut gone = Vec::new();
        for (node, entry) in seen.iter_mut() {
            let silence = entry.last.elapsed();
            if silence > give_up {
                gone.push(node.clone());
            } else if silence > suspect && !entry.probing {
                entry.probing = true;
                tokio::spawn(self.clone().probe(client.clone(), subjects.probe(node), node.clone(), lost.clone()));
            }
        }
        for node in gone {
            seen.remove(&node);
            tracing::warn!(node = %node, "cluster node lost: no heartbeat for {} ms", give_up.as_millis());
            let _ = lost.send(node);
        }
    }

    async fn probe(
        self: Arc<Self>,
        client: Client,
        subject: String,
        node: Arc<str>,
        lost: mpsc::UnboundedSender<Arc<str>>,
    ) {
        let request = Request::new().timeout(Some(self.heartbeat * MISSED));
        let answer = client.send_request(subject, request).await;
        let mut seen = self.seen.lock();
        let Some(entry) = seen.get_mut(&node) else { return };
        entry.probing = false;
        let silent = entry.last.elapsed() > self.heartbeat * 3 / 2;
        if silent && matches!(&answer, Err(e) if e.kind() == RequestErrorKind::NoResponders) {
            seen.remove(&node);
            tracing::warn!(node = %node, "cluster node lost: its NATS connection is gone");
            let _ = lost.send(node);
        }
    }
}
