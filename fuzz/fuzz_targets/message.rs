//! A JSON-RPC message or batch: every reply it could get is a valid response
//! with the same id, and a request re-serialised reads back the same.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_core::fuzzing::parse(data));
