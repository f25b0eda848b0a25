//! supex-bridge: a frame in the old `{command, parameters}` dialect; what the
//! adapter makes of it is a valid `tools/call` request with the frame's id.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| supex_bridge::fuzzing::legacy(data));
