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
    /// `id`'s value, when [`compact`] read it as digits that fit: the id
    /// without reading its text again.
    pub int_id: Option<u64>,
}

/// The fast path, for the messages nearly every peer sends: one object whose
/// keys have no escapes and come at most once each, with `jsonrpc`, `method`
/// and `id` (when present) plain strings without escapes, numbers or null.
/// One pass over the keys, no derive machinery; the other members' values are
/// checked by [`raw::value_end`] (by serde, the rare ones it leaves). `None`
/// for anything else, which then goes the serde way and gets exactly the
/// answer it always got: for whatever this accepts, serde reads the same
/// members (the `message` fuzz target checks both ways against each other).
#[inline(always)]
pub(super) fn scan(text: &str) -> Option<Members<'_>> {
    if let Some((members, len)) = compact(text)
        && len == text.len()
    {
        return Some(members);
    }
    general(text)
}

/// [`scan`] of whatever [`compact`] does not read: a member at a time, kept
/// out of line so that [`scan`] inlines as the compact reading and a call.
#[inline(never)]
fn general(text: &str) -> Option<Members<'_>> {
    let b = text.as_bytes();
    let prefixed = starts_with(b, PREFIX);
    let mut members = Members { plain: true, ..Members::default() };
    let mut i = if prefixed {
        members.jsonrpc = Some(&text[VERSION]);
        skip_ws(b, PREFIX.len())
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

/// How nearly every message starts, and where in it the version's text is.
const PREFIX: &[u8; 17] = b"{\"jsonrpc\":\"2.0\",";
const VERSION: std::ops::Range<usize> = 11..16;

/// Whether `key` is at `i`: a fixed-size comparison, a few loads, where a
/// slice's is a call.
#[inline]
fn at<const N: usize>(b: &[u8], i: usize, key: &[u8; N]) -> bool {
    b.get(i..).is_some_and(|rest| starts_with(rest, key))
}

/// The layouts nearly every peer writes, without whitespace, after
/// [`PREFIX`] (serde_json from a struct, `JSON.stringify` from a literal):
///
/// - a request: `"id":ID,"method":"M"` and perhaps `,"params":V`;
/// - a notification, or a request with its id last: `"method":"M"`, perhaps
///   `,"params":V`, perhaps `,"id":ID`;
/// - a response: `"id":ID,"result":V` or `"id":ID,"error":V`;
///
/// then `}`: the members, and the message's length up to its `}` (the text
/// may go on, as a line read where it lies in a read does). Each key is
/// compared whole, with its colon, in the one place it may be; a layout this
/// fixed has no room for a duplicate, whitespace or another member. An id here is a plain string or
/// a non-negative integer. `None` for anything else, which the general loop
/// reads (and reads the same: what this accepts is a case of that loop).
///
/// The general loop spent about 560 instructions on a 55-byte `ping` (a
/// member's key, colon, value and separator, each looked up and bounds
/// checked in turn); this reads one in a fraction of that.
#[inline(always)]
pub(super) fn compact(text: &str) -> Option<(Members<'_>, usize)> {
    // Each member is a local until the end, where the members are made in
    // one go: members written through a `&mut` as they were read stayed in
    // memory, and came back as a copy stalled on their own stores.
    let b = text.as_bytes();
    // Nearly every peer starts with this, written compactly (serde_json,
    // `JSON.stringify`): one comparison instead of a member's worth of steps.
    if !starts_with(b, PREFIX) {
        return None;
    }
    let mut i = PREFIX.len();
    let (mut id, mut method, mut params, mut result, mut error) = (None, None, None, None, None);
    if at(b, i, b"\"id\":") {
        let read = compact_id(text, i + 5)?;
        (id, i) = (Some(read.0), read.1);
        if at(b, i, b",\"method\":") {
            let (name, value, end) = compact_method(text, i + 10)?;
            (method, params, i) = (Some(name), value, end);
        } else if at(b, i, b",\"result\":") {
            let (value, end) = value(text, i + 10)?;
            (result, i) = (Some(value), end);
        } else if at(b, i, b",\"error\":") {
            let (value, end) = value(text, i + 9)?;
            (error, i) = (Some(value), end);
        } else {
            return None;
        }
    } else if at(b, i, b"\"method\":") {
        let (name, value, end) = compact_method(text, i + 9)?;
        (method, params, i) = (Some(name), value, end);
        if at(b, i, b",\"id\":") {
            let read = compact_id(text, i + 6)?;
            (id, i) = (Some(read.0), read.1);
        }
    } else {
        return None;
    }
    if b.get(i) != Some(&b'}') {
        return None;
    }
    let (id, int_id) = id.map_or((None, None), |(text, int)| (Some(text), int));
    Some((Members { jsonrpc: Some(&text[VERSION]), method, id, params, result, error, plain: true, int_id }, i + 1))
}

/// A method's plain string at `i`, then perhaps `,"params":V`: the method,
/// the params, and where they end.
#[inline(always)]
fn compact_method(text: &str, i: usize) -> Option<(&str, Option<&RawValue>, usize)> {
    let end = plain_string(text.as_bytes(), i)?;
    let method = &text[i..end];
    match at(text.as_bytes(), end, b",\"params\":") {
        true => value(text, end + 10).map(|(params, end)| (method, Some(params), end)),
        false => Some((method, None, end)),
    }
}

/// An id at `i` that is a plain string or a non-negative integer without a
/// leading zero (a `-`, a fraction or an exponent goes the general way):
/// its text, its value, and where it ends. Digits followed by anything but
/// `,` or `}` fail the layout after it, so `01` or `1.5` is never cut short
/// here. Nineteen digits or fewer are also read as the id's value on the way
/// (they cannot pass `u64::MAX`); longer ones are left to [`Id`]'s reading
/// of the text. (Finding the digits first and reading them with `Id`'s own
/// reader was a second pass over them: 48 instructions of a `ping`'s parse.)
#[inline(always)]
fn compact_id(text: &str, i: usize) -> Option<((&str, Option<u64>), usize)> {
    let b = text.as_bytes();
    let (end, int_id) = match *b.get(i)? {
        b'0' => (i + 1, Some(0)),
        b'1'..=b'9' => {
            // Eight bytes at once when there are eight: a loop that ends
            // after as many digits as the id has mispredicts its exit on
            // ids of changing length (a fifth of the parse's samples).
            let (mut n, mut j) = match b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
                Some(&word) => {
                    let (count, value) = digits8(u64::from_le_bytes(word));
                    (value, i + count)
                }
                None => (0, i),
            };
            if j == i || j == i + 8 {
                while let Some(&d @ b'0'..=b'9') = b.get(j) {
                    n = n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                    j += 1;
                }
            }
            (j, (j - i <= 19).then_some(n))
        }
        b'"' => (plain_string(b, i)?, None),
        _ => return None,
    };
    Some(((&text[i..end], int_id), end))
}

/// The ASCII digits `word`'s bytes start with (its first byte first, as
/// read little-endian from text): how many, up to eight, and their value.
#[inline(always)]
fn digits8(word: u64) -> (usize, u64) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Each byte's distance from '0': a digit's is below ten.
    let x = word ^ (0x30 * ONES);
    // A byte's high bit set when it is not a digit: above 0x7f, or pushed
    // there by adding 0x76 (ten and up). A carry out of a byte only reaches
    // later bytes, past the first that is not a digit, which is all this reads.
    let not_digit = (x.wrapping_add(0x76 * ONES) | x) & (0x80 * ONES);
    let count = (not_digit.trailing_zeros() / 8) as usize;
    if count == 0 {
        return (0, 0);
    }
    // The digits moved to the top, zeros (leading zeros) below them, then
    // combined pairwise: tens with units, hundreds, ten-thousands.
    let mut v = x << (8 * (8 - count));
    v = (v.wrapping_mul(10) + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    v = (v.wrapping_mul(100) + (v >> 16)) & 0x0000_ffff_0000_ffff;
    v = (v.wrapping_mul(10_000) + (v >> 32)) & 0xffff_ffff;
    (count, v)
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

/// Any JSON value at `i` into an empty slot: where it ends.
fn any_value<'a>(text: &'a str, i: usize, slot: &mut Option<&'a RawValue>) -> Option<usize> {
    if slot.is_some() {
        return None;
    }
    let (read, end) = value(text, i)?;
    *slot = Some(read);
    Some(end)
}

/// Any JSON value at `i`, and where it ends: checked here when it is of the
/// common kind ([`raw::value_end`]), otherwise by serde (which checks it as
/// the derive would: `ignore_value` has no depth limit either way).
fn value(text: &str, i: usize) -> Option<(&RawValue, usize)> {
    // `{}` and `[]`, the params of most calls that take none: the same text
    // made a raw value once, cheaper than handing over the frame's.
    if let Some(pair @ (b"{}" | b"[]")) = text.as_bytes()[i..].first_chunk::<2>() {
        let (object, array) = *EMPTY;
        return Some((if pair == b"{}" { object } else { array }, i + 2));
    }
    if let Some(end) = raw::value_end(text.as_bytes(), i)
        && let Some(value) = raw::borrowed(&text[i..end])
    {
        return Some((value, end));
    }
    let rest = &text[i..];
    let raw = <&RawValue>::deserialize(&mut serde_json::Deserializer::from_str(rest)).ok()?;
    // The value is a slice of `rest`; serde skips no whitespace here, since
    // the caller already did.
    let start = raw.get().as_ptr().addr() - rest.as_ptr().addr();
    Some((raw, i + start + raw.get().len()))
}
