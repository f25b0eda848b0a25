//! ralph-server over a real PTY and its Unix socket, with a scripted fake
//! agent (`fake-agent.sh`) standing in for claude; `ralph-server mcp` in
//! front of it ([`mcp`]).

mod attach;
mod control;
mod fanout;
mod inject;
mod mcp;
mod run;
mod shutdown;
mod socket;
mod support;
mod task_files;
mod terminal;
