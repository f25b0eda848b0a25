//! A look at the first bytes of a message too large to parse.
//!
//! When a Content-Length body is over the limit we skip it without buffering it,
//! but we still want to answer a request (-32600 with its id) and fail our own
//! pending call if it was a response. The top-level members of a JSON-RPC object
//! are usually short and come before a big `params` or `result`, so a scan of the
//! first few KiB is enough in practice; when it is not, the message is only logged.

use serde_json::value::RawValue;

use crate::message::Id;

/// How many leading bytes of an oversized body are kept for sniffing.
pub const SNIFF_PREFIX: usize = 4096;

/// What the first bytes of an oversized message showed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sniffed {
    pub id: Option<Id>,
    pub has_method: bool,
    pub is_response: bool,
}

impl Sniffed {
    /// Scans the top-level members of a JSON object prefix. Never fails: whatever
    /// cannot be read is simply not reported.
    pub fn scan(prefix: &[u8]) -> Sniffed {
        let mut found = Sniffed::default();
        let mut s = Scanner { text: prefix, pos: 0 };
        s.skip_ws();
        if !s.eat(b'{') {
            return found;
        }
        loop {
            s.skip_ws();
            let Some(key) = s.string() else { return found };
            s.skip_ws();
            if !s.eat(b':') {
                return found;
            }
            s.skip_ws();
            let start = s.pos;
            if !s.skip_value() {
                return found;
            }
            match key {
                b"id" => {
                    found.id = std::str::from_utf8(&prefix[start..s.pos])
                        .ok()
                        .and_then(|text| serde_json::from_str::<&RawValue>(text).ok())
                        .and_then(Id::from_raw);
                }
                b"method" => found.has_method = true,
                b"result" | b"error" => found.is_response = true,
                _ => {}
            }
            s.skip_ws();
            if !s.eat(b',') {
                return found;
            }
        }
    }
}

struct Scanner<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.pos += 1;
        }
    }

    /// A string's raw contents (escapes left as they are), or `None` if it is cut off.
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(&self.text[start..self.pos - 1]);
                }
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
    }

    /// Skips one value, nested or not. False if the prefix ends inside it.
    fn skip_value(&mut self) -> bool {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                None => return false,
                Some(b'"') => {
                    if self.string().is_none() {
                        return false;
                    }
                }
                Some(b'{' | b'[') => {
                    depth += 1;
                    self.pos += 1;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    self.pos += 1;
                }
                Some(b',' | b'}' | b']') if depth == 0 => return true,
                Some(_) => self.pos += 1,
            }
            if depth == 0 && matches!(self.peek(), Some(b',' | b'}') | None) {
                // A scalar at top level must be followed by `,` or `}` in the
                // prefix; if the prefix ends right after it we cannot be sure it
                // was complete (`12` may be `123`).
                return self.peek().is_some();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_id_and_kind_before_a_big_member() {
        let s = Sniffed::scan(br#"{"jsonrpc":"2.0","id":"a\"1","method":"x","params":{"data":"xxxxxxxx"#);
        assert_eq!(s.id, Some(Id::from("a\"1")));
        assert!(s.has_method && !s.is_response);
        let s = Sniffed::scan(br#" { "id" : 12 , "result": [1, {"a": "}"}], "jsonrpc": "2.0"}"#);
        assert_eq!(s.id.and_then(|i| i.as_u64()), Some(12));
        assert!(s.is_response);
    }

    #[test]
    fn a_number_cut_off_by_the_prefix_is_not_trusted() {
        assert_eq!(Sniffed::scan(br#"{"method":"m","id":12"#).id, None);
    }

    #[test]
    fn garbage_yields_nothing() {
        assert_eq!(Sniffed::scan(b"\xff\xfe{{{"), Sniffed::default());
        assert_eq!(Sniffed::scan(b""), Sniffed::default());
        assert_eq!(Sniffed::scan(br#"{"id":{"#), Sniffed::default());
    }
}
