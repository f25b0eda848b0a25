//! btcp-broker: the BTCP session broker (see `lib.rs`).

use std::process::ExitCode;

/// A message's life is a burst of small allocations (frame, params, reply);
/// mimalloc's per-thread free lists make them several times cheaper than
/// glibc's (forwarded tools/call: +60% throughput in rpc-bench).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    btcp_broker::main()
}
