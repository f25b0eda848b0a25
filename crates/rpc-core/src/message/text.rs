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
