//! Strict parsing: a frame into a [`Message`], a batch of them, or the
//! error that answers it.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny};
use serde_json::value::RawValue;

use super::error::RpcError;
use super::id::Id;
use super::scan::{Members, compact, scan};
use super::text::decode_str;

/// The only protocol version this crate speaks.
pub const JSONRPC_VERSION: &str = "2.0";

/// One parsed message, borrowing from the frame it came from.
#[derive(Debug)]
pub enum Message<'a> {
    Request { id: Id, method: Cow<'a, str>, params: Option<&'a RawValue> },
    Notification { method: Cow<'a, str>, params: Option<&'a RawValue> },
    Response { id: Id, outcome: Outcome<'a> },
}

/// What a response carried. Errors are boxed, as in [`Invalid`]: they are
/// the rare case, and a [`Message`] that holds one inline is twice the size,
/// which every parse then moves.
#[derive(Debug)]
pub enum Outcome<'a> {
    Result(&'a RawValue),
    Error(Box<RpcError>),
    /// Both members present: invalid by the letter of the spec, but some clients
    /// send it for tool errors. The peer decides what to do with it.
    Both(&'a RawValue, Box<RpcError>),
    /// An `error` member that is not a valid error object.
    Malformed(String),
}

/// Why an object with an id but neither `method` nor an outcome is refused.
pub(crate) const MISSING_METHOD: &str = "missing method";

/// A message that cannot be processed, and the error to answer it with.
#[derive(Debug)]
pub struct Invalid {
    /// The id to answer with; `Id::Null` when it could not be read.
    pub id: Id,
    /// Boxed: an invalid message is the rare case, and a `Result` whose error
    /// is as large as an `RpcError` (its `data` a `serde_json::Value`, which
    /// grows with serde_json's features) would make every parse result larger.
    pub error: Box<RpcError>,
    /// It had an id and no `method`: a request without a method, or a
    /// malformed answer (no outcome, no or a wrong `jsonrpc`). The peer
    /// decides which by whether the id is one of its own calls, and fails
    /// that call at once rather than answer an answer.
    pub answer_like: bool,
}

/// A whole frame: one message or a batch.
#[derive(Debug)]
pub enum Parsed<'a> {
    Single(Result<Message<'a>, Invalid>),
    Batch(Vec<Result<Message<'a>, Invalid>>),
    /// The frame as a whole is answered with this one error (bad JSON, `[]`, an
    /// over-long batch, a top-level value that is not an object or array).
    Rejected(Box<RpcError>),
}

fn rejected(error: RpcError) -> Parsed<'static> {
    Parsed::Rejected(Box::new(error))
}

/// Parses one frame. `max_batch` caps the length of a batch.
pub fn parse(frame: &[u8], max_batch: usize) -> Parsed<'_> {
    // One UTF-8 check for the whole frame; after it serde reads `&str` input,
    // which it does not re-validate string by string.
    let Ok(text) = std::str::from_utf8(frame) else {
        return rejected(RpcError::parse_error("invalid UTF-8"));
    };
    parse_text(text, max_batch)
}

/// Parses one frame already known to be UTF-8 (a WebSocket text frame,
/// which the framing checked): [`parse`] without checking it again.
pub fn parse_text(text: &str, max_batch: usize) -> Parsed<'_> {
    let Some(first) = text.bytes().find(|b| !b.is_ascii_whitespace()) else {
        return rejected(RpcError::parse_error("empty message"));
    };
    match first {
        b'[' => match serde_json::from_str::<Vec<&RawValue>>(text) {
            Ok(items) if items.is_empty() => rejected(RpcError::invalid_request("empty batch")),
            Ok(items) if items.len() > max_batch => rejected(RpcError::invalid_request(format!(
                "batch of {} messages exceeds the limit of {max_batch}",
                items.len()
            ))),
            Ok(items) => Parsed::Batch(items.into_iter().map(|raw| parse_object(raw.get())).collect()),
            Err(e) => rejected(classify(text, e)),
        },
        b'{' => parse_object(text).map_or_else(invalid_object, |message| Parsed::Single(Ok(message))),
        _ => match serde_json::from_str::<IgnoredAny>(text) {
            Ok(_) => rejected(RpcError::invalid_request("a message must be an object or an array")),
            Err(e) => rejected(RpcError::parse_error(e)),
        },
    }
}

/// What a frame of one object that is not a message parsed to. A syntax
/// error anywhere in the frame is -32700 as a whole, never -32600.
pub(crate) fn invalid_object<'a>(invalid: Invalid) -> Parsed<'a> {
    if invalid.error.code == RpcError::PARSE_ERROR {
        return Parsed::Rejected(invalid.error);
    }
    Parsed::Single(Err(invalid))
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

pub(super) fn members_by_serde(text: &str) -> serde_json::Result<Members<'_>> {
    let raw: RawMessage<'_> = serde_json::from_str(text)?;
    Ok(Members {
        jsonrpc: raw.jsonrpc.map(RawValue::get),
        method: raw.method.map(RawValue::get),
        id: raw.id.map(RawValue::get),
        params: raw.params,
        result: raw.result,
        error: raw.error,
        plain: false,
        int_id: None,
    })
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

/// The message a line starts with, read where it lies in `text` (the rest of
/// a read, lines after it): the message and the line's length, when it is
/// of a compact layout, valid, and a `\n` follows it at once. `None` for
/// anything else, which the line's own reading ([`parse_object`] of the text
/// up to its `\n`) reads instead; for whatever this reads, that reads the
/// same (the `message` fuzz target checks both against each other). Finding
/// the line's end first was a search of every byte a second time: 5 % of a
/// bridge's `ping` (perf).
#[inline(always)]
pub(crate) fn parse_leading(text: &str) -> Option<(Message<'_>, usize)> {
    let (members, len) = compact(text)?;
    if text.as_bytes().get(len) != Some(&b'\n') {
        return None;
    }
    // The layout's keys, plain strings and digits hold no line break; a
    // value may, as whitespace (`{"a":\n1}`), and then the line ends there.
    // None shorter than three bytes can.
    let values = [members.params, members.result, members.error];
    if values.iter().flatten().any(|value| value.get().len() > 2)
        && memchr::memchr(b'\n', &text.as_bytes()[..len]).is_some()
    {
        return None;
    }
    message_from(members).ok().map(|message| (message, len))
}

/// [`parse_leading`]'s promise, for the fuzz target and the tests: the line
/// it reads ends where it says, and reads the same on its own. Panics if not.
pub(crate) fn check_leading(text: &str) {
    if let Some((message, len)) = parse_leading(text) {
        let line = &text[..len];
        assert!(!line.contains('\n') && text[len..].starts_with('\n'), "{text:?} read as a line of {len} bytes");
        assert_eq!(format!("{:?}", Ok::<_, Invalid>(message)), format!("{:?}", parse_object(line)), "{text:?}");
    }
}

pub(crate) fn parse_object(text: &str) -> Result<Message<'_>, Invalid> {
    let members = match scan(text) {
        Some(members) => members,
        None => match members_by_serde(text) {
            Ok(members) => members,
            Err(e) => return Err(refused_object(text, e)),
        },
    };
    message_from(members)
}

#[inline(always)]
pub(super) fn message_from<'a>(raw: Members<'a>) -> Result<Message<'a>, Invalid> {
    let invalid = |id: Option<Id>, detail: &str| Invalid {
        id: id.unwrap_or(Id::Null),
        error: Box::new(RpcError::invalid_request(detail)),
        answer_like: false,
    };

    // A string the scanner read has no escapes: its content is its text.
    let string = |text: &'a str| match raw.plain {
        true => text.strip_prefix('"').and_then(|s| s.strip_suffix('"')).map(Cow::Borrowed),
        false => decode_str(text),
    };
    let id = match raw.id {
        None => None,
        // Digits the scanner read as a number already.
        Some(_) if raw.int_id.is_some() => raw.int_id.map(Id::Int),
        // A string that does not decode (a lone surrogate escape) is no id,
        // but the member is there: refused, never taken for a notification.
        Some(v) => match Id::from_text(v) {
            Some(id) => Some(id),
            None => return Err(invalid(None, "id must be a string, a number or null")),
        },
    };
    let answer_like = id.is_some() && raw.method.is_none();
    match raw.jsonrpc {
        Some(v) if string(v).as_deref() == Some(JSONRPC_VERSION) => {}
        Some(_) => return Err(Invalid { answer_like, ..invalid(id, "jsonrpc must be exactly \"2.0\"") }),
        None => return Err(Invalid { answer_like, ..invalid(id, "missing jsonrpc member") }),
    }

    if let Some(method) = raw.method {
        let Some(method) = string(method) else {
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
        let error = raw.error.map(|e| {
            serde_json::from_str::<Box<RpcError>>(e.get()).map_err(|err| format!("invalid error object: {err}"))
        });
        let outcome = match (raw.result, error) {
            (_, Some(Err(problem))) => Outcome::Malformed(problem),
            (Some(result), None) => Outcome::Result(result),
            (None, Some(Ok(error))) => Outcome::Error(error),
            (Some(result), Some(Ok(error))) => Outcome::Both(result, error),
            (None, None) => unreachable!("checked above"),
        };
        return Ok(Message::Response { id, outcome });
    }

    Err(Invalid { answer_like, ..invalid(id, MISSING_METHOD) })
}

/// Tells a syntax error (-32700) from valid JSON of the wrong shape (-32600).
/// serde stops at the first problem, so a shape error is double-checked against
/// the whole text: `{"id":1,"id":2,` is still a parse error.
/// Why serde refused `text` as a message, with the id when it can be read:
/// valid JSON that is not an object, or an object with a member given twice
/// (its id is read anyway when it is there once).
pub(super) fn refused_object(text: &str, e: serde_json::Error) -> Invalid {
    let error = classify(text, e);
    let invalid =
        |id, message: String| Invalid { id, error: Box::new(RpcError::invalid_request(message)), answer_like: false };
    if error.code != RpcError::INVALID_REQUEST {
        return Invalid { id: Id::Null, error: Box::new(error), answer_like: false };
    }
    if !text.trim_start().starts_with('{') {
        return invalid(Id::Null, "a message must be an object".into());
    }
    match serde_json::from_str::<EachMember>(text) {
        Ok(EachMember { id, twice: Some(name) }) => {
            invalid(id.unwrap_or(Id::Null), format!("member {name:?} given more than once"))
        }
        _ => invalid(Id::Null, "not a valid message object".into()),
    }
}

/// An object read member by member, keeping what `refused_object` needs:
/// the id when it is given once and is a valid id, and the first member
/// name given twice.
struct EachMember {
    id: Option<Id>,
    twice: Option<String>,
}

impl<'de> Deserialize<'de> for EachMember {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = EachMember;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<EachMember, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let (mut ids, mut id, mut twice) = (0, None, None);
                while let Some(name) = map.next_key::<String>()? {
                    let value = map.next_value::<&'de RawValue>()?;
                    if name == "id" {
                        ids += 1;
                        id = Id::from_text(value.get());
                    }
                    if !seen.insert(name.clone()) && twice.is_none() {
                        twice = Some(name);
                    }
                }
                Ok(EachMember { id: id.filter(|_| ids == 1), twice })
            }
        }
        d.deserialize_map(Visit)
    }
}

pub(super) fn classify(text: &str, e: serde_json::Error) -> RpcError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => match serde_json::from_str::<IgnoredAny>(text) {
            Ok(_) => RpcError::invalid_request(e),
            Err(syntax) => RpcError::parse_error(syntax),
        },
        _ => RpcError::parse_error(e),
    }
}
