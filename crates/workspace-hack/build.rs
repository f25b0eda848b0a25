//! Empty: a build script is what makes cargo resolve the `[build-dependencies]`
//! (the proc-macro side: `syn`) with the features the Cargo.toml names.
fn main() {}
