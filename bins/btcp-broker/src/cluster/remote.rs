//! An agent's side of a session owned by another node: joining it (the
//! owner counts the agent and gives its tools) and calling its browser (a
//! NATS request to the owner, with the call's timeout). No responders is no
//! browser anywhere: the agent hears so at once, as it would locally.
//!
//! An in-flight call also ends, at once, when the owner's node is lost or
//! this node loses NATS; a cancelled or abandoned call tells the owner,
//! which tells its browser.

use std::sync::Arc;
use std::time::Duration;

use async_nats::client::RequestErrorKind;
use async_nats::{Client, Request};
use rpc_core::CallError;
use serde_json::value::RawValue;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::link::{Link, Links, Owner};
use super::subject::HEX;
use super::wire::{Answer, Control, Joined, RemoteCall, Unanswered};
use crate::toolset::ToolSet;

/// Why a call to another node got no answer from a browser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unrouted {
    /// No node holds a browser for the session.
    NoBrowser,
    /// The owner's browser registered no tool of that name.
    UnknownTool,
    /// The owner's node was lost while the call waited.
    NodeLost,
    /// This node has no NATS connection now.
    Unavailable,
}

/// Slack on top of a call's timeout for the owner's answer (which says
/// "timed out" itself) to cross NATS.
const ANSWER_SLACK: Duration = Duration::from_millis(500);

/// What a remote call waits on besides its answer.
pub struct Watchers {
    pub lost: broadcast::Receiver<Arc<str>>,
    pub connected: watch::Receiver<bool>,
}

/// Calls tool `name` of `link`'s session at its owner; `abandoned` is the
/// agent's (cancel or disconnect).
pub async fn call(
    links: &Links,
    link: &Link,
    name: &str,
    arguments: &RawValue,
    timeout: Duration,
    abandoned: &CancellationToken,
    mut watchers: Watchers,
) -> Result<Result<Box<RawValue>, CallError>, Unrouted> {
    let up = *watchers.connected.borrow();
    if !up {
        return Err(Unrouted::Unavailable);
    }
    let owner = match link.owner() {
        Owner::There { node, .. } => Some(node),
        _ => None,
    };
    let call_id = crate_id();
    let body = RemoteCall { call_id: &call_id, name, arguments, timeout_ms: timeout.as_millis() as u64 };
    let payload = serde_json::to_vec(&body).map_err(|_| Unrouted::NoBrowser)?;
    let request = Request::new().payload(payload.into()).timeout(Some(timeout + ANSWER_SLACK));
    let asked = links.client.send_request(links.subjects.call(&link.key), request);
    let lost = async {
        loop {
            match watchers.lost.recv().await {
                Ok(node) if owner.as_ref() == Some(&node) => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    };
    let disconnected = async {
        let _ = watchers.connected.wait_for(|up| !*up).await;
    };
    tokio::select! {
        answer = asked => match answer {
            Ok(message) => match serde_json::from_slice::<Answer>(&message.payload) {
                Ok(answer) => answer.into_reply().map_err(|why| match why {
                    Unanswered::NoBrowser => Unrouted::NoBrowser,
                    Unanswered::UnknownTool => Unrouted::UnknownTool,
                }),
                Err(e) => Ok(Err(CallError::Malformed(format!("the owner's answer: {e}")))),
            },
            Err(e) if e.kind() == RequestErrorKind::NoResponders => Err(Unrouted::NoBrowser),
            Err(e) if e.kind() == RequestErrorKind::TimedOut => Ok(Err(CallError::Timeout(timeout))),
            Err(_) => Err(Unrouted::Unavailable),
        },
        () = lost => Err(Unrouted::NodeLost),
        () = disconnected => Err(Unrouted::Unavailable),
        () = abandoned.cancelled() => {
            cancel(&links.client, links, link, call_id).await;
            Ok(Err(CallError::Cancelled))
        }
    }
}

async fn cancel(client: &Client, links: &Links, link: &Link, call_id: String) {
    let control = Control::Cancel { call_id };
    let body = serde_json::to_vec(&control).unwrap_or_default();
    let _ = client.publish(links.subjects.control(&link.key), body.into()).await;
}

/// Asks the owner (if any) to count one more agent here, and takes its
/// tools. `Err(max)` when the session is full across the cluster.
pub async fn join(links: &Links, link: &Link) -> Result<(), usize> {
    let control = Control::Join { node: links.node.to_string(), agents: link.session.agent_count() };
    let body = serde_json::to_vec(&control).unwrap_or_default();
    let request = Request::new().payload(body.into()).timeout(Some(Duration::from_secs(2)));
    let Ok(answer) = links.client.send_request(links.subjects.control(&link.key), request).await else {
        // No owner now (or no NATS): the agent waits for a browser, as locally.
        return Ok(());
    };
    let Ok(joined) = serde_json::from_slice::<Joined>(&answer.payload) else { return Ok(()) };
    if let Some(max) = joined.full {
        return Err(max);
    }
    if joined.node != *links.node {
        link.set_owner(Owner::There { node: joined.node.into(), has_browser: joined.has_browser });
    }
    if let Some(tools) = joined.tools
        && let Ok(tools) = serde_json::from_str::<Vec<serde_json::Value>>(tools.get())
        && let Ok(tools) = ToolSet::validate(tools, usize::MAX)
    {
        link.session.mirror_tools(Arc::new(tools));
    }
    Ok(())
}

/// A call's name, for its cancel: unique across the cluster's nodes (64
/// random bits drawn once per process, then a count), in hex. Drawing 64
/// fresh bits from the OS and formatting them byte by byte took 5 % of the
/// agent's node's time per call, and `write!` with hex formatting 1.7 %.
fn crate_id() -> String {
    use std::sync::LazyLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: LazyLock<u64> = LazyLock::new(|| {
        let mut bits = [0u8; 8];
        getrandom::fill(&mut bits).expect("the operating system's random source");
        u64::from_le_bytes(bits)
    });
    static COUNT: AtomicU64 = AtomicU64::new(0);
    hex_id(*PREFIX, COUNT.fetch_add(1, Ordering::Relaxed))
}

/// `prefix` in 16 hex digits, then `count` in as few as it takes, as
/// `format!("{prefix:016x}{count:x}")` writes them.
fn hex_id(prefix: u64, count: u64) -> String {
    let count_digits = (64 - count.leading_zeros()).div_ceil(4).max(1);
    let mut text = Vec::with_capacity(32);
    for (value, digits) in [(prefix, 16), (count, count_digits)] {
        text.extend((0..digits).rev().map(|i| HEX[((value >> (4 * i)) & 15) as usize]));
    }
    String::from_utf8(text).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_unique_and_carry_the_process_prefix() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| crate_id()).collect();
        assert_eq!(ids.len(), 10_000);
        let prefixes: std::collections::HashSet<&str> = ids.iter().map(|id| &id[..16]).collect();
        assert_eq!(prefixes.len(), 1);
        assert!(ids.iter().all(|id| id.len() > 16 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }

    #[test]
    fn call_ids_read_as_formatted_hex() {
        for (prefix, count) in [(0, 0), (1, 1), (0xdead_beef, 15), (u64::MAX, 16), (0x0123_4567_89ab_cdef, u64::MAX)] {
            assert_eq!(hex_id(prefix, count), format!("{prefix:016x}{count:x}"));
        }
    }
}
