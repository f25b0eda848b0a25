//! supex-bridge over real sockets: the binary started on free ports with a
//! real `ruby`, spoken to as the Supex driver, the REPL and its own client
//! commands would.

mod admission;
mod capture;
mod eval;
mod files;
mod handshake;
mod lifecycle;
mod mcp;
mod memory;
mod repl;
mod repl_terminal;
mod replies;
mod service;
mod shutdown;
mod support;
