//! A strict, bidirectional JSON-RPC 2.0 engine shared by the daemons of this
//! workspace.
//!
//! What it owns, one module each: the message types and their strict parsing
//! ([`message`]), the three framings ([`codec`]), the peer that correlates
//! requests in both directions ([`peer`]), method routing ([`router`]), bounded
//! event fan-out ([`fanout`]), listeners ([`listen`], [`systemd`]) and graceful
//! shutdown ([`shutdown`]).
//!
//! What it is not: it knows no daemon's methods, error codes or session model.
//! Anything two daemons would otherwise both write belongs here; anything only
//! one daemon needs stays in that daemon.

pub mod child;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod codec;
pub mod config;
pub mod daemon;
pub mod escape;
pub mod fanout;
#[cfg(feature = "files")]
pub mod files;
#[doc(hidden)]
pub mod fuzzing;
mod gate;
#[cfg(feature = "http")]
pub mod http;
pub mod listen;
pub mod log_sink;
pub mod message;
pub mod peer;
pub mod router;
pub mod shutdown;
pub mod systemd;
pub mod token;

pub use codec::{Frame, Outbound, Transport};
pub use message::{Id, RpcError};
pub use peer::{CallError, CancelNotice, ConnCtx, Connection, Ctx, PeerConfig, PeerHandle, PeerStats};
pub use router::{Gate, NoParams, Router};
pub use shutdown::Shutdown;
