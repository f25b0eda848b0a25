//! Why the runtime could not evaluate, as opposed to the code raising (that
//! is a [`super::protocol::RubyException`] in the evaluation's result).

use std::time::Duration;

/// Why the runtime could not evaluate (as opposed to the code raising).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "Ruby evaluation timed out after {}; the runtime was killed and restarted, \
         so its state (globals, constants, methods, REPL locals) was lost",
        humantime::format_duration(*after)
    )]
    Timeout { after: Duration },
    #[error(
        "the Ruby runtime exited during the evaluation ({exited}); it was restarted \
         and its state was lost"
    )]
    Crashed { exited: String },
    #[error("{message}")]
    Unavailable { message: String },
    /// The evaluation ran, but its reply could not be read (see
    /// `process::NoReply::Unusable`); the runtime goes on with its state.
    #[error(
        "the Ruby runtime's reply to the evaluation could not be used: {why}; the code ran, \
         and the runtime keeps its state"
    )]
    UnusableReply { why: String },
    #[error("the Ruby runtime was reset during the evaluation; its state was lost")]
    Reset,
    #[error("supex-bridge is shutting down; the Ruby runtime is stopped")]
    Stopped,
}
