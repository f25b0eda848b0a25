//! JSON strings, read without a copy where they have no escapes.

use std::borrow::Cow;

/// Decodes a JSON string (as its validated text) without copying when it has no escapes.
pub(super) fn decode_str(text: &str) -> Option<Cow<'_, str>> {
    if !text.starts_with('"') {
        return None;
    }
    if !text.contains('\\') {
        // A validated JSON string without escapes is its own content, quotes aside.
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

/// Appends `s` as a JSON string.
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("writing to a Vec cannot fail");
}
