//! B6: round trips of `editor/getMessage` from an extension to hermes-host,
//! against the same extension loop talking to a raw Content-Length echo over a
//! pipe.
//!
//! The extension side is this program, `rpc-bench hermes-extension`, which the
//! host starts as its extension: it answers `initialize`, and on each
//! `command/execute` of [`extension::COMMAND`] keeps `window` calls in flight
//! for the warm-up and the measured time, then writes its report to a file
//! the suite reads. For the baseline the suite wires the same program's stdin and stdout
//! to `rpc-bench content-length-echo`, which sends every byte back unread: the
//! extension's requests come back as their own "replies", matched by id as the
//! load generator matches them. Both are single-threaded blocking loops that
//! read what is there and write what it triggered in one go, so the loop costs
//! as little as possible and the same on both sides of the ratio.
//!
//! Three parts: the extension (`extension.rs`), the pipe of Content-Length
//! frames it talks over and the echo at its other end (`pipe.rs`), and the
//! suite's side that starts the host or wires the echo (`bench.rs`).

pub mod bench;
pub mod extension;
pub mod pipe;
