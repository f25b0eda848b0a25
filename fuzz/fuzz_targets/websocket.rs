//! WebSocket framing: a client's raw bytes through tungstenite with the
//! daemons' limits and rpc-core's reader; text messages under the limit,
//! nothing after a frame the connection cannot carry on from.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_core::fuzzing::websocket(data));
