//! ralph-server: the bytes of a `prd.json` the agent wrote; the next story is
//! the one the loop's rule picks, and the PRD serialises and reads back the same.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ralph_server::fuzzing::prd(data));
