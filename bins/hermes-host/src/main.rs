//! hermes-host: a headless host for Hermes extensions editing HL7 v2
//! messages, and the client commands that talk to it. Everything is in the
//! library (`lib.rs`), which the fuzz targets use too.

use std::process::ExitCode;

fn main() -> ExitCode {
    hermes_host::main()
}
