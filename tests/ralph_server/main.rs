//! ralph-server over a real PTY and its Unix socket, with a scripted fake
//! agent (`fake-agent.sh`) standing in for claude.

mod attach;
mod control;
mod fanout;
mod run;
mod socket;
mod support;
