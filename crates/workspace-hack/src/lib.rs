//! Nothing to use: this crate only enables features of shared dependencies
//! (see its Cargo.toml), so every selection of the daemons builds alike.
