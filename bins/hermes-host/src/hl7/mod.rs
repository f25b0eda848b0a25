//! The HL7 v2 message the host holds: its text, once, with where each
//! segment starts. Fields, repetitions, components and subcomponents are
//! found in the text when something asks for them ([`SegmentRef`] and the
//! views under it borrow it), never stored: a message costs its text plus
//! four bytes a segment, whatever its shape. (An owned tree of parts cost
//! 90 to 930 bytes per byte of text, issue 18; hl7-parser's own tree of
//! slices costs some 200 bytes a field.) It prints back byte for byte
//! because it is its text, and edits ([`patch`]) splice the text.
//!
//! What it owns: [`Hl7Message`] (parse, print, locate), the `json`/`yaml`/`toml`
//! tree of `editor/getMessage` ([`tree`]), location-query patches
//! ([`patch`]), and the [`Bounds`] a held message stays within. Values are
//! kept as HL7 text, escape sequences included (`\T\` stays `\T\`):
//! decoding and re-encoding would not give back the same bytes (`\X0D\`,
//! `\H\`, `\.br\` have no single encoded form).
//!
//! The grammar is hl7-parser's (the parser the Hermes desktop app uses),
//! which reads the delimiters from the header here; the structure below is
//! split the way it splits, and the `hl7_message` fuzz target checks that
//! every input is accepted, refused and split exactly as hl7-parser does.

pub(crate) mod owned;
pub mod patch;
pub mod tree;

use std::fmt::{self, Write as _};
use std::ops::Range;

/// The five delimiters of a message, from its MSH segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delimiters {
    pub field: char,
    pub component: char,
    pub repetition: char,
    pub escape: char,
    pub subcomponent: char,
}

impl Default for Delimiters {
    fn default() -> Self {
        Delimiters { field: '|', component: '^', repetition: '~', escape: '\\', subcomponent: '&' }
    }
}

impl Delimiters {
    /// Five distinct characters, none a letter, a digit or a line break:
    /// others cannot be told apart from the text they separate (`MSHX^~\&`
    /// reads as a segment `MSHX`), and the tree formats refuse them.
    pub fn check(&self) -> Result<(), String> {
        let all = [self.field, self.component, self.repetition, self.escape, self.subcomponent];
        let repeated = (1..all.len()).any(|i| all[..i].contains(&all[i]));
        if repeated || all.iter().any(|c| c.is_alphanumeric() || matches!(c, '\r' | '\n')) {
            return Err(format!(
                "the delimiters {:?} must be five distinct punctuation characters",
                String::from_iter(all)
            ));
        }
        Ok(())
    }

    /// MSH.2 as written: component, repetition, escape, subcomponent.
    pub fn encoding_characters(&self) -> String {
        [self.component, self.repetition, self.escape, self.subcomponent].iter().collect()
    }

    /// `value` as HL7 text fit for one leaf (a subcomponent): delimiters and
    /// line breaks in it are escaped; escape sequences already in it (`\T\`)
    /// are kept, and an escape character that starts none is escaped itself.
    pub fn escape_leaf(&self, value: &str) -> String {
        let mut out = String::with_capacity(value.len());
        let mut rest = value;
        while let Some(c) = rest.chars().next() {
            let e = self.escape;
            if c == e {
                if let Some(len) = self.escape_sequence_len(rest) {
                    out.push_str(&rest[..len]);
                    rest = &rest[len..];
                    continue;
                }
                let _ = write!(out, "{e}E{e}");
            } else if c == self.field {
                let _ = write!(out, "{e}F{e}");
            } else if c == self.component {
                let _ = write!(out, "{e}S{e}");
            } else if c == self.subcomponent {
                let _ = write!(out, "{e}T{e}");
            } else if c == self.repetition {
                let _ = write!(out, "{e}R{e}");
            } else if c == '\r' {
                let _ = write!(out, "{e}X0D{e}");
            } else if c == '\n' {
                let _ = write!(out, "{e}X0A{e}");
            } else {
                out.push(c);
            }
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    /// The length of the well-formed escape sequence `text` starts with, if
    /// any: `\F\ \S\ \T\ \R\ \E\ \H\ \N\`, `\Xhh..\`, `\Zxx..\`, `\Cxxxx\`,
    /// `\Mxxxxxx\`, `\.br\`, `\.sp..\`, `\.in..\`, `\.ti..\`, `\.fi\`,
    /// `\.nf\`, `\.ce\`.
    fn escape_sequence_len(&self, text: &str) -> Option<usize> {
        let e = self.escape;
        let body_start = e.len_utf8();
        let close = text[body_start..].find(e)? + body_start;
        let body = &text[body_start..close];
        let well_formed = match body.as_bytes() {
            [b'F' | b'S' | b'T' | b'R' | b'E' | b'H' | b'N'] => true,
            [b'X', hex @ ..] => !hex.is_empty() && hex.len() % 2 == 0 && hex.iter().all(u8::is_ascii_hexdigit),
            [b'C' | b'M' | b'Z', rest @ ..] => !rest.is_empty() && rest.iter().all(u8::is_ascii_alphanumeric),
            [b'.', rest @ ..] => {
                let word = std::str::from_utf8(rest).unwrap_or("");
                ["br", "fi", "nf", "ce"].contains(&word)
                    || ["sp", "in", "ti"].iter().any(|p| {
                        word.strip_prefix(p).is_some_and(|n| {
                            let n = n.strip_prefix(['+', '-']).unwrap_or(n);
                            n.chars().all(|c| c.is_ascii_digit())
                        })
                    })
            }
            _ => false,
        };
        well_formed.then_some(close + e.len_utf8())
    }
}

/// Three capital letters or digits (`PID`, `OBX`, `ZPI`): a segment ID.
/// hl7-parser takes any three alphanumerics, lower case and accented ones
/// too; the host holds to the standard's, in text, trees and patch paths alike.
pub fn is_segment_name(name: &str) -> bool {
    name.len() == 3 && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Why text is not an HL7 v2 message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidMessage {
    #[error("the message is empty")]
    Empty,
    #[error("a message must start with an MSH segment")]
    NoHeader,
    #[error("{0}")]
    Parse(String),
    #[error("{0}")]
    Tree(String),
}

/// How large a held message may be: its text in bytes, and its elements.
///
/// Elements are what the tree formats work through one by one: segments,
/// and the field, repetition, component and subcomponent delimiters between
/// their parts (each adds one). The text alone costs memory in proportion
/// to its bytes; the element bound keeps what is done per element (a
/// `json`, `yaml` or `toml` tree of the message) bounded too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_bytes: usize,
    pub max_elements: usize,
}

impl Bounds {
    /// What offsets of four bytes can address, and no element bound.
    pub const NONE: Bounds = Bounds { max_bytes: u32::MAX as usize, max_elements: usize::MAX };

    /// Whether a message of `bytes` and `elements` is within the bounds.
    pub fn check(&self, bytes: usize, elements: usize) -> Result<(), Exceeded> {
        if bytes > self.max_bytes {
            return Err(Exceeded::Bytes { bytes, max: self.max_bytes });
        }
        if elements > self.max_elements {
            return Err(Exceeded::Elements { elements, max: self.max_elements });
        }
        Ok(())
    }
}

/// Which bound a message (or the message a patch would make) is past.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    Bytes { bytes: usize, max: usize },
    Elements { elements: usize, max: usize },
}

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
        Some(SegmentRef { text: &self.text[range], d: self.delimiters })
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

/// Blank lines at either end go, and `\r\n` and `\n` become `\r`, in place
/// (the text only shrinks).
fn normalise_line_breaks(text: &mut String) {
    let end = text.trim_end_matches(['\r', '\n']).len();
    text.truncate(end);
    let blank = text.len() - text.trim_start_matches(['\r', '\n']).len();
    text.drain(..blank);
    if !text.contains('\n') {
        return;
    }
    let mut bytes = std::mem::take(text).into_bytes();
    let mut write = 0;
    let mut read = 0;
    while read < bytes.len() {
        let byte = bytes[read];
        read += 1;
        if byte == b'\r' && bytes.get(read) == Some(&b'\n') {
            read += 1;
        }
        bytes[write] = if byte == b'\n' { b'\r' } else { byte };
        write += 1;
    }
    bytes.truncate(write);
    // ASCII bytes were replaced by ASCII bytes or dropped: still UTF-8.
    *text = String::from_utf8(bytes).expect("line breaks are ASCII");
}

/// The delimiters, read by hl7-parser from the header as Hermes reads them
/// (five ASCII characters after `MSH`). It is given only the header's first
/// characters: its tree of the whole message is what cost the memory.
fn header_delimiters(text: &str) -> Result<Delimiters, InvalidMessage> {
    // Ten characters: `MSH`, the five, and the seven its error message quotes.
    let end = text.char_indices().nth(10).map_or(text.len(), |(i, _)| i);
    let (s, _) = hl7_parser::parser::parse_msh(&text[..end]).map_err(|e| InvalidMessage::Parse(e.to_string()))?;
    Ok(Delimiters {
        field: s.field,
        component: s.component,
        repetition: s.repetition,
        escape: s.escape,
        subcomponent: s.subcomponent,
    })
}

/// Where each segment starts, checking the segments as hl7-parser reads
/// them: a name of three alphanumerics and the field separator, up to the
/// next `\r`. Where it would stop (a line that is no segment) it would drop
/// the rest, and the message would not print back as read: refused, like a
/// header whose encoding characters are not followed by the field separator
/// (`MSH|^~\&X`), which hl7-parser reads as if it were.
fn segment_starts(text: &str, d: Delimiters) -> Result<Vec<u32>, InvalidMessage> {
    let bytes = text.as_bytes();
    let next_break = |from: usize| bytes[from..].iter().position(|&b| b == b'\r').map_or(bytes.len(), |i| from + i);
    let mut starts = Vec::with_capacity(1 + bytes.iter().filter(|&&b| b == b'\r').count());
    starts.push(0);
    let header_end = next_break(0);
    // `MSH|^~\&` is 8 bytes: the delimiters are ASCII.
    let mut differs_at = (header_end > 8 && char::from(bytes[8]) != d.field).then_some(8);
    let mut at = header_end;
    while at < bytes.len() {
        let start = at + 1;
        let Some(name) = parsed_name(&text[start..], d.field) else {
            differs_at = Some(differs_at.map_or(at, |first| first.min(at)));
            break;
        };
        if !is_segment_name(name) {
            return Err(InvalidMessage::Parse(format!(
                "{name:?} is not a segment name (three capital letters or digits)"
            )));
        }
        // A name of three ASCII characters: the segment is the line.
        let end = next_break(start);
        let segment = &text[start..end];
        if name == "MSH" && segment[4..].split(d.field).next() != Some(d.encoding_characters().as_str()) {
            return Err(InvalidMessage::Parse(format!(
                "every MSH segment must give the encoding characters {:?}",
                d.encoding_characters()
            )));
        }
        starts.push(start as u32);
        at = end;
    }
    match differs_at {
        Some(at) => Err(InvalidMessage::Parse(format!("the message does not read back the same (at byte {at})"))),
        None => Ok(starts),
    }
}

/// The name of the segment `rest` starts with, as hl7-parser reads one:
/// three alphanumeric characters, then the field separator. Quirk kept: its
/// `take_while_m_n` (nom 7) measures the alphanumeric run in bytes but takes
/// characters, so after a two-byte letter it takes one character past the
/// run (`ä1&` is a name to it, and `äb` followed by a line break), which the
/// segment name rule then refuses by name, as before.
fn parsed_name(rest: &str, field: char) -> Option<&str> {
    let run = rest.char_indices().find(|&(_, c)| !c.is_alphanumeric()).map_or(rest.len(), |(i, _)| i);
    if run < 3 {
        return None;
    }
    let end = rest.char_indices().nth(3).map(|(i, _)| i)?;
    rest[end..].starts_with(field).then(|| &rest[..end])
}

/// Segment breaks and the four structural delimiters in `text`.
fn count_elements(text: &str, d: &Delimiters) -> usize {
    let [f, c, r, s] = [d.field, d.component, d.repetition, d.subcomponent].map(|c| c as u32 as u8);
    text.bytes().filter(|&b| b == b'\r' || b == f || b == c || b == r || b == s).count()
}

/// One segment of a message, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct SegmentRef<'a> {
    text: &'a str,
    d: Delimiters,
}

impl<'a> SegmentRef<'a> {
    pub fn name(&self) -> &'a str {
        &self.text[..3]
    }

    pub fn is_header(&self) -> bool {
        self.name() == "MSH"
    }

    /// The segment as HL7 text.
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    /// Its fields from field 1. In MSH, field 1 is the field separator and
    /// field 2 the encoding characters, each one plain value. A segment
    /// written `NTE|` has one empty field.
    pub fn fields(self) -> impl Iterator<Item = FieldRef<'a>> + 'a {
        let d = self.d;
        let (header, body) = match self.is_header() {
            // `MSH|^~\&` (8 bytes, the delimiters are ASCII), then `|` and the rest.
            true => {
                let plain = |text| FieldRef { text, d, plain: true };
                (Some([plain(&self.text[3..4]), plain(&self.text[4..8])]), self.text.get(9..))
            }
            false => (None, Some(&self.text[4..])),
        };
        header.into_iter().flatten().chain(
            body.into_iter().flat_map(move |body| body.split(d.field)).map(move |text| FieldRef {
                text,
                d,
                plain: false,
            }),
        )
    }

    /// Field `n` (1-based), if the segment has it.
    pub fn field(self, n: usize) -> Option<FieldRef<'a>> {
        self.fields().nth(n.checked_sub(1)?)
    }
}

/// A field: its repetitions, each of components, each of subcomponents
/// (raw HL7 text). MSH.1 and MSH.2 are plain: one value, not split.
#[derive(Clone, Copy, Debug)]
pub struct FieldRef<'a> {
    text: &'a str,
    d: Delimiters,
    plain: bool,
}

/// One repetition of a field.
#[derive(Clone, Copy, Debug)]
pub struct RepeatRef<'a> {
    text: &'a str,
    d: Delimiters,
    plain: bool,
}

/// One component of a repetition.
#[derive(Clone, Copy, Debug)]
pub struct ComponentRef<'a> {
    text: &'a str,
    d: Delimiters,
    plain: bool,
}

/// The parts of `text` between `sep`, or `text` whole when it is plain.
fn parts(text: &str, sep: char, plain: bool) -> impl Iterator<Item = &str> {
    text.split(move |c: char| !plain && c == sep)
}

impl<'a> FieldRef<'a> {
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    pub fn repeats(self) -> impl Iterator<Item = RepeatRef<'a>> + 'a {
        let FieldRef { text, d, plain } = self;
        parts(text, d.repetition, plain).map(move |text| RepeatRef { text, d, plain })
    }

    /// The text of a field that is one plain value (MSH.1 and MSH.2 are).
    pub fn as_leaf(&self) -> Option<&'a str> {
        let d = self.d;
        (self.plain || !self.text.contains([d.repetition, d.component, d.subcomponent])).then_some(self.text)
    }

    /// Every leaf empty.
    pub fn is_empty(&self) -> bool {
        let d = self.d;
        match self.plain {
            true => self.text.is_empty(),
            false => self.text.chars().all(|c| c == d.repetition || c == d.component || c == d.subcomponent),
        }
    }
}

impl<'a> RepeatRef<'a> {
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    pub fn components(self) -> impl Iterator<Item = ComponentRef<'a>> + 'a {
        let RepeatRef { text, d, plain } = self;
        parts(text, d.component, plain).map(move |text| ComponentRef { text, d, plain })
    }

    /// One component with one subcomponent: the repetition's text is the value.
    pub fn is_leaf(&self) -> bool {
        self.plain || !self.text.contains([self.d.component, self.d.subcomponent])
    }
}

impl<'a> ComponentRef<'a> {
    pub fn as_str(&self) -> &'a str {
        self.text
    }

    pub fn subcomponents(self) -> impl Iterator<Item = &'a str> + 'a {
        let ComponentRef { text, d, plain } = self;
        parts(text, d.subcomponent, plain)
    }

    /// One subcomponent: the component's text is the value.
    pub fn is_leaf(&self) -> bool {
        self.plain || !self.text.contains(self.d.subcomponent)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A real-world style admission (ADT^A01) with repetitions, components,
    /// subcomponents and escape sequences.
    pub const ADT_A01: &str = "MSH|^~\\&|ADT1|GOOD HEALTH HOSPITAL|GHH LAB, INC.|GOOD HEALTH HOSPITAL|198808181126|SECURITY|ADT^A01^ADT_A01|MSG00001|P|2.8||\rEVN|A01|200708181123||\rPID|1||PATID1234^^^GOOD HEALTH HOSPITAL^MR~123456789^^^USSSA^SS||EVERYMAN^ADAM^A^III||19610615|M||2106-3^White^HL70005|2222 HOME STREET^^GREENSBORO^NC^27401-1020|GL|(555) 555-2004|(555)555-2004||S||PATID12345001^2^M10^ADT1^AN^A|444333333|987654^NC|\rNK1|1|NUCLEAR^NELDA^W|SPO^Spouse^HL70063||||NK^NEXT OF KIN\rPV1|1|I|2000^2012^01||||004777^ATTEND^AARON^A|||SUR||||ADM|A0|";

    /// A lab result (ORU^R01) with two OBX segments, an escaped `&` and `^`
    /// in a comment, and a subcomponent-bearing ordering provider.
    pub const ORU_R01: &str = "MSH|^~\\&|GHH LAB|ELAB-3|GHH OE|BLDG4|200202150930||ORU^R01|CNTRL-3456|P|2.4\rPID|||555-44-4444||EVERYWOMAN^EVE^E^^^^L|JONES|19620320|F|||153 FERNWOOD DR.^^STATESVILLE^OH^35292||(206)3345232|(206)752-121||||AC555444444||67-A4335^OH^20030520\rOBR|1|845439^GHH OE|1045813^GHH LAB|15545^GLUCOSE|||200202150730|||||||||555-55-5555&PRIMARY&PATRICIA P^^^^MD^^|||||||||F||||||444-44-4444^HIPPOCRATES^HOWARD H^^^^MD\rOBX|1|SN|1554-5^GLUCOSE^POST 12H CFST:MCNC:PT:SER/PLAS:QN||^182|mg/dl|70_105|H|||F\rOBX|2|TX|NOTE^Comment||Fasting \\T\\ fed \\S\\ see \\.br\\ notes~second line||||||F";

    #[test]
    fn real_messages_print_back_byte_for_byte() {
        for text in [ADT_A01, ORU_R01] {
            let message = Hl7Message::parse(text).unwrap();
            assert_eq!(message.to_string(), text);
        }
    }

    #[test]
    fn any_line_ending_is_a_segment_separator() {
        let crlf = ORU_R01.replace('\r', "\r\n") + "\r\n";
        assert_eq!(Hl7Message::parse(&crlf).unwrap().to_string(), ORU_R01);
        let lf = ORU_R01.replace('\r', "\n");
        assert_eq!(Hl7Message::parse(&lf).unwrap().to_string(), ORU_R01);
    }

    /// A segment's parts, field by field: repetitions, components, subcomponents.
    fn parts(segment: SegmentRef<'_>) -> Vec<Vec<Vec<Vec<&str>>>> {
        segment
            .fields()
            .map(|f| f.repeats().map(|r| r.components().map(|c| c.subcomponents().collect()).collect()).collect())
            .collect()
    }

    #[test]
    fn the_model_has_repetitions_components_and_subcomponents() {
        let message = Hl7Message::parse(ADT_A01).unwrap();
        let pid = parts(message.segment(message.find("PID", 1).unwrap()).unwrap());
        assert_eq!(pid[2].len(), 2, "PID.3 repeats");
        assert_eq!(pid[2][1][3], ["USSSA"]);
        let msh = message.segment(0).unwrap();
        assert_eq!(msh.field(1).unwrap().as_leaf(), Some("|"));
        assert_eq!(msh.field(2).unwrap().as_leaf(), Some("^~\\&"));
        assert_eq!(parts(msh)[8][0][1], ["A01"]);
        let oru = Hl7Message::parse(ORU_R01).unwrap();
        let obr = parts(oru.segment(oru.find("OBR", 1).unwrap()).unwrap());
        assert_eq!(obr[15][0][0], ["555-55-5555", "PRIMARY", "PATRICIA P"]);
        assert_eq!(oru.find("OBX", 2), Some(4));
        assert_eq!(oru.find("OBX", 3), None);
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
    fn bad_text_is_refused_with_a_reason() {
        assert_eq!(Hl7Message::parse(""), Err(InvalidMessage::Empty));
        assert_eq!(Hl7Message::parse("\r\n"), Err(InvalidMessage::Empty));
        assert_eq!(Hl7Message::parse("PID|1"), Err(InvalidMessage::NoHeader));
        assert!(Hl7Message::parse("MSH").is_err());
    }

    /// Found by the hl7_message fuzz target: a later MSH segment was read
    /// with MSH.3 as a plain value (`A^B` one leaf holding a delimiter, which
    /// a tree then escaped), and a bare `MSH|` became `MSH|^~\&` in a tree.
    #[test]
    fn a_later_msh_segment_is_a_header_too() {
        let text = "MSH|^~\\&|A\rPID|1\rMSH|^~\\&|B^C|D";
        let message = Hl7Message::parse(text).unwrap();
        let second = parts(message.segment(2).unwrap());
        assert_eq!(second[2][0].len(), 2, "MSH.3 has components");
        assert_eq!(message.to_string(), text);
        for bad in ["MSH|^~\\&\rMSH|", "MSH|^~\\&\rMSH|^~\\#|x", "MSH|^~\\&\rMSH"] {
            assert!(Hl7Message::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// Found by the hl7_patch fuzz target: `+ote` created a segment the tree
    /// formats refuse; HL7 text with one parsed. One rule now refuses both.
    #[test]
    fn segment_names_are_three_capital_letters_or_digits() {
        for text in ["MSH|^~\\&\rote|1", "MSH|^~\\&\rÄÖÜ|1", "MSH|^~\\&\rPId|1"] {
            let error = Hl7Message::parse(text).unwrap_err().to_string();
            assert!(error.contains("is not a segment name"), "{text:?}: {error}");
        }
        assert!(Hl7Message::parse("MSH|^~\\&\rZ01|1").is_ok());
        // hl7-parser's quirk, kept (see `parsed_name`): after a two-byte letter
        // it takes a character past the alphanumerics into the name.
        let error = Hl7Message::parse("MSH|^~\\&\rä1&|x").unwrap_err().to_string();
        assert!(error.contains("\"ä1&\" is not a segment name"), "{error}");
    }

    /// Found by the hl7_message and hl7_patch fuzz targets: delimiters that
    /// repeat or are letters parsed, but their tree could not be read back
    /// (and `MSH|^|1||12` has no unambiguous structure at all).
    #[test]
    fn delimiters_must_be_five_distinct_punctuation_characters() {
        for text in ["MSH|^~SH|^~\\\\&", "MSH|^|1||12\rOBX|", "MSH||||||A", "MSHa^~\\&|x"] {
            let error = Hl7Message::parse(text).unwrap_err().to_string();
            assert!(error.contains("five distinct punctuation characters"), "{text:?}: {error}");
        }
        assert!(Hl7Message::parse("MSH#@!$%#x").is_ok());
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

    #[test]
    fn leaves_escape_delimiters_and_keep_escape_sequences() {
        let d = Delimiters::default();
        assert_eq!(d.escape_leaf("A|B^C&D~E"), "A\\F\\B\\S\\C\\T\\D\\R\\E");
        assert_eq!(d.escape_leaf("keep \\T\\ and \\X0D0A\\ and \\.br\\"), "keep \\T\\ and \\X0D0A\\ and \\.br\\");
        assert_eq!(d.escape_leaf("C:\\dir"), "C:\\E\\dir");
        assert_eq!(d.escape_leaf("two\nlines"), "two\\X0A\\lines");
        assert_eq!(d.escape_leaf("Zoë"), "Zoë");
    }
}
