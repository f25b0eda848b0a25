//! The Ruby runtime: one long-lived `ruby` process shared by both servers.
//!
//! Evaluations take turns on a fair lock (tokio's `Mutex` queues waiters in
//! arrival order), so they run one at a time, first come first served,
//! whichever server they came from; the caller's own task then writes the
//! request and reads the reply, with no hop through another task on the way.
//! Everything else (`complete`, `runtime_info`, `ping`) reads shared state or
//! talks to the driver's reader thread directly and never waits for a turn.
//!
//! The turn's holder enforces its timeout by killing the process and starts
//! the next one; a keeper task restarts a process that dies between
//! evaluations (see `lifecycle::crash_policy`), and `stop` ends it with the
//! daemon.
//!
//! The parts: [`handle`] (the [`Runtime`] handle), [`evaluation`] (one
//! evaluation and the turn it holds), [`lifecycle`] (which process runs, its
//! starts and restarts), [`error`], and below them [`process`] (one Ruby
//! process and its pipes), [`protocol`] (the driver's wire format, and the
//! driver itself, `driver.rb`) and [`console`] (what Ruby prints outside
//! evaluations).

mod console;
mod error;
mod evaluation;
mod handle;
mod lifecycle;
mod process;
mod protocol;

pub use console::ConsoleLog;
pub use error::RuntimeError;
pub use evaluation::{Eval, Evaluated};
pub use handle::{Runtime, RuntimeConfig};
pub use protocol::{RubyException, Scope, Show};
