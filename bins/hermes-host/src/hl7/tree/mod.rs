//! The tree form of a message, shared by the `json`, `yaml` and `toml`
//! formats:
//!
//! ```json
//! {"segments": [{"segment": "PID", "fields": {"5": {"1": "DOE", "2": "JOHN"}}}]}
//! ```
//!
//! Keys are 1-based indices written as strings. A field that is one plain
//! value is a string; with components it is an object (components), whose
//! values are strings or objects (subcomponents); repetitions are an array.
//! Empty fields, components and subcomponents are left out; an empty
//! repetition inside an array is `""` (TOML has no null). In MSH, `"1"` is
//! the field separator and `"2"` the encoding characters.
//!
//! One departure from Hermes' own export, which is ambiguous there: a field
//! whose only component has subcomponents (`A&B`) is written
//! `{"1": {"1": "A", "2": "B"}}`, not `{"1": "A", "2": "B"}` (which reads as
//! two components), so that every tree converts back to the message it came
//! from.
//!
//! Leaves are HL7 text: escape sequences stay as written, so hl7 -> tree ->
//! hl7 gives the same bytes (trailing empty fields and components, which
//! the tree cannot hold and which carry nothing, aside). On the way in, a
//! delimiter inside a leaf is escaped rather than allowed to change the
//! structure; the escape character is kept as written, even where it starts
//! no sequence the host knows (`A\B`, `\X\`): a leaf read from a message
//! never holds a delimiter, so it goes back exactly as it came.
//!
//! The files: `format.rs` (the formats, and a message to and from text in
//! each), `node.rs` (the message as a tree, serialised straight from its
//! text: JSON, and TOML by the toml crate), `toml_writer.rs` and
//! `yaml_writer.rs` (TOML and YAML written here), `reader.rs` (a tree back
//! into a message).

mod format;
mod node;
pub(crate) mod reader;
mod toml_writer;
mod yaml_writer;

#[cfg(test)]
mod tests;

pub(crate) use format::toml_in_one_piece;
pub use format::{Format, read, read_owned, render};
pub use reader::MAX_INDEX;
