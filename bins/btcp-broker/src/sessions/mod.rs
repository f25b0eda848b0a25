//! Sessions: the broker's domain model.
//!
//! A session belongs to a browser (its tool provider) and holds the tools that
//! browser registered and the agents that joined it. One browser at a time: a
//! second browser with the same id replaces the first. A browser that goes away
//! leaves its session (agents and cached tools) behind for its return; a session
//! nobody is attached to is removed after the idle TTL.
//!
//! - [`session`]: one session (its browser, tools, agents, and the events its
//!   agents hear) and the byte budget of the tool lists kept for browsers that
//!   left.
//! - [`registry`]: every session by id: attach, find, list, expire, evict.
//! - [`forward`]: an agent's `tools/call` on its way to the session's browser.
//!
//! Nothing here knows of HTTP, the method tables or the connections' state
//! (`state.rs`): the connections hold sessions, not the reverse.

pub mod forward;
pub mod registry;
pub mod session;

pub use registry::{AttachError, Counts, SessionRegistry};
pub use session::{BrowserSlot, ClientType, Session, SessionEvent, ToolsUpdated};
