//! rpc-core's tests with real sockets, real child processes and real time,
//! and its in-process ones on paused time: one binary, one link.

mod bounds;
mod child;
mod clients;
mod common;
mod daemon;
mod fanout_pause;
mod handshake;
mod inline_handlers;
mod peer;
mod pipelining;
mod shutdown_answers;
mod spec_examples;
mod stdio;
mod systemd;
