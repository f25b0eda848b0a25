//! Parses arbitrary bytes as a JSON-RPC message or batch and serialises the
//! reply it would get. It must never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rpc_core::fuzzing::parse(data);
});
