//! The parts of btcp-broker that read what clients send before any upgrade,
//! as a library: path, query, token, session id, Origin and handshake-header
//! parsing ([`http::request`]). The daemon (`main.rs`) uses them from here,
//! and the fuzz targets in `fuzz/` reach them through `fuzzing`. Nothing
//! else is public: this is not an API for other crates.

pub mod http {
    pub mod request;
}

#[doc(hidden)]
pub mod fuzzing;
