//! Entry points for the fuzz targets in `fuzz/` (`hl7_message`, `hl7_tree`,
//! `hl7_patch`), kept here so that plain tests run them too. Each one feeds
//! untrusted text to the HL7 code and asserts what must hold beyond "no
//! panic": a message prints back as read and reads back the same, its tree
//! in every format reads back to the same tree, and a patch either leaves
//! the message as it was or makes one that reads back with the value set.
//! And that the host reads every message as hl7-parser does (`reference.rs`):
//! the same messages refused with the same reason, the same parts in the rest.
//!
//! `targets.rs` holds the entry points and what they check, `reference.rs`
//! how the host read messages before it kept them as text.

mod reference;
mod targets;

pub use targets::{hl7_message, hl7_patch, hl7_tree};
