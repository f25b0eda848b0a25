//! B7: how long a line the agent writes to its terminal takes to reach
//! ralph-server's subscribers as an `output` event, and whether a thousand
//! subscribers, one of which never reads, slow the loop down.
//!
//! The agent is this program, `rpc-bench ralph-agent`, run by ralph-server for
//! one iteration. Once the suite's subscribers are in place (it creates the
//! go file) the agent writes paced lines stamped with CLOCK_MONOTONIC, one
//! clock for every process on the machine, and each subscriber takes the
//! difference when the event arrives. Then it floods the terminal and reports
//! how many lines a second it got through: a terminal's writer blocks while
//! its reader lags, so that is the loop's pace. The flood is timed between two
//! points where the terminal's buffers are equally full (after a warm-up, and
//! at the end), so what sits in them does not count.
//!
//! Three parts: the agent (`agent.rs`, a process of its own), the subscribers
//! (`subscribers.rs`, tasks in the suite's process), and the rounds that start
//! ralph-server with both (`bench.rs`).

pub mod agent;
pub mod bench;
pub mod subscribers;
