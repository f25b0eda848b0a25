//! btcp-broker: an HTTP request head through path normalisation, query,
//! token, session id, Origin and handshake-header parsing; normalisation is
//! idempotent and the Origin policy is exactly the documented one.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| btcp_broker::fuzzing::http_request(data));
