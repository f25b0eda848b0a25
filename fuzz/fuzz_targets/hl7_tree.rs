//! hermes-host: a message tree in json, yaml or toml (`editor/setMessage`);
//! what reads is a message that prints and reads back the same.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hermes_host::fuzzing::hl7_tree(data));
