//! The parts of hermes-host that read what extensions and control clients
//! send, as a library: the HL7 model, its tree formats and location-query
//! patches ([`hl7`]). The daemon (`main.rs`) uses them from here, and the fuzz
//! targets in `fuzz/` reach them through `fuzzing`. Nothing else is public:
//! this is not an API for other crates.

pub mod hl7;

#[doc(hidden)]
pub mod fuzzing;
