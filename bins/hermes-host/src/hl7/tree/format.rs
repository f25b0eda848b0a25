//! The formats of `editor/getMessage` and `editor/setMessage`, and a
//! message to and from text in each: hl7 is the message's own text; json,
//! yaml and toml its tree.

use serde_json::Value;

use super::node::TreeOut;
use super::reader::from_tree;
use super::toml_writer::toml;
use super::yaml_writer::yaml;
use crate::hl7::message::Hl7Message;
use crate::hl7::parse::InvalidMessage;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Hl7,
    Json,
    Yaml,
    Toml,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Hl7 => "hl7",
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Toml => "toml",
        }
    }
}

/// Most elements (fields, repetitions, components, subcomponents) one tree
/// may make besides one per byte of its text.
const ELEMENT_ALLOWANCE: usize = 1_000_000;

/// The message as text in `format`.
pub fn render(message: &Hl7Message, format: Format) -> Result<String, String> {
    match format {
        Format::Hl7 => Ok(message.to_string()),
        Format::Json => serde_json::to_string(&TreeOut(message)).map_err(|e| e.to_string()),
        Format::Yaml => Ok(yaml(message.segments())),
        Format::Toml => Ok(toml(message)),
    }
}

/// The tree as TOML, by the toml crate, as it was written before [`toml`] wrote it here;
/// the `hl7_message` fuzz target checks they agree.
pub(crate) fn toml_in_one_piece(message: &Hl7Message) -> Result<String, String> {
    toml::to_string(&TreeOut(message)).map_err(|e| e.to_string())
}

/// Reads a message given as text in `format`.
pub fn read(text: &str, format: Format) -> Result<Hl7Message, InvalidMessage> {
    match format {
        Format::Hl7 => Hl7Message::parse(text),
        _ => read_tree(text, format),
    }
}

/// [`read`] of text the caller gives away: HL7 text becomes the message
/// itself, not a copy of it.
pub fn read_owned(text: String, format: Format) -> Result<Hl7Message, InvalidMessage> {
    match format {
        Format::Hl7 => Hl7Message::parse_owned(text),
        _ => read_tree(&text, format),
    }
}

fn read_tree(text: &str, format: Format) -> Result<Hl7Message, InvalidMessage> {
    let tree: Value = match format {
        Format::Hl7 => return Hl7Message::parse(text),
        Format::Json => serde_json::from_str(text).map_err(|e| InvalidMessage::Tree(format!("not JSON: {e}")))?,
        Format::Yaml => serde_saphyr::from_str(text).map_err(|e| InvalidMessage::Tree(format!("not YAML: {e}")))?,
        Format::Toml => toml::from_str(text).map_err(|e| InvalidMessage::Tree(format!("not TOML: {e}")))?,
    };
    let budget = ELEMENT_ALLOWANCE + text.len();
    from_tree(&tree, budget).map_err(InvalidMessage::Tree)
}
