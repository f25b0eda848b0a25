//! `subscribe {events}` / `unsubscribe {events}` and the delivery of events
//! to one client.
//!
//! Each client reads the session's event ring at its own cursor, delivered
//! by `fanout::ring::pump` ([`Session::subscribe`]): a client that stops
//! reading (or that the loop outpaces) loses events, counted, never its
//! connection, and slows nobody (the publisher never waits). When it reads
//! again, the first thing after the gap is an event of type `dropped` with
//! `{"count": N}`. Topics change in place while the pump runs: the events
//! it reads next follow the new topics.

use parking_lot::Mutex;
use std::sync::Arc;

use rpc_core::fanout::ring::SharedTopics;
use rpc_core::fanout::{EVERY_TOPIC, Topics};
use rpc_core::{Ctx, RpcError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::Session;

/// The event types a client may subscribe to (besides `*`).
pub const EVENT_TYPES: &[&str] = &["output", "state_change"];

/// One connection's state: its subscription's topics, once it subscribed.
#[derive(Default)]
pub struct Client {
    topics: Mutex<Option<SharedTopics>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let topics = self.topics.lock().as_ref().map(SharedTopics::get);
        f.debug_struct("Client").field("topics", &topics).finish()
    }
}

#[derive(Debug, Deserialize)]
pub struct EventsParams {
    events: Vec<String>,
}

fn check(events: &[String]) -> Result<(), RpcError> {
    match events.iter().find(|e| *e != EVERY_TOPIC && !EVENT_TYPES.contains(&e.as_str())) {
        Some(bad) => Err(RpcError::invalid_params(format!(
            "events: unknown event type {bad:?}; valid: {}, *",
            EVENT_TYPES.join(", ")
        ))),
        None => Ok(()),
    }
}

/// What a client is subscribed to, as the seed lists it.
fn listed(topics: &Topics) -> Vec<&'static str> {
    match topics {
        Topics::All { except } if except.is_empty() => vec![EVERY_TOPIC],
        topics => EVENT_TYPES.iter().copied().filter(|t| topics.contains(t)).collect(),
    }
}

pub fn subscribe(session: Arc<Session>) -> impl Fn(Ctx<Client>, EventsParams) -> Pending + Send + Sync + 'static {
    move |ctx: Ctx<Client>, params: EventsParams| {
        let session = session.clone();
        Box::pin(async move {
            check(&params.events)?;
            let mut slot = ctx.state.topics.lock();
            let topics = match &*slot {
                Some(shared) => shared.update(|topics| params.events.iter().for_each(|e| topics.add(e))),
                None => {
                    let mut topics = Topics::none();
                    params.events.iter().for_each(|e| topics.add(e));
                    // After the loop's end there is nothing more to send.
                    *slot = session.subscribe(topics.clone(), ctx.peer.clone());
                    topics
                }
            };
            Ok(json!({"subscribed": listed(&topics)}))
        })
    }
}

pub fn unsubscribe() -> impl Fn(Ctx<Client>, EventsParams) -> Pending + Send + Sync + 'static {
    move |ctx: Ctx<Client>, params: EventsParams| {
        Box::pin(async move {
            check(&params.events)?;
            let topics = match &*ctx.state.topics.lock() {
                Some(shared) => shared.update(|topics| params.events.iter().for_each(|e| topics.remove(e))),
                None => Topics::none(),
            };
            Ok(json!({"subscribed": listed(&topics)}))
        })
    }
}

pub type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, RpcError>> + Send>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_event_types_are_refused_naming_the_valid_ones() {
        let err = check(&["output".into(), "bogus".into()]).unwrap_err();
        assert_eq!(err.code, RpcError::INVALID_PARAMS);
        assert!(
            err.message.contains("\"bogus\"") && err.message.contains("output, state_change, *"),
            "{}",
            err.message
        );
        assert!(check(&["*".into(), "state_change".into()]).is_ok());
    }

    #[test]
    fn subscriptions_are_listed_as_the_seed_shows_them() {
        let mut topics = Topics::only(["output", "state_change"]);
        assert_eq!(listed(&topics), ["output", "state_change"]);
        topics.remove("output");
        assert_eq!(listed(&topics), ["state_change"]);
        topics.add("*");
        assert_eq!(listed(&topics), ["*"]);
        topics.remove("state_change");
        assert_eq!(listed(&topics), ["output"]);
    }
}
