//! What only a session's owner has and does: it answers other nodes' calls
//! by asking its browser, and their control messages (joins, agent counts,
//! cancels); its session's own notifications are bridged out to `.ev`.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Message, Subscriber};
use bytes::Bytes;
use rpc_core::RpcError;
use rpc_core::escape::OneLine;
use rpc_core::fanout::Subscription;
use tokio_util::sync::CancellationToken;

use super::link::{Link, Links};
use super::wire::{Answer, Control, Joined, RemoteCall};
use crate::sessions::forward::{self, ToolCall, Unroutable};
use crate::sessions::session::Session;

/// Calls in progress at the owner for other nodes, by the caller's call id.
/// foldhash, seeded per map (the ids are other nodes'): SipHash on them was
/// 3 % of an owner's work a call.
type Pending = Arc<Mutex<HashMap<Box<str>, CancellationToken, foldhash::fast::RandomState>>>;

pub struct Owned {
    pub calls: Subscriber,
    pub controls: Subscriber,
    /// The session's own notifications, published on `.ev`.
    pub bridge: Subscription<Bytes>,
    /// Agents in the session on other nodes, by node: what the per-session
    /// agent limit counts besides this node's.
    pub remote_agents: HashMap<String, usize>,
    pending: Pending,
}

impl Owned {
    /// Subscribes to the session's calls and control messages: from now on
    /// this node answers for it.
    pub async fn serve(links: &Links, link: &Link) -> Option<Owned> {
        let calls = links.client.subscribe(links.subjects.call(&link.key)).await.ok()?;
        let controls = links.client.subscribe(links.subjects.control(&link.key)).await.ok()?;
        Some(Owned {
            calls,
            controls,
            bridge: link.session.subscribe_agent(),
            remote_agents: HashMap::new(),
            pending: Arc::default(),
        })
    }

    pub fn remote_agent_count(&self) -> usize {
        self.remote_agents.values().sum()
    }

    /// A call from another node's agent: asked off the link's task, answered
    /// to the NATS request's inbox.
    pub fn on_call(&self, links: &Links, session: &Arc<Session>, message: Message) {
        let Some(reply_to) = message.reply.clone() else { return };
        let (session, client, pending) = (session.clone(), links.client.clone(), self.pending.clone());
        // Boxed before it is spawned: the call's future (the NATS message and
        // the browser call's state, over a kilobyte) was copied four times
        // on its way into the task, 6 % of an owner's work a call.
        tokio::spawn(Box::pin(async move {
            let answer = answer_call(&session, &message.payload, &pending).await;
            let body = serde_json::to_vec(&answer).unwrap_or_default();
            if let Err(e) = client.publish(reply_to.clone(), body.into()).await {
                // Most likely larger than the server's max_payload.
                tracing::warn!(session = %OneLine(&session.id), error = %e, "cluster: answer not sent");
                let fallback = Answer::Error(RpcError::internal(format!("the answer could not cross NATS: {e}")));
                let _ = client.publish(reply_to, serde_json::to_vec(&fallback).unwrap_or_default().into()).await;
            }
        }));
    }

    /// A control message; returns whether the directory entry changed.
    pub async fn on_control(&mut self, links: &Links, session: &Session, message: Message) -> bool {
        let Ok(control) = serde_json::from_slice::<Control>(&message.payload) else { return false };
        match control {
            Control::Join { node, agents } => {
                let joined = self.admit(links, session, node, agents);
                if let Some(reply) = message.reply {
                    let body = serde_json::to_vec(&joined).unwrap_or_default();
                    let _ = links.client.publish(reply, body.into()).await;
                }
            }
            Control::Agents { node, agents: 0 } => {
                self.remote_agents.remove(&node);
            }
            Control::Agents { node, agents } => {
                self.remote_agents.insert(node, agents);
            }
            Control::Cancel { call_id } => {
                if let Some(token) = self.pending.lock().get(call_id.as_str()) {
                    token.cancel();
                }
                return false;
            }
        }
        true
    }

    /// One more agent on `node` (which then has `agents`), if the session's
    /// limit allows it, counted over every node.
    fn admit(&mut self, links: &Links, session: &Session, node: String, agents: usize) -> Joined {
        let others: usize = self.remote_agents.iter().filter(|(n, _)| **n != node).map(|(_, a)| a).sum();
        let total = session.agent_count() + others + agents;
        let here = links.node.to_string();
        if total > links.max_agents {
            return Joined {
                node: here,
                has_browser: session.has_browser(),
                tools: None,
                full: Some(links.max_agents),
            };
        }
        self.remote_agents.insert(node, agents);
        let tools = serde_json::value::to_raw_value(&*session.tools()).ok();
        Joined { node: here, has_browser: session.has_browser(), tools, full: None }
    }
}

/// The owner asks its browser, as a local agent's call would.
async fn answer_call(session: &Session, payload: &[u8], pending: &Pending) -> Answer {
    let Ok(call) = serde_json::from_slice::<RemoteCall>(payload) else {
        return Answer::Malformed("the forwarded call did not parse".into());
    };
    let browser = match forward::route(session, call.name) {
        Ok(browser) => browser,
        Err(Unroutable::NoBrowser) => return Answer::NoBrowser,
        Err(Unroutable::UnknownTool) => return Answer::UnknownTool,
    };
    session.touch();
    let token = CancellationToken::new();
    pending.lock().insert(call.call_id.into(), token.clone());
    let timeout = Duration::from_millis(call.timeout_ms);
    let tool_call = ToolCall { name: call.name, arguments: call.arguments };
    let reply = forward::ask(&browser, &tool_call, timeout, &token).await;
    pending.lock().remove(call.call_id);
    Answer::of(reply)
}
