//! A JSON value inside a message, found and checked in one pass and handed
//! out as the `&RawValue` it is, without serde reading it again. Serde's
//! `ignore_value` is general (any reader, a scratch stack, an error with a
//! line and column for every byte it refuses); for a value of the common
//! kind this does the same check in a fraction of the work, and leaves
//! everything else to serde, which then gives the answer it always gave.

use serde::Deserializer;
use serde::de::value::{BorrowedStrDeserializer, Error};
use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;

/// How deep a value may nest and still be checked here: one bit a level.
/// Deeper values go to serde, which has no limit on what it skips.
const MAX_DEPTH: u32 = 64;

/// The JSON value that starts at `i` (no whitespace before it), as serde's
/// `ignore_value` reads one: the index just past it. `None` when it is not
/// one, or nests deeper than [`MAX_DEPTH`]: serde decides those.
///
/// The text is UTF-8 already, so a string needs a look only at quotes,
/// escapes and control characters. As with serde, a `\u` escape needs four
/// hex digits and nothing more: whether it names a character is for whoever
/// reads the string.
pub(super) fn value_end(b: &[u8], mut i: usize) -> Option<usize> {
    // Bit n: the container at depth n + 1 is an object.
    let mut objects = 0u64;
    let mut depth = 0u32;
    loop {
        // A value at `i`, or a container opened there.
        i = match *b.get(i)? {
            b'"' => string_end(b, i)?,
            b'-' | b'0'..=b'9' => number(b, i)?,
            b't' => literal(b, i, b"true")?,
            b'f' => literal(b, i, b"false")?,
            b'n' => literal(b, i, b"null")?,
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                let first = skip_ws(b, i + 1);
                if b.get(first) == Some(&close) {
                    first + 1
                } else {
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    let object = open == b'{';
                    objects = (objects & !(1 << depth)) | (u64::from(object) << depth);
                    depth += 1;
                    i = if object { member_value(b, first)? } else { first };
                    continue;
                }
            }
            _ => return None,
        };
        // After a value: commas and closing brackets, up to the next value.
        loop {
            if depth == 0 {
                return Some(i);
            }
            let object = objects & (1 << (depth - 1)) != 0;
            i = skip_ws(b, i);
            match *b.get(i)? {
                b',' => {
                    let next = skip_ws(b, i + 1);
                    i = if object { member_value(b, next)? } else { next };
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            depth -= 1;
            i += 1;
        }
    }
}

/// A member's key at `i`, then its colon: where its value starts.
fn member_value(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    colon(b, string_end(b, i)?)
}

/// After a key that ends just before `i`: its colon, and where its value
/// starts.
#[inline]
pub(super) fn colon(b: &[u8], i: usize) -> Option<usize> {
    let i = skip_ws(b, i);
    (b.get(i) == Some(&b':')).then(|| skip_ws(b, i + 1))
}

/// A fixed-size comparison, which compiles to a few loads rather than a call.
#[inline]
pub(super) fn starts_with<const N: usize>(b: &[u8], prefix: &[u8; N]) -> bool {
    b.first_chunk::<N>() == Some(prefix)
}

/// JSON's four whitespace bytes, as serde reads them.
#[inline]
pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// A number by JSON's grammar starting at `i`: the index just past it.
#[inline]
pub(super) fn number(b: &[u8], i: usize) -> Option<usize> {
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

fn literal<const N: usize>(b: &[u8], i: usize, word: &[u8; N]) -> Option<usize> {
    starts_with(b.get(i..)?, word).then_some(i + N)
}

/// The string whose opening quote is at `i`: the index just past its
/// closing quote. No control characters; escapes as JSON has them.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        // Ordinary bytes eight at a time (serde's `skip_to_escape` does the
        // same): a tool's text is most of what a call carries.
        let (chunks, _) = b.get(j..)?.as_chunks::<8>();
        for chunk in chunks {
            let special = special_bytes(u64::from_le_bytes(*chunk));
            if special != 0 {
                j += special.trailing_zeros() as usize / 8;
                break;
            }
            j += 8;
        }
        match *b.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => {
                j += match *b.get(j + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' if b.get(j + 2..j + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
                    _ => return None,
                }
            }
            0..0x20 => return None,
            _ => j += 1,
        }
    }
}

/// The high bit of each byte of `x` (read little-endian) that is a quote, a
/// backslash or a control character, and perhaps of bytes after the first
/// such: a borrow runs only upwards, so the lowest bit set is exact.
#[inline]
fn special_bytes(x: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    // A byte below `n` (n ≤ 0x80) borrows into its own high bit: Hacker's
    // Delight's "has less", and a zero byte is one below 1.
    let below = |v: u64, n: u64| v.wrapping_sub(ONES * n) & !v & HIGH;
    below(x ^ (ONES * u64::from(b'"')), 1) | below(x ^ (ONES * u64::from(b'\\')), 1) | below(x, 0x20)
}

/// `text`, which [`value_end`] found to be one JSON value, as a `&RawValue`
/// borrowed from it, without serde reading it again.
///
/// Safe code only, through `RawValue`'s own `Deserialize`: it asks for a
/// newtype struct and takes a map of one member, named by the struct's name,
/// whose value is the raw text as a borrowed string. That is how
/// serde_json's own string reader hands a raw value over, and what this
/// deserializer offers. Should a future serde_json ask differently, this
/// returns `None` and serde reads the value instead (the tests would show
/// the lost speed, never a different answer).
pub(super) fn borrowed(text: &str) -> Option<&RawValue> {
    serde::Deserialize::deserialize(Checked(text)).ok()
}

/// A deserializer of text already checked to be one JSON value.
struct Checked<'a>(&'a str);

impl<'de> Deserializer<'de> for Checked<'de> {
    type Error = Error;

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(OneMember { name, text: Some(self.0) })
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(serde::de::Error::custom("only a raw value is read from checked text"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// The map a raw value is read from: its one key is the newtype's name.
struct OneMember<'a> {
    name: &'static str,
    text: Option<&'a str>,
}

impl<'de> MapAccess<'de> for OneMember<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        if self.text.is_none() {
            return Ok(None);
        }
        seed.deserialize(BorrowedStrDeserializer::new(self.name)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let text = self.text.take().ok_or_else(|| serde::de::Error::custom("no value left"))?;
        seed.deserialize(BorrowedStrDeserializer::new(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What serde makes of `text` as one raw value (with nothing after it),
    /// and what this module makes of it: the same, or this module declined.
    fn agree(text: &str) {
        let by_serde = serde_json::from_str::<&RawValue>(text).ok().map(RawValue::get);
        let here = value_end(text.as_bytes(), 0)
            .filter(|&end| end == text.len())
            .map(|end| borrowed(&text[..end]).expect("checked text is handed over").get());
        if here.is_some() {
            assert_eq!(here, by_serde, "{text:?}");
        }
    }

    #[test]
    fn values_read_as_serde_reads_them() {
        let taken = [
            "{}",
            "[]",
            "{ }",
            "[\n]",
            r#"{"name":"echo","arguments":{}}"#,
            r#"{"a":[1,-0,0.5,-1.5e+3,2E-7,1e9],"b":{"c":[true,false,null]},"d":""}"#,
            r#""a\"b\\c\/d\b\f\n\r\t\u00e9\uD83D\uDE00\uDFFF""#,
            "\"é🦀\"",
            " [ 1 , { \"k\" : [ ] } , \"x\" ] ".trim(),
            "123456789012345678901234567890",
            "-0.0e-0",
            "true",
            "false",
            "null",
        ];
        for text in taken {
            assert_eq!(value_end(text.as_bytes(), 0), Some(text.len()), "{text:?} should be read here");
            agree(text);
        }
        let refused = [
            "",
            "{",
            "[",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "[1,]",
            "[,1]",
            "{,}",
            "{1:2}",
            "{'a':1}",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "1e+",
            "+1",
            "NaN",
            "Infinity",
            "tru",
            "nul",
            "nulll",
            "\"a",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\u12G4\"",
            "\"\u{1}\"",
            "\"a\nb\"",
            "[1}",
            "{\"a\":1]",
            "]",
        ];
        for text in refused {
            assert!(serde_json::from_str::<&RawValue>(text).is_err(), "serde takes {text:?}");
            assert_ne!(value_end(text.as_bytes(), 0), Some(text.len()), "{text:?} should be refused here");
        }
        // Deeper than the bit stack: left to serde, which reads it.
        let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(value_end(deep.as_bytes(), 0), None);
        assert!(serde_json::from_str::<&RawValue>(&deep).is_ok());
        let deepest = format!("{}1{}", "[".repeat(64), "]".repeat(64));
        assert_eq!(value_end(deepest.as_bytes(), 0), Some(deepest.len()));
        agree(&deepest);
        let deep_objects = format!("{}1{}", "{\"a\":".repeat(64), "}".repeat(64));
        assert_eq!(value_end(deep_objects.as_bytes(), 0), Some(deep_objects.len()));
        agree(&deep_objects);
    }

    #[test]
    fn strings_read_eight_bytes_at_a_time_stop_at_the_first_byte_that_matters() {
        // Every length to past two chunks, each byte that matters (and some
        // that look close: 0x20, 0x7f, UTF-8's high bytes) at every place.
        for len in 0..24 {
            for at in 0..len {
                for special in ["\"", "\\n", "\\u00e9", "\\x", "\u{1}", "\u{1f}", " ", "\u{7f}", "é", "\u{ffff}", "🦀"]
                {
                    let mut text = String::from("\"");
                    for n in 0..len {
                        text.push_str(if n == at { special } else { "a" });
                    }
                    text.push('"');
                    agree(&text);
                    let expected = serde_json::from_str::<&RawValue>(&text).ok().map(|raw| raw.get().len());
                    let here = value_end(text.as_bytes(), 0);
                    if special == "\"" {
                        assert_eq!(here, Some(at + 2), "{text:?}: ends at the first quote");
                    } else {
                        assert_eq!(here, expected, "{text:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_value_ends_where_serde_ends_it() {
        // What follows a value is the caller's: the value stops before it.
        for (text, end) in [("{}x", 2), ("1,2", 1), ("\"a\"]", 3), ("[1] ", 3), ("truex", 4), ("0 1", 1)] {
            assert_eq!(value_end(text.as_bytes(), 0), Some(end), "{text:?}");
        }
    }

    #[test]
    fn every_prefix_and_every_byte_changed_reads_as_serde_reads_it() {
        let base = r#"{"name":"say \"hi\"","arguments":{"n":[1,2.5e3,-0],"ok":true,"x":null,"u":"\u00e9"}}"#;
        for end in 0..=base.len() {
            if base.is_char_boundary(end) {
                agree(&base[..end]);
            }
        }
        let mut bytes = base.as_bytes().to_vec();
        for at in 0..bytes.len() {
            let kept = bytes[at];
            for with in
                [b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b' ', b'0', b'-', b'e', b'.', b'u', 0x01, b'x']
            {
                bytes[at] = with;
                agree(std::str::from_utf8(&bytes).expect("ASCII"));
            }
            bytes[at] = kept;
        }
    }
}
