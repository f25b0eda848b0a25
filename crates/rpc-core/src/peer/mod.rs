//! The peer: one JSON-RPC connection, symmetric in both directions.
//!
//! One task per connection ([`Connection::run`], `connection.rs`) does
//! everything: it reads frames, routes responses to our pending calls
//! (`outgoing.rs`), runs incoming handlers as futures it polls itself, with
//! no task spawn per message (`dispatch.rs`, `incoming.rs`), and writes what
//! the outbox holds (`outbox.rs`: one bounded queue, one writer, flushed once
//! per batch). Because the reader and the handlers live in one loop, a
//! handler that awaits a reply from the other side never stops that reply
//! from being read: that is the deadlock tower-lsp's `buffer_unordered(4)`
//! walks into.
//!
//! Memory is bounded in bytes whatever the other side does: replies wait in
//! the outbox (a byte budget), requests and notifications that cannot run yet
//! wait in the incoming backlog (a count and a byte budget), and past those,
//! requests are refused (`overloaded`) and notifications dropped, until a
//! peer that keeps flooding is cut off. The reader pauses while the outbox is
//! full (the other side is not reading our replies), but never while we wait
//! for answers of our own: two peers that flood each other with requests
//! whose handlers call back would otherwise stop reading each other's answers
//! and stall for good.
//!
//! [`PeerHandle`] (`handle.rs`) is the cheap, cloneable side: send requests
//! (with a timeout each, or none) and notifications, and close the
//! connection. When the connection ends, every pending call fails at once
//! with [`CallError::Disconnected`]. A handler gets a [`Ctx`] (`ctx.rs`).
//!
//! This file only declares the parts and names what the crate exports: each
//! part imports its neighbours directly, never through here.

mod batch;
mod config;
mod connection;
pub mod ctx;
mod dispatch;
mod handle;
mod incoming;
pub(crate) mod outbox;
mod outgoing;
mod tokens;

pub use config::{DEFAULT_BACKLOG, DEFAULT_BACKLOG_BYTES, DEFAULT_WRITE_BUDGET, PeerConfig};
pub use connection::Connection;
pub use ctx::{Abandoned, ConnCtx, Ctx};
pub use dispatch::not_serving;
pub use handle::{CancelNotice, CloseReason, Closed, PeerHandle, PeerStats, ReplyRoom};
pub use outgoing::{CallError, Reply};
