//! [`Hl7Message`]: the message as its text, once, with where each segment
//! starts (four bytes a segment) and how many elements it has. Reading text
//! into one checks it as hl7-parser would ([`super::parse`]); its parts are
//! views into the text ([`super::parts`]); a patch splices the text.

use std::fmt;
use std::ops::Range;

use super::bounds::{Bounds, Exceeded};
use super::delimiters::Delimiters;
use super::parse::{InvalidMessage, header_delimiters, normalise_line_breaks, segment_starts};
use super::parts::SegmentRef;

/// A parsed message: its text exactly as read (line breaks made `\r`, blank
/// lines at either end left out), which is also how it prints.
#[derive(Clone, Debug)]
pub struct Hl7Message {
    delimiters: Delimiters,
    text: String,
    /// Where each segment starts in `text`; each ends at the next `\r`.
    /// Four bytes, so a message is at most 4 GiB ([`Bounds::NONE`]).
    starts: Vec<u32>,
    /// Segments plus delimiters (see [`Bounds`]), kept up to date by edits.
    elements: usize,
}

/// Messages are equal when their text is: the text is the whole message.
impl PartialEq for Hl7Message {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.delimiters == other.delimiters
    }
}

impl Eq for Hl7Message {}

impl Hl7Message {
    /// Parses HL7 text. Segments may end in `\r`, `\n` or `\r\n`; blank lines
    /// (a trailing newline, say) are not segments.
    pub fn parse(text: &str) -> Result<Hl7Message, InvalidMessage> {
        Hl7Message::parse_owned(text.to_owned())
    }

    /// [`Hl7Message::parse`] of text the caller gives away: the message keeps
    /// it (line breaks normalised in place) instead of a copy.
    pub fn parse_owned(mut text: String) -> Result<Hl7Message, InvalidMessage> {
        normalise_line_breaks(&mut text);
        if text.is_empty() {
            return Err(InvalidMessage::Empty);
        }
        if !text.starts_with("MSH") {
            return Err(InvalidMessage::NoHeader);
        }
        let delimiters = header_delimiters(&text)?;
        delimiters.check().map_err(InvalidMessage::Parse)?;
        if text.len() > Bounds::NONE.max_bytes {
            return Err(InvalidMessage::Parse("a message is at most 4 GiB".into()));
        }
        let starts = segment_starts(&text, delimiters)?;
        let elements = 1 + count_elements(&text, &delimiters);
        text.shrink_to_fit();
        Ok(Hl7Message { delimiters, text, starts, elements })
    }

    /// A new message: an MSH segment with the standard delimiters and nothing else.
    pub fn new_empty() -> Hl7Message {
        let delimiters = Delimiters::default();
        let text = format!("MSH{}{}", delimiters.field, delimiters.encoding_characters());
        let elements = 1 + count_elements(&text, &delimiters);
        Hl7Message { delimiters, text, starts: vec![0], elements }
    }

    pub fn delimiters(&self) -> Delimiters {
        self.delimiters
    }

    /// The message as HL7 text, segments joined by `\r`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// Never true: a message has at least its MSH segment.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// What the message holds on the heap: its text and its segment starts.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.starts.capacity() * std::mem::size_of::<u32>()
    }

    /// Segments plus delimiters, what [`Bounds::max_elements`] bounds.
    pub fn elements(&self) -> usize {
        self.elements
    }

    pub fn segment_count(&self) -> usize {
        self.starts.len()
    }

    /// The segment at `index` (0-based; 0 is the header).
    pub fn segment(&self, index: usize) -> Option<SegmentRef<'_>> {
        let range = self.segment_range(index)?;
        Some(SegmentRef::new(&self.text[range], self.delimiters))
    }

    pub fn segments(&self) -> impl ExactSizeIterator<Item = SegmentRef<'_>> + '_ {
        (0..self.starts.len()).map(|i| self.segment(i).expect("an index below the count"))
    }

    /// The `n`th (1-based) segment called `name`, as an index into the segments.
    pub fn find(&self, name: &str, n: usize) -> Option<usize> {
        self.segments().enumerate().filter(|(_, s)| s.name() == name).nth(n.checked_sub(1)?).map(|(i, _)| i)
    }

    pub fn count(&self, name: &str) -> usize {
        self.segments().filter(|s| s.name() == name).count()
    }

    /// Where segment `index` is in the text, without the `\r` that ends it.
    pub(crate) fn segment_range(&self, index: usize) -> Option<Range<usize>> {
        let start = *self.starts.get(index)? as usize;
        let end = self.starts.get(index + 1).map_or(self.text.len(), |&next| next as usize - 1);
        Some(start..end)
    }

    /// Whether replacing `range` of the text with `with` stays within `bounds`.
    pub(crate) fn check_splice(&self, range: &Range<usize>, with: &str, bounds: &Bounds) -> Result<(), Exceeded> {
        let removed = count_elements(&self.text[range.clone()], &self.delimiters);
        let elements = self.elements - removed + count_elements(with, &self.delimiters);
        bounds.check(self.text.len() - range.len() + with.len(), elements)
    }

    /// Replaces `range` of the text with `with`, which the caller built to
    /// leave whole segments (patches do: a segment, or segments with the
    /// `\r` before each). Segment starts after it move by the difference.
    pub(crate) fn splice(&mut self, range: Range<usize>, with: &str) {
        let removed = count_elements(&self.text[range.clone()], &self.delimiters);
        self.elements = self.elements - removed + count_elements(with, &self.delimiters);
        // Starts made by a `\r` before the range stay, those made by one in it
        // go, those after it move.
        let keep = self.starts.partition_point(|&s| s as usize <= range.start);
        let moved = self.starts.partition_point(|&s| s as usize <= range.end);
        let new_starts =
            with.bytes().enumerate().filter(|&(_, b)| b == b'\r').map(|(i, _)| (range.start + i + 1) as u32);
        let new_count = with.bytes().filter(|&b| b == b'\r').count();
        self.starts.splice(keep..moved, new_starts);
        let shift = with.len() as i64 - range.len() as i64;
        for start in &mut self.starts[keep + new_count..] {
            *start = (*start as i64 + shift) as u32;
        }
        self.text.replace_range(range, with);
    }
}

impl fmt::Display for Hl7Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Segment breaks and the four structural delimiters in `text`.
fn count_elements(text: &str, d: &Delimiters) -> usize {
    let [f, c, r, s] = [d.field, d.component, d.repetition, d.subcomponent].map(|c| c as u32 as u8);
    text.bytes().filter(|&b| b == b'\r' || b == f || b == c || b == r || b == s).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hl7::samples::{ADT_A01, ORU_R01};

    #[test]
    fn real_messages_print_back_byte_for_byte() {
        for text in [ADT_A01, ORU_R01] {
            let message = Hl7Message::parse(text).unwrap();
            assert_eq!(message.to_string(), text);
        }
    }

    /// The shapes that cost the most per byte as a tree of parts (issue 18:
    /// 240 to 750 bytes per byte): here the text and four bytes a segment.
    #[test]
    fn a_message_holds_its_text_and_four_bytes_a_segment() {
        let flood = |c: &str| format!("MSH|^~\\&|{}", c.repeat(100_000));
        let shapes =
            [format!("MSH|^~\\&{}", "\rNTE|123".repeat(100_000)), flood("|"), flood("^"), flood("~"), flood("&")];
        for text in shapes {
            let message = Hl7Message::parse(&text).unwrap();
            assert_eq!(message.as_str(), text);
            let most = text.len() + 4 * message.segment_count();
            assert!(message.heap_bytes() <= most, "{} bytes held for {}", message.heap_bytes(), text.len());
        }
    }

    /// `message/set` gives its text away: the message is that text, not a copy.
    #[test]
    fn owned_text_becomes_the_message_without_a_copy() {
        let text = String::from(ORU_R01);
        let at = text.as_ptr();
        assert_eq!(Hl7Message::parse_owned(text).unwrap().as_str().as_ptr(), at);
        let crlf = format!("\r\n{}\r\n", ORU_R01.replace('\r', "\r\n"));
        assert_eq!(Hl7Message::parse_owned(crlf).unwrap().as_str(), ORU_R01);
    }

    /// Splices keep what the message knows about its text: where segments
    /// start and how many elements it has, as a fresh parse finds them.
    #[test]
    fn splices_keep_segment_starts_and_elements() {
        let same_as_fresh = |message: &Hl7Message| {
            let fresh = Hl7Message::parse(message.as_str()).unwrap();
            assert_eq!(message.elements(), fresh.elements(), "{:?}", message.as_str());
            let segments: Vec<&str> = message.segments().map(|s| s.as_str()).collect();
            assert_eq!(segments, fresh.segments().map(|s| s.as_str()).collect::<Vec<_>>());
        };
        let mut message = Hl7Message::parse(ORU_R01).unwrap();
        message.splice(message.segment_range(1).unwrap(), "PID|1^2~3&4");
        same_as_fresh(&message);
        let end = message.segment_range(2).unwrap().end;
        message.splice(end..end, "\rNTE|\rNTE|a|b");
        same_as_fresh(&message);
        let third = message.segment_range(3).unwrap();
        message.splice(third.start - 1..third.end, "");
        same_as_fresh(&message);
        message.splice(message.len()..message.len(), "\rZZZ|x");
        same_as_fresh(&message);
        message.splice(message.segment_range(0).unwrap(), "MSH|^~\\&|NEW");
        same_as_fresh(&message);
        assert_eq!(message.segment_count(), 7);
    }

    #[test]
    fn a_new_message_is_a_bare_header() {
        let message = Hl7Message::new_empty();
        assert_eq!(message.to_string(), "MSH|^~\\&");
        assert_eq!(Hl7Message::parse("MSH|^~\\&").unwrap(), message);
    }

    #[test]
    fn non_ascii_text_survives() {
        let text = "MSH|^~\\&|APP|FAC\rPID|1||42||Müller^Zoë^李||19800101|F";
        assert_eq!(Hl7Message::parse(text).unwrap().to_string(), text);
    }
}
