//! hermes-host: HL7 v2 text as `editor/setMessage` or a file gives it; a
//! message that parses prints back as read, re-parses to the same structure,
//! and round-trips through the json, yaml and toml trees.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hermes_host::fuzzing::hl7_message(data));
