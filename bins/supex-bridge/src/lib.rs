//! The parts of supex-bridge that judge what clients send, as a library: the
//! path policy of the file tools ([`paths`]) and the adapter of the legacy
//! `{command, parameters}` dialect ([`bridge::legacy`]). The daemon
//! (`main.rs`) uses them from here, and the fuzz targets in `fuzz/` reach
//! them through `fuzzing`. Nothing else is public: this is not an API for
//! other crates.

pub mod bridge {
    pub mod legacy;
}
pub mod paths;

#[doc(hidden)]
pub mod fuzzing;
