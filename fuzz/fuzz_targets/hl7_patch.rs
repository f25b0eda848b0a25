//! hermes-host: location queries (`PID.5.1`, `OBX[2].5`) and patches
//! (`editor/patchMessage`); a refused patch changes nothing, an applied one
//! leaves a message that reads back with the value where the path says.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hermes_host::fuzzing::hl7_patch(data));
