//! The fast path of parsing: one pass over the common shape of a message,
//! everything else left to serde (`parse.rs`), which reads it the same way
//! (the `message` fuzz target checks that on every input).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::raw::{self, colon, number, skip_ws, starts_with};

/// The members we look at: the three that must be scalars as their raw JSON
/// text, the three that may be anything as raw values. `Some` for a member
/// that is present, even as `null` (an absent id is not `"id": null`).
#[derive(Debug, Default)]
pub(super) struct Members<'a> {
    pub jsonrpc: Option<&'a str>,
    pub method: Option<&'a str>,
    pub id: Option<&'a str>,
    pub params: Option<&'a RawValue>,
    pub result: Option<&'a RawValue>,
    pub error: Option<&'a RawValue>,
    /// The scanner read these: `jsonrpc` and `method`, when strings, have no
    /// escapes, so their content is their text without the quotes (serde's
    /// members make no such promise).
    pub plain: bool,
}

/// The fast path, for the messages nearly every peer sends: one object whose
/// keys have no escapes and come at most once each, with `jsonrpc`, `method`
/// and `id` (when present) plain strings without escapes, numbers or null.
/// One pass over the keys, no derive machinery; the other members' values are
/// checked by [`raw::value_end`] (by serde, the rare ones it leaves). `None`
/// for anything else, which then goes the serde way and gets exactly the
/// answer it always got: for whatever this accepts, serde reads the same
/// members (the `message` fuzz target checks both ways against each other).
pub(super) fn scan(text: &str) -> Option<Members<'_>> {
    let b = text.as_bytes();
    let mut members = Members { plain: true, ..Members::default() };
    // Nearly every peer starts with this, written compactly (serde_json,
    // `JSON.stringify`): one comparison instead of a member's worth of steps.
    let mut i = if starts_with(b, b"{\"jsonrpc\":\"2.0\",") {
        members.jsonrpc = Some(&text[11..16]);
        skip_ws(b, 17)
    } else {
        let i = skip_ws(b, 0);
        if b.get(i) != Some(&b'{') {
            return None;
        }
        let i = skip_ws(b, i + 1);
        if b.get(i) == Some(&b'}') {
            return (skip_ws(b, i + 1) == b.len()).then_some(members);
        }
        i
    };
    loop {
        let (member, value_at) = match known_key(b, i) {
            Some(known) => known,
            None => (Member::Other, colon(b, plain_string(b, i)?)?),
        };
        i = match member {
            Member::Jsonrpc => scalar(text, value_at, &mut members.jsonrpc)?,
            Member::Method => scalar(text, value_at, &mut members.method)?,
            Member::Id => scalar(text, value_at, &mut members.id)?,
            Member::Params => any_value(text, value_at, &mut members.params)?,
            Member::Result => any_value(text, value_at, &mut members.result)?,
            Member::Error => any_value(text, value_at, &mut members.error)?,
            Member::Other => any_value(text, value_at, &mut None)?,
        };
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return (skip_ws(b, i + 1) == b.len()).then_some(members),
            _ => return None,
        }
    }
}

/// The members of the JSON object `text`, in order, each as its key and its
/// value, for a handler that reads a few params without serde's derive:
/// `each` sees every member, duplicates too. `None` when `text` is not an
/// object of the common kind (a key with escapes, a value nested past 64
/// levels): the caller reads it with serde then, which reads it as it
/// always did. `text` must be valid JSON already (a message's params are):
/// values are checked, but not the text as a whole.
pub fn object_members<'a>(text: &'a str, mut each: impl FnMut(&'a str, &'a RawValue)) -> Option<()> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Some(());
    }
    loop {
        let key_end = plain_string(b, i)?;
        let value_at = colon(b, key_end)?;
        let value_end = raw::value_end(b, value_at)?;
        each(&text[i + 1..key_end - 1], raw::borrowed(&text[value_at..value_end])?);
        i = skip_ws(b, value_end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Some(()),
            _ => return None,
        }
    }
}

#[derive(Clone, Copy)]
enum Member {
    Jsonrpc,
    Method,
    Id,
    Params,
    Result,
    Error,
    Other,
}

/// One of the six member names at `i` and where its value starts, found by
/// comparing whole names (a word and a byte) rather than a byte at a time:
/// nearly every key is one of them.
#[inline]
fn known_key(b: &[u8], i: usize) -> Option<(Member, usize)> {
    let rest = b.get(i..)?;
    let (member, len) = match rest.get(1)? {
        b'j' if starts_with(rest, b"\"jsonrpc\"") => (Member::Jsonrpc, 9),
        b'm' if starts_with(rest, b"\"method\"") => (Member::Method, 8),
        b'i' if starts_with(rest, b"\"id\"") => (Member::Id, 4),
        b'p' if starts_with(rest, b"\"params\"") => (Member::Params, 8),
        b'r' if starts_with(rest, b"\"result\"") => (Member::Result, 8),
        b'e' if starts_with(rest, b"\"error\"") => (Member::Error, 7),
        _ => return None,
    };
    Some((member, colon(b, i + len)?))
}

/// A string without escapes starting at `i` (its opening quote): the index
/// just past its closing quote. The frame is valid UTF-8 already, so only
/// escapes and control characters need a look.
fn plain_string(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match *b.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => return None,
            c if c < 0x20 => return None,
            _ => j += 1,
        }
    }
}

/// A plain string, a number or `null` at `i`, into an empty slot.
fn scalar<'a>(text: &'a str, i: usize, slot: &mut Option<&'a str>) -> Option<usize> {
    if slot.is_some() {
        return None;
    }
    let b = text.as_bytes();
    let end = match b.get(i)? {
        b'"' if starts_with(&b[i..], b"\"2.0\"") => i + 5,
        b'"' => plain_string(b, i)?,
        b'-' | b'0'..=b'9' => number(b, i)?,
        b'n' if starts_with(&b[i..], b"null") => i + 4,
        _ => return None,
    };
    *slot = Some(&text[i..end]);
    Some(end)
}

/// `{}` and `[]` as raw values.
static EMPTY: std::sync::LazyLock<(&RawValue, &RawValue)> = std::sync::LazyLock::new(|| {
    let raw = |text| serde_json::from_str::<&RawValue>(text).expect("`{}` and `[]` are JSON");
    (raw("{}"), raw("[]"))
});

/// `{}` as a raw value, made once: what absent params or arguments stand for.
pub fn empty_object() -> &'static RawValue {
    EMPTY.0
}

/// Any JSON value at `i` into an empty slot: checked here when it is of the
/// common kind ([`raw::value_end`]), otherwise by serde (which checks it as
/// the derive would: `ignore_value` has no depth limit either way).
fn any_value<'a>(text: &'a str, i: usize, slot: &mut Option<&'a RawValue>) -> Option<usize> {
    if slot.is_some() {
        return None;
    }
    // `{}` and `[]`, the params of most calls that take none: the same text
    // made a raw value once, cheaper than handing over the frame's.
    if let Some(pair @ (b"{}" | b"[]")) = text.as_bytes()[i..].first_chunk::<2>() {
        let (object, array) = *EMPTY;
        *slot = Some(if pair == b"{}" { object } else { array });
        return Some(i + 2);
    }
    if let Some(end) = raw::value_end(text.as_bytes(), i)
        && let Some(value) = raw::borrowed(&text[i..end])
    {
        *slot = Some(value);
        return Some(end);
    }
    let rest = &text[i..];
    let raw = <&RawValue>::deserialize(&mut serde_json::Deserializer::from_str(rest)).ok()?;
    // The value is a slice of `rest`; serde skips no whitespace here, since
    // the caller already did.
    let start = raw.get().as_ptr().addr() - rest.as_ptr().addr();
    *slot = Some(raw);
    Some(i + start + raw.get().len())
}
