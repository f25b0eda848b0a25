//! [`Id`]: a request id exactly as the other side wrote it.

use std::fmt;
use std::hash::{Hash, Hasher};

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::text::{decode_str, write_json_str};

/// Maps and sets keyed by the other side's request ids. The ids are chosen by
/// whoever sends them, so the hasher is seeded (foldhash, a random seed per
/// process and map): ids cannot be picked to collide, at a fraction of
/// SipHash's cost.
pub(crate) type IdMap<V> = std::collections::HashMap<Id, V, foldhash::fast::RandomState>;
pub(crate) type IdSet = std::collections::HashSet<Id, foldhash::fast::RandomState>;

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
    pub(super) fn from_text(text: &str) -> Option<Id> {
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
    pub(super) fn json_len_hint(&self) -> usize {
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
    // Nineteen digits or fewer cannot pass `u64::MAX`: no checks per digit.
    if digits.len() <= 19 {
        return digits.iter().try_fold(0u64, |n, &d| d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0')));
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
