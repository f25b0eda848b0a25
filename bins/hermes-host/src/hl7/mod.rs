//! The HL7 v2 message the host holds: its text, once, with where each
//! segment starts. Fields, repetitions, components and subcomponents are
//! found in the text when something asks for them ([`SegmentRef`] and the
//! views under it borrow it), never stored: a message costs its text plus
//! four bytes a segment, whatever its shape. (An owned tree of parts cost
//! 90 to 930 bytes per byte of text, issue 18; hl7-parser's own tree of
//! slices costs some 200 bytes a field.) It prints back byte for byte
//! because it is its text, and edits ([`patch`]) splice the text.
//!
//! What it owns: [`Hl7Message`] (parse, print, locate), the `json`/`yaml`/`toml`
//! tree of `editor/getMessage` ([`tree`]), location-query patches
//! ([`patch`]), and the [`Bounds`] a held message stays within. Values are
//! kept as HL7 text, escape sequences included (`\T\` stays `\T\`):
//! decoding and re-encoding would not give back the same bytes (`\X0D\`,
//! `\H\`, `\.br\` have no single encoded form).
//!
//! The grammar is hl7-parser's (the parser the Hermes desktop app uses),
//! which reads the delimiters from the header here; the structure below is
//! split the way it splits, and the `hl7_message` fuzz target checks that
//! every input is accepted, refused and split exactly as hl7-parser does.
//!
//! The files: `message.rs` (the text and its segment starts), `parse.rs`
//! (reading text as hl7-parser does), `parts.rs` (views of segments, fields,
//! repetitions, components), `delimiters.rs`, `bounds.rs`, [`tree`],
//! [`patch`], and `owned.rs` (a segment as a tree of parts, what a tree is
//! read into).

mod bounds;
mod delimiters;
mod message;
pub(crate) mod owned;
mod parse;
mod parts;
pub mod patch;
pub mod tree;

#[cfg(test)]
pub(crate) mod samples;

pub use bounds::{Bounds, Exceeded};
pub use delimiters::{Delimiters, is_segment_name};
pub use message::Hl7Message;
pub use parse::InvalidMessage;
pub(crate) use parse::stops_at;
pub use parts::{ComponentRef, FieldRef, RepeatRef, SegmentRef};
