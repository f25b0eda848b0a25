//! Bounds and shutdown in every daemon, tried as an attacker and a careless
//! operator would: a log reader that goes away or stops reading, a client
//! that never reads its replies, and descendants that leave their process
//! group before the daemon is SIGKILLed. Each test starts the real binary on
//! real sockets and waits for what it can observe, never for a time.

mod descendants;
mod fixtures;
mod log_pipe;
mod write_stall;
