//! The parts of supex-bridge that judge what clients send, as a library: the
//! path policy of the file tools ([`paths`]). The daemon (`main.rs`) uses it
//! from here, and the fuzz targets in `fuzz/` reach it through `fuzzing`.
//! Nothing else is public: this is not an API for other crates.

pub mod paths;

#[doc(hidden)]
pub mod fuzzing;
