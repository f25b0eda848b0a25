//! The `ralph-server` binary: everything is in the library (`lib.rs`), which
//! the fuzz targets share.

use std::process::ExitCode;

fn main() -> ExitCode {
    ralph_server::main()
}
