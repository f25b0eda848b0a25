//! Running a batch's members within the connection's bounds.
//!
//! A batch is answered as one array once all its members finish, so its
//! replies are held until the last one is done. Run all at once, a batch of
//! a thousand requests for large replies (files, say) would make a reply of
//! gigabytes from a line of kilobytes. So the connection's batches together
//! run at most `max_concurrent` members at a time (each batch always one),
//! and start none while the replies they hold reach `write_budget`: a member
//! left then is answered `overloaded` (a notification is dropped and
//! counted), as a request is when the backlog is full. What a connection's
//! batches hold is thus the write budget plus the replies of the members
//! already running, the same bound as for single requests.

use std::sync::atomic::Ordering::Relaxed;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;

use super::handle::Shared;
use crate::message::{self, Id, RpcError};

/// One member of a batch, not yet started: its id when it is a request, and
/// what runs it (a reply for a request, `None` for a notification).
pub(crate) struct Member {
    pub id: Option<Id>,
    pub run: BoxFuture<'static, Option<Vec<u8>>>,
}

/// Runs `members`, adding their replies to `replies` (those answered before
/// the batch started, such as invalid members).
pub(crate) async fn run(shared: &Shared, members: Vec<Member>, mut replies: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let (counters, config) = (&shared.counters, &shared.config);
    let mut held = Held { shared, members: 0, bytes: 0 };
    let mut waiting = members.into_iter();
    let mut running = FuturesUnordered::new();
    loop {
        while running.is_empty() || counters.batch_members.load(Relaxed) < config.max_concurrent {
            let Some(member) = waiting.next() else { break };
            if counters.batch_bytes.load(Relaxed) >= config.write_budget {
                match member.id {
                    Some(id) => replies.push(message::response_err(&id, &over_budget())),
                    None => _ = counters.dropped_notifications.fetch_add(1, Relaxed),
                }
                continue;
            }
            held.start();
            running.push(member.run);
        }
        let Some(finished) = running.next().await else { break };
        held.finish(finished.as_ref().map_or(0, Vec::len));
        replies.extend(finished);
    }
    replies
}

/// This batch's share of the connection's counts, given back however the
/// batch ends (finished, or dropped with its connection).
struct Held<'a> {
    shared: &'a Shared,
    members: usize,
    bytes: usize,
}

impl Held<'_> {
    fn start(&mut self) {
        self.members += 1;
        self.shared.counters.batch_members.fetch_add(1, Relaxed);
    }

    fn finish(&mut self, reply: usize) {
        self.members -= 1;
        self.bytes += reply;
        self.shared.counters.batch_members.fetch_sub(1, Relaxed);
        self.shared.counters.batch_bytes.fetch_add(reply, Relaxed);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.shared.counters.batch_members.fetch_sub(self.members, Relaxed);
        self.shared.counters.batch_bytes.fetch_sub(self.bytes, Relaxed);
    }
}

fn over_budget() -> RpcError {
    RpcError::internal("this batch's replies reached the connection's write budget; send the rest again")
        .with_data(serde_json::json!({"reason": "overloaded"}))
}
