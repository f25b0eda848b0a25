//! JSON-RPC 2.0 messages: ids, errors, strict parsing and serialisation.
//!
//! Incoming text is parsed into borrowed types (`&RawValue` for params and
//! results) so the hot path never builds a `serde_json::Value`. Every rule of the
//! specification is enforced here, once, so that framings and the peer only move
//! bytes around. Choices the specification leaves open:
//!
//! - `"params": null` is accepted and means "no params".
//! - Number ids are kept as the exact text received (`1.0`, `-0`, `1e400` and
//!   numbers past 2^64 all come back byte for byte).
//! - A response carrying both `result` and `error` is reported as
//!   [`Outcome::Both`]; whether to accept it is the peer's policy.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::de::{Deserializer, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// The only protocol version this crate speaks.
pub const JSONRPC_VERSION: &str = "2.0";

/// A request id exactly as the other side wrote it.
#[derive(Clone, Debug)]
pub enum Id {
    /// `"id": null`. Legal, if discouraged; also what errors without a readable id carry.
    Null,
    /// A non-negative integer written plainly (`0`, `42`): the common case,
    /// kept without an allocation. Its text is exactly `n.to_string()`.
    Int(u64),
    /// Any other JSON number, kept as its original text so it is echoed byte
    /// for byte (`-1`, `1.50`, `1e400`, integers past 2^64).
    Number(Box<RawValue>),
    /// A JSON string, decoded (escapes resolved).
    String(Box<str>),
}

impl Id {
    /// Reads an id from its raw JSON text. Objects, arrays and booleans are not ids.
    pub fn from_raw(raw: &RawValue) -> Option<Id> {
        Id::from_text(raw.get())
    }

    /// The same from validated JSON text.
    fn from_text(text: &str) -> Option<Id> {
        match text.as_bytes().first()? {
            b'"' => decode_str(text).map(|s| Id::String(s.into())),
            b'0'..=b'9' => plain_integer(text).map(Id::Int).or_else(|| Id::number(text)),
            b'-' => Id::number(text),
            b'n' => Some(Id::Null),
            _ => None,
        }
    }

    /// A number kept as its text (already checked: this cannot fail).
    fn number(text: &str) -> Option<Id> {
        RawValue::from_string(text.to_owned()).ok().map(Id::Number)
    }

    /// The numeric value of an id written as a plain non-negative integer.
    /// This is how ids we issued ourselves are recognised in responses.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Id::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The length of the id as JSON, exact for numbers and null, a good guess
    /// for strings (escapes make it longer).
    fn json_len_hint(&self) -> usize {
        match self {
            Id::Null => 4,
            Id::Int(n) => n.checked_ilog10().unwrap_or(0) as usize + 1,
            Id::Number(raw) => raw.get().len(),
            Id::String(s) => s.len() + 2,
        }
    }

    /// Appends the id as JSON.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Id::Null => out.extend_from_slice(b"null"),
            Id::Int(n) => out.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes()),
            Id::Number(raw) => out.extend_from_slice(raw.get().as_bytes()),
            Id::String(s) => write_json_str(out, s),
        }
    }
}

impl From<u64> for Id {
    fn from(n: u64) -> Self {
        Id::Int(n)
    }
}

/// The value of digits only, without a leading zero (JSON allows none
/// anyway), below 2^64: text that `u64` formatting would reproduce exactly.
fn plain_integer(text: &str) -> Option<u64> {
    let digits = text.as_bytes();
    if digits.len() > 1 && digits[0] == b'0' {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| match d {
        b'0'..=b'9' => n.checked_mul(10)?.checked_add(u64::from(d - b'0')),
        _ => None,
    })
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Id::String(s.into())
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Id::Null, Id::Null) => true,
            (Id::Int(a), Id::Int(b)) => a == b,
            (Id::Number(a), Id::Number(b)) => a.get() == b.get(),
            (Id::String(a), Id::String(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Id {}

impl Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Id::Null => state.write_u8(0),
            Id::Int(n) => {
                state.write_u8(3);
                state.write_u64(*n);
            }
            Id::Number(raw) => {
                state.write_u8(1);
                raw.get().hash(state);
            }
            Id::String(s) => {
                state.write_u8(2);
                s.hash(state);
            }
        }
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Null => f.write_str("null"),
            Id::Int(n) => write!(f, "{n}"),
            Id::Number(raw) => f.write_str(raw.get()),
            Id::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl Serialize for Id {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Null => s.serialize_none(),
            Id::Int(n) => s.serialize_u64(*n),
            Id::Number(raw) => raw.serialize(s),
            Id::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Id::from_raw(&raw).ok_or_else(|| serde::de::Error::custom("an id must be a string, a number or null"))
    }
}

/// A JSON-RPC error object, and the error type every handler returns.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{message} ({code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;

    /// An error with a daemon's own code (the -32099..-32000 range, or an
    /// extension's range).
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(Self::PARSE_ERROR, format!("Parse error: {detail}"))
    }

    pub fn invalid_request(detail: impl fmt::Display) -> Self {
        Self::new(Self::INVALID_REQUEST, format!("Invalid Request: {detail}"))
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(Self::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    pub fn invalid_params(detail: impl fmt::Display) -> Self {
        Self::new(Self::INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    pub fn internal(detail: impl fmt::Display) -> Self {
        Self::new(Self::INTERNAL_ERROR, format!("Internal error: {detail}"))
    }
}

/// One parsed message, borrowing from the frame it came from.
#[derive(Debug)]
pub enum Message<'a> {
    Request { id: Id, method: Cow<'a, str>, params: Option<&'a RawValue> },
    Notification { method: Cow<'a, str>, params: Option<&'a RawValue> },
    Response { id: Id, outcome: Outcome<'a> },
}

/// What a response carried.
#[derive(Debug)]
pub enum Outcome<'a> {
    Result(&'a RawValue),
    Error(RpcError),
    /// Both members present: invalid by the letter of the spec, but some clients
    /// send it for tool errors. The peer decides what to do with it.
    Both(&'a RawValue, RpcError),
    /// An `error` member that is not a valid error object.
    Malformed(String),
}

/// A message that cannot be processed, and the error to answer it with.
#[derive(Debug)]
pub struct Invalid {
    /// The id to answer with; `Id::Null` when it could not be read.
    pub id: Id,
    /// Boxed: an invalid message is the rare case, and a `Result` whose error
    /// is as large as an `RpcError` (its `data` a `serde_json::Value`, which
    /// grows with serde_json's features) would make every parse result larger.
    pub error: Box<RpcError>,
    /// It had an id but neither `method` nor `result`/`error`: a request
    /// without a method, or a response without an outcome. The peer decides
    /// which by whether the id is one of its own calls.
    pub lacks_outcome: bool,
}

/// A whole frame: one message or a batch.
#[derive(Debug)]
pub enum Parsed<'a> {
    Single(Result<Message<'a>, Invalid>),
    Batch(Vec<Result<Message<'a>, Invalid>>),
    /// The frame as a whole is answered with this one error (bad JSON, `[]`, an
    /// over-long batch, a top-level value that is not an object or array).
    Rejected(RpcError),
}

/// Parses one frame. `max_batch` caps the length of a batch.
pub fn parse(frame: &[u8], max_batch: usize) -> Parsed<'_> {
    // One UTF-8 check for the whole frame; after it serde reads `&str` input,
    // which it does not re-validate string by string.
    let Ok(text) = std::str::from_utf8(frame) else {
        return Parsed::Rejected(RpcError::parse_error("invalid UTF-8"));
    };
    let Some(first) = text.bytes().find(|b| !b.is_ascii_whitespace()) else {
        return Parsed::Rejected(RpcError::parse_error("empty message"));
    };
    match first {
        b'[' => match serde_json::from_str::<Vec<&RawValue>>(text) {
            Ok(items) if items.is_empty() => Parsed::Rejected(RpcError::invalid_request("empty batch")),
            Ok(items) if items.len() > max_batch => Parsed::Rejected(RpcError::invalid_request(format!(
                "batch of {} messages exceeds the limit of {max_batch}",
                items.len()
            ))),
            Ok(items) => Parsed::Batch(items.into_iter().map(|raw| parse_object(raw.get())).collect()),
            Err(e) => Parsed::Rejected(classify(text, e)),
        },
        b'{' => {
            let single = parse_object(text);
            // A syntax error anywhere in the frame is -32700 as a whole, never -32600.
            if let Err(Invalid { error, .. }) = &single
                && error.code == RpcError::PARSE_ERROR
            {
                return Parsed::Rejected(*single.unwrap_err().error);
            }
            Parsed::Single(single)
        }
        _ => match serde_json::from_str::<IgnoredAny>(text) {
            Ok(_) => Parsed::Rejected(RpcError::invalid_request("a message must be an object or an array")),
            Err(e) => Parsed::Rejected(RpcError::parse_error(e)),
        },
    }
}

/// The members we look at: the three that must be scalars as their raw JSON
/// text, the three that may be anything as raw values. `Some` for a member
/// that is present, even as `null` (an absent id is not `"id": null`).
#[derive(Debug, Default)]
struct Members<'a> {
    jsonrpc: Option<&'a str>,
    method: Option<&'a str>,
    id: Option<&'a str>,
    params: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
}

/// The same members read by serde, for any object the scanner passes over.
/// `present` keeps `"id": null` apart from an absent id (plain `Option` would
/// fold both into `None`).
#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

fn members_by_serde(text: &str) -> serde_json::Result<Members<'_>> {
    let raw: RawMessage<'_> = serde_json::from_str(text)?;
    Ok(Members {
        jsonrpc: raw.jsonrpc.map(RawValue::get),
        method: raw.method.map(RawValue::get),
        id: raw.id.map(RawValue::get),
        params: raw.params,
        result: raw.result,
        error: raw.error,
    })
}

/// The fast path, for the messages nearly every peer sends: one object whose
/// keys have no escapes and come at most once each, with `jsonrpc`, `method`
/// and `id` (when present) plain strings without escapes, numbers or null.
/// One pass over the keys, no derive machinery; the other members' values are
/// still read (and so checked) by serde. `None` for anything else, which then
/// goes the serde way and gets exactly the answer it always got: for whatever
/// this accepts, serde reads the same members (the `message` fuzz target
/// checks both ways against each other).
fn scan(text: &str) -> Option<Members<'_>> {
    let b = text.as_bytes();
    let mut members = Members::default();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (skip_ws(b, i + 1) == b.len()).then_some(members);
    }
    loop {
        let (member, key_end) = match known_key(b, i) {
            Some(known) => known,
            None => (Member::Other, plain_string(b, i)?),
        };
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        i = match member {
            Member::Jsonrpc => scalar(text, i, &mut members.jsonrpc)?,
            Member::Method => scalar(text, i, &mut members.method)?,
            Member::Id => scalar(text, i, &mut members.id)?,
            Member::Params => any_value(text, i, &mut members.params)?,
            Member::Result => any_value(text, i, &mut members.result)?,
            Member::Error => any_value(text, i, &mut members.error)?,
            Member::Other => any_value(text, i, &mut None)?,
        };
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return (skip_ws(b, i + 1) == b.len()).then_some(members),
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

/// JSON's four whitespace bytes, as serde reads them.
#[inline]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// One of the six member names at `i`, and the index just past it, found by
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
    Some((member, i + len))
}

/// A fixed-size comparison, which compiles to a few loads rather than a call.
#[inline]
fn starts_with<const N: usize>(b: &[u8], prefix: &[u8; N]) -> bool {
    b.first_chunk::<N>() == Some(prefix)
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

/// A number by JSON's grammar starting at `i`: the index just past it.
fn number(b: &[u8], i: usize) -> Option<usize> {
    let digits = |mut j: usize| {
        let start = j;
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        (j > start).then_some(j)
    };
    let mut j = i + usize::from(b.get(i) == Some(&b'-'));
    j = match b.get(j)? {
        b'0' => j + 1,
        b'1'..=b'9' => digits(j)?,
        _ => return None,
    };
    if b.get(j) == Some(&b'.') {
        j = digits(j + 1)?;
    }
    if let Some(b'e' | b'E') = b.get(j) {
        j += 1;
        if let Some(b'+' | b'-') = b.get(j) {
            j += 1;
        }
        j = digits(j)?;
    }
    Some(j)
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

/// `{}` and `[]` as raw values: a frame's own text cannot be made one
/// without serde, but the same text from elsewhere reads the same.
static EMPTY: std::sync::LazyLock<(&RawValue, &RawValue)> = std::sync::LazyLock::new(|| {
    let raw = |text| serde_json::from_str::<&RawValue>(text).expect("`{}` and `[]` are JSON");
    (raw("{}"), raw("[]"))
});

/// Any JSON value at `i`, read by serde (which checks it as the derive would:
/// `ignore_value` has no depth limit either way), into an empty slot.
fn any_value<'a>(text: &'a str, i: usize, slot: &mut Option<&'a RawValue>) -> Option<usize> {
    if slot.is_some() {
        return None;
    }
    let rest = &text[i..];
    // `{}` and `[]`, the params of most calls that take none, without serde.
    if let Some(pair @ (b"{}" | b"[]")) = rest.as_bytes().first_chunk::<2>() {
        let (object, array) = *EMPTY;
        *slot = Some(if pair == b"{}" { object } else { array });
        return Some(i + 2);
    }
    let raw = <&RawValue>::deserialize(&mut serde_json::Deserializer::from_str(rest)).ok()?;
    // The value is a slice of `rest`; serde skips no whitespace here, since
    // the caller already did.
    let start = raw.get().as_ptr().addr() - rest.as_ptr().addr();
    *slot = Some(raw);
    Some(i + start + raw.get().len())
}

/// The scanner's promise, for the fuzz target and the tests: whatever it
/// reads, serde reads the same way. Panics on a disagreement.
pub(crate) fn check_scanner(text: &str) {
    fn texts<'a>(m: &Members<'a>) -> [Option<&'a str>; 6] {
        let raw = |v: Option<&'a RawValue>| v.map(RawValue::get);
        [m.jsonrpc, m.method, m.id, raw(m.params), raw(m.result), raw(m.error)]
    }
    if let Some(scanned) = scan(text) {
        match members_by_serde(text) {
            Ok(by_serde) => assert_eq!(texts(&scanned), texts(&by_serde), "the scanner and serde read {text:?} apart"),
            Err(e) => panic!("the scanner read {text:?}, which serde refuses: {e}"),
        }
    }
}

/// For the fuzz target: a message with an `id` member is never taken for a
/// notification (it would go unanswered). Panics if it is.
pub(crate) fn check_id_kept(text: &str) {
    if let Ok(members) = members_by_serde(text)
        && members.id.is_some()
        && let Ok(Message::Notification { .. }) = parse_object(text)
    {
        panic!("{text:?} has an id but was read as a notification");
    }
}

fn parse_object(text: &str) -> Result<Message<'_>, Invalid> {
    let members = match scan(text) {
        Some(members) => members,
        None => match members_by_serde(text) {
            Ok(members) => members,
            Err(e) => {
                return Err(Invalid { id: Id::Null, error: Box::new(classify(text, e)), lacks_outcome: false });
            }
        },
    };
    message_from(members)
}

fn message_from(raw: Members<'_>) -> Result<Message<'_>, Invalid> {
    let invalid = |id: Option<Id>, detail: &str| Invalid {
        id: id.unwrap_or(Id::Null),
        error: Box::new(RpcError::invalid_request(detail)),
        lacks_outcome: false,
    };

    let id = match raw.id {
        None => None,
        // A string that does not decode (a lone surrogate escape) is no id,
        // but the member is there: refused, never taken for a notification.
        Some(v) => match Id::from_text(v) {
            Some(id) => Some(id),
            None => return Err(invalid(None, "id must be a string, a number or null")),
        },
    };
    match raw.jsonrpc {
        Some(v) if decode_str(v).as_deref() == Some(JSONRPC_VERSION) => {}
        Some(_) => return Err(invalid(id, "jsonrpc must be exactly \"2.0\"")),
        None => return Err(invalid(id, "missing jsonrpc member")),
    }

    if let Some(method) = raw.method {
        let Some(method) = decode_str(method) else {
            return Err(invalid(id, "method must be a string"));
        };
        let params = match raw.params {
            None => None,
            Some(p) => match p.get().as_bytes()[0] {
                b'{' | b'[' => Some(p),
                b'n' => None,
                _ => return Err(invalid(id, "params must be an array or an object")),
            },
        };
        return Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        });
    }

    if raw.result.is_some() || raw.error.is_some() {
        let Some(id) = id else {
            return Err(invalid(None, "a response must carry an id"));
        };
        let error = raw
            .error
            .map(|e| serde_json::from_str::<RpcError>(e.get()).map_err(|err| format!("invalid error object: {err}")));
        let outcome = match (raw.result, error) {
            (_, Some(Err(problem))) => Outcome::Malformed(problem),
            (Some(result), None) => Outcome::Result(result),
            (None, Some(Ok(error))) => Outcome::Error(error),
            (Some(result), Some(Ok(error))) => Outcome::Both(result, error),
            (None, None) => unreachable!("checked above"),
        };
        return Ok(Message::Response { id, outcome });
    }

    let lacks_outcome = id.is_some();
    Err(Invalid { lacks_outcome, ..invalid(id, "missing method") })
}

/// Tells a syntax error (-32700) from valid JSON of the wrong shape (-32600).
/// serde stops at the first problem, so a shape error is double-checked against
/// the whole text: `{"id":1,"id":2,` is still a parse error.
fn classify(text: &str, e: serde_json::Error) -> RpcError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => match serde_json::from_str::<IgnoredAny>(text) {
            Ok(_) => RpcError::invalid_request(e),
            Err(syntax) => RpcError::parse_error(syntax),
        },
        _ => RpcError::parse_error(e),
    }
}

/// Decodes a JSON string (as its validated text) without copying when it has no escapes.
fn decode_str(text: &str) -> Option<Cow<'_, str>> {
    if !text.starts_with('"') {
        return None;
    }
    if !text.contains('\\') {
        // A validated JSON string without escapes is its own content, quotes aside.
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

fn write_json_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("writing to a Vec cannot fail");
}

/// The kind of an outgoing message, for transports that label them (SSE events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// Serialises a success response around an already-serialised result.
pub fn response_ok(id: &Id, result_json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(33 + id.json_len_hint() + result_json.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    id.write_json(&mut out);
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result_json);
    out.push(b'}');
    out
}

/// Serialises a success response, the result written straight after the id.
///
/// A small response is written on the stack first and then allocated at its
/// exact size: a buffer with spare capacity costs `Bytes` an extra
/// allocation (and two frees) on its way to the socket.
pub fn response_with<R: Serialize + ?Sized>(id: &Id, result: &R) -> serde_json::Result<Vec<u8>> {
    const SMALL: usize = 256;
    let mut small = std::io::Cursor::new([0u8; SMALL]);
    if write_response(&mut small, id, result).is_ok() {
        let len = small.position() as usize;
        return Ok(small.get_ref()[..len].to_vec());
    }
    let mut out = Vec::with_capacity(SMALL * 2);
    write_response(&mut out, id, result)?;
    Ok(out)
}

fn write_response<W: std::io::Write, R: Serialize + ?Sized>(
    out: &mut W,
    id: &Id,
    result: &R,
) -> serde_json::Result<()> {
    let io = serde_json::Error::io;
    out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":").map_err(io)?;
    serde_json::to_writer(&mut *out, id)?;
    out.write_all(b",\"result\":").map_err(io)?;
    serde_json::to_writer(&mut *out, result)?;
    out.write_all(b"}").map_err(io)
}

/// Serialises an error response.
pub fn response_err(id: &Id, error: &RpcError) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    id.write_json(&mut out);
    out.extend_from_slice(b",\"error\":");
    serde_json::to_writer(&mut out, error).expect("an error object always serialises");
    out.push(b'}');
    out
}

/// Serialises a request (`id: Some`) or a notification (`id: None`).
pub fn request<P: Serialize + ?Sized>(id: Option<&Id>, method: &str, params: &P) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
    if let Some(id) = id {
        out.extend_from_slice(b"\"id\":");
        id.write_json(&mut out);
        out.push(b',');
    }
    out.extend_from_slice(b"\"method\":");
    write_json_str(&mut out, method);
    let start = out.len();
    out.extend_from_slice(b",\"params\":");
    let params_at = out.len();
    serde_json::to_writer(&mut out, params)?;
    // `()` and `None` serialise as null: leave the member out rather than send
    // a value some peers reject.
    if &out[params_at..] == b"null" {
        out.truncate(start);
    }
    out.push(b'}');
    Ok(out)
}

/// Serialises several replies as one batch array.
pub fn batch(replies: &[Vec<u8>]) -> Vec<u8> {
    let len = replies.iter().map(|r| r.len() + 1).sum::<usize>() + 2;
    let mut out = Vec::with_capacity(len);
    out.push(b'[');
    for (i, reply) in replies.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(reply);
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(text: &str) -> Result<Message<'_>, Invalid> {
        match parse(text.as_bytes(), 1000) {
            Parsed::Single(m) => m,
            other => panic!("expected a single message, got {other:?}"),
        }
    }

    fn rejected(text: &str) -> RpcError {
        match parse(text.as_bytes(), 1000) {
            Parsed::Rejected(e) => e,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn request_with_positional_params() {
        let Ok(Message::Request { id, method, params }) =
            single(r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#)
        else {
            panic!("not a request")
        };
        assert_eq!(id.to_string(), "1");
        assert_eq!(method, "subtract");
        assert_eq!(params.unwrap().get(), "[42,23]");
    }

    #[test]
    fn absent_id_is_a_notification_but_null_id_is_a_request() {
        assert!(matches!(single(r#"{"jsonrpc":"2.0","method":"n"}"#), Ok(Message::Notification { .. })));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","method":"n","id":null}"#),
            Ok(Message::Request { id: Id::Null, .. })
        ));
    }

    #[test]
    fn number_ids_keep_their_exact_text() {
        for text in ["-7", "1.50", "1e400", "123456789012345678901234567890", "-0", "2.0E-3"] {
            let msg = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{text}}}"#);
            let Ok(Message::Request { id, .. }) = single(&msg) else { panic!("{text}") };
            let mut out = Vec::new();
            id.write_json(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), text);
        }
    }

    #[test]
    fn plain_integers_are_ints_and_everything_else_keeps_its_text() {
        let id = |text: &str| Id::from_raw(&RawValue::from_string(text.to_owned()).unwrap()).unwrap();
        assert_eq!(id("42"), Id::Int(42));
        assert_eq!(id("0"), Id::Int(0));
        assert!(matches!(id("18446744073709551616"), Id::Number(_)), "past u64::MAX");
        assert!(matches!(id("-1"), Id::Number(_)));
        assert!(matches!(id("1.0"), Id::Number(_)));
        assert_ne!(id("1.0"), id("1"), "different texts are different ids");
        assert_eq!(id("7").as_u64(), Some(7));
        assert_eq!(id("7.0").as_u64(), None);
    }

    #[test]
    fn string_ids_are_decoded_and_reencoded() {
        let Ok(Message::Request { id, .. }) = single(r#"{"jsonrpc":"2.0","method":"m","id":"a\"b\u00e9"}"#) else {
            panic!()
        };
        assert_eq!(id, Id::from("a\"bé"));
        let mut out = Vec::new();
        id.write_json(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"bé""#);
    }

    #[test]
    fn object_array_and_boolean_ids_are_invalid_with_null_id() {
        for id in ["{}", "[1]", "true", "false"] {
            let msg = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
            let Err(invalid) = single(&msg) else { panic!("{id} accepted") };
            assert_eq!(invalid.id, Id::Null);
            assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
        }
    }

    #[test]
    fn jsonrpc_must_be_exactly_2_0() {
        for v in [r#""1.0""#, "2.0", r#""2.0 ""#, "null"] {
            let msg = format!(r#"{{"jsonrpc":{v},"method":"m","id":3}}"#);
            let Err(invalid) = single(&msg) else { panic!("{v} accepted") };
            assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
            assert_eq!(invalid.id.to_string(), "3", "the readable id is kept");
        }
        let Err(invalid) = single(r#"{"method":"m","id":3}"#) else { panic!() };
        assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
        // An escaped spelling of "2.0" is still "2.0".
        assert!(single(r#"{"jsonrpc":"2\u002e0","method":"m"}"#).is_ok());
    }

    #[test]
    fn method_must_be_a_string() {
        let Err(invalid) = single(r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#) else { panic!() };
        assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
        assert_eq!(invalid.id, Id::Null);
    }

    #[test]
    fn params_must_be_structured_and_null_means_none() {
        for p in ["1", r#""x""#, "true"] {
            let msg = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{p},"id":1}}"#);
            assert_eq!(single(&msg).unwrap_err().error.code, RpcError::INVALID_REQUEST, "{p}");
        }
        let Ok(Message::Request { params, .. }) = single(r#"{"jsonrpc":"2.0","method":"m","params":null,"id":1}"#)
        else {
            panic!()
        };
        assert!(params.is_none());
    }

    #[test]
    fn escaped_method_names_are_decoded() {
        let Ok(Message::Notification { method, .. }) = single(r#"{"jsonrpc":"2.0","method":"to\u006fls/list"}"#) else {
            panic!()
        };
        assert_eq!(method, "tools/list");
    }

    #[test]
    fn invalid_json_is_a_parse_error_even_after_a_shape_error() {
        assert_eq!(rejected(r#"{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]"#).code, -32700);
        assert_eq!(rejected(r#"{"id":1,"id":2,"#).code, -32700);
        assert_eq!(rejected("\u{feff}").code, -32700);
    }

    #[test]
    fn duplicate_members_are_an_invalid_request() {
        let Err(invalid) = single(r#"{"jsonrpc":"2.0","method":"a","method":"b","id":1}"#) else { panic!() };
        assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
    }

    #[test]
    fn top_level_scalars_are_invalid_requests() {
        assert_eq!(rejected("1").code, -32600);
        assert_eq!(rejected(r#""x""#).code, -32600);
        assert_eq!(rejected("nul").code, -32700);
    }

    #[test]
    fn batches_follow_the_spec() {
        assert_eq!(rejected("[]").code, -32600);
        let Parsed::Batch(items) = parse(b"[1,2,3]", 1000) else { panic!() };
        assert_eq!(items.len(), 3);
        assert!(items.iter().all(|i| i.as_ref().unwrap_err().error.code == -32600));
        assert_eq!(rejected(r#"[{"jsonrpc":"2.0","method":"sum"},{"jsonrpc":"2.0""#).code, -32700);
        assert_eq!(parse(b"[1,2,3]", 2).rejected_code(), Some(-32600));
    }

    #[test]
    fn responses_are_recognised_with_every_outcome() {
        let Ok(Message::Response { id, outcome: Outcome::Result(r) }) =
            single(r#"{"jsonrpc":"2.0","result":19,"id":7}"#)
        else {
            panic!()
        };
        assert_eq!((id.as_u64(), r.get()), (Some(7), "19"));
        let Ok(Message::Response { outcome: Outcome::Error(e), .. }) =
            single(r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"x","data":[1]},"id":"a"}"#)
        else {
            panic!()
        };
        assert_eq!(e.data, Some(serde_json::json!([1])));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","result":{},"error":{"code":1,"message":"m"},"id":1}"#),
            Ok(Message::Response { outcome: Outcome::Both(..), .. })
        ));
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","error":"bad","id":1}"#),
            Ok(Message::Response { outcome: Outcome::Malformed(_), .. })
        ));
        assert!(single(r#"{"jsonrpc":"2.0","result":1}"#).is_err());
    }

    #[test]
    fn an_id_that_does_not_decode_is_refused_not_taken_for_a_notification() {
        // Found by the `legacy` fuzz target: a lone surrogate in a string id.
        for text in
            [r#"{"jsonrpc":"2.0","id":"sr\udb1501e","method":"m"}"#, r#"{"jsonrpc":"2.0","id":"\ud800","method":"m"}"#]
        {
            let Err(invalid) = single(text) else { panic!("{text} was accepted") };
            assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
            check_id_kept(text);
        }
    }

    #[test]
    fn the_scanner_reads_common_messages_and_leaves_the_rest_to_serde() {
        let fast = [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}"#,
            " {\t\"jsonrpc\" : \"2.0\" ,\r\n\"method\":\"a/b\", \"id\": \"x-1\", \"params\": [1, {\"k\": [true, null]}] } ",
            r#"{"jsonrpc":"2.0","id":-1.5e+3,"result":{"a":"\u00e9\n"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}"#,
            r#"{"id":0,"jsonrpc":"2.0","method":"m","extra":{"method":1},"params":null}"#,
            r#"{"jsonrpc":"2.0","method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"é"}"#,
            r#"{}"#,
            r#"{"jsonrpc":1,"id":2}"#,
            r#"{"jsonrpc":"2.0","idx":5,"i":1,"methods":2,"method":"m","":1}"#,
        ];
        for text in fast {
            assert!(scan(text).is_some(), "{text:?} should take the fast path");
            check_scanner(text);
        }
        let slow = [
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","params":[],"params":{},"method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"p\u0069ng"}"#,
            r#"{"jsonrpc":"2.0","\u0069d":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","\"":0,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":01,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":-,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1e,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":nul,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":nullx,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"m",}"#,
            r#"{"jsonrpc":"2.0","method":"m"} x"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{"a":}}"#,
            "{\"jsonrpc\":\"2.0\",\"method\":\"a\u{1}b\"}",
            r#"{"jsonrpc":"2.0","method":"m""#,
            r#"[{"jsonrpc":"2.0","method":"m"}]"#,
            r#"{"jsonrpc" "2.0"}"#,
            "",
        ];
        for text in slow {
            assert!(scan(text).is_none(), "{text:?} should be left to serde");
        }
        // Whichever path a message takes, it reads the same.
        for text in fast.iter().chain(&slow) {
            let via_serde = match members_by_serde(text) {
                Ok(members) => message_from(members),
                Err(e) => Err(Invalid { id: Id::Null, error: Box::new(classify(text, e)), lacks_outcome: false }),
            };
            let (via_parse, via_serde) = (format!("{:?}", parse_object(text)), format!("{via_serde:?}"));
            assert_eq!(via_parse, via_serde, "{text:?}");
        }
    }

    #[test]
    fn serialised_messages_are_exact() {
        let id = Id::from(5);
        assert_eq!(response_ok(&id, b"{\"a\":1}"), br#"{"jsonrpc":"2.0","id":5,"result":{"a":1}}"#);
        let err = response_err(&Id::Null, &RpcError::new(-32600, "Invalid Request"));
        assert_eq!(err, br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}"#);
        let req = request(Some(&Id::from("x")), "ping", &()).unwrap();
        assert_eq!(req, br#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#);
        let note = request(None, "event", &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(note, br#"{"jsonrpc":"2.0","method":"event","params":{"a":1}}"#);
    }

    impl Parsed<'_> {
        fn rejected_code(&self) -> Option<i64> {
            match self {
                Parsed::Rejected(e) => Some(e.code),
                _ => None,
            }
        }
    }
}
