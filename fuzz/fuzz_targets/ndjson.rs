//! NDJSON framing (TCP, Unix sockets): arbitrary bytes in reads of any size;
//! the same frames however they are cut, none over the limit, each parsed.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_core::fuzzing::ndjson(data));
