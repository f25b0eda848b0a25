//! Feeds arbitrary bytes, split at an arbitrary point, to the content_length decoder and
//! parses every message it yields. It must never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rpc_core::fuzzing::content_length(data);
});
