//! Soak and fault tests: each daemon under mixed, realistic load for a while
//! with its resident memory sampled and shown flat, and the faults a daemon
//! meets in the field (clients vanishing mid-request, children SIGKILLed
//! mid-request, SIGTERM under load).
//!
//! Without `SOAK=1` each soak runs for about 18 s, sampling every 2 s, in the
//! normal suite. `SOAK=1` runs 10 minutes per daemon, sampling every 10 s
//! (`SOAK_SECONDS` overrides the length); run those one at a time:
//! `SOAK=1 cargo test -p integration-tests --test soak soak_ -- --test-threads=1 --nocapture`.
//! Each soak prints one Markdown table row of its samples.
//!
//! The faults: [`vanishing`] (clients that close without reading, event
//! streams dropped with a call pending), [`children`] (the Ruby runtime, an
//! extension and the agent SIGKILLed mid-request), [`sigterm`] (the signal
//! under load: everything sent before it answered or refused).

mod bridge;
mod broker;
mod children;
mod hermes;
mod pipeline;
mod ralph;
mod rss;
mod sigterm;
mod vanishing;
