//! The cluster: several brokers as one BTCP service, through NATS (see
//! docs/btcp-broker.md, "Cluster"). Without `BTCP_CLUSTER` none of it runs
//! and nothing of NATS is touched.
//!
//! - [`settings`]: `BTCP_CLUSTER*`, `BTCP_NODE_*`.
//! - [`subject`]: subjects and the encoding of session ids into one token.
//! - [`wire`]: what nodes say to each other.
//! - [`directory`]: the KV bucket of sessions and this node's mirror of it.
//! - [`liveness`]: heartbeats, and finding lost nodes.
//! - [`link`], [`task`], [`owner`]: one session's link to the cluster on
//!   this node (as its owner, or for agents here).
//! - [`remote`]: an agent's join and calls to a session owned elsewhere.
//! - [`node`]: this node; [`Cluster`] is what the rest of the broker uses.

pub mod directory;
pub mod link;
pub mod liveness;
pub mod node;
pub mod owner;
pub mod remote;
pub mod settings;
pub mod subject;
pub mod task;
pub mod wire;

pub use node::{Cluster, JoinError};
pub use remote::Unrouted;
