//! The HL7 v2 message the host holds: parsed by `hl7-parser` (the parser the
//! Hermes desktop app uses), kept as an owned tree of raw text so that it
//! prints back byte for byte, and edited in place by patches.
//!
//! What it owns: [`Hl7Message`] (parse, print, locate), the `json`/`yaml`/`toml`
//! tree of `editor/getMessage` ([`tree`]), and location-query patches
//! ([`patch`]). Values are kept as HL7 text, escape sequences included
//! (`\T\` stays `\T\`): decoding and re-encoding would not give back the same
//! bytes (`\X0D\`, `\H\`, `\.br\` have no single encoded form).

pub mod patch;
pub mod tree;

use std::fmt::{self, Write as _};

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

/// A field: its repetitions, each a list of components, each a list of
/// subcomponents (raw HL7 text). An empty field is one empty leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub repeats: Vec<Repeat>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repeat {
    pub components: Vec<Component>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    pub subcomponents: Vec<String>,
}

impl Component {
    pub fn leaf(text: impl Into<String>) -> Component {
        Component { subcomponents: vec![text.into()] }
    }

    pub fn is_empty(&self) -> bool {
        self.subcomponents.iter().all(String::is_empty)
    }
}

impl Repeat {
    pub fn leaf(text: impl Into<String>) -> Repeat {
        Repeat { components: vec![Component::leaf(text)] }
    }

    pub fn is_empty(&self) -> bool {
        self.components.iter().all(Component::is_empty)
    }
}

impl Field {
    pub fn leaf(text: impl Into<String>) -> Field {
        Field { repeats: vec![Repeat::leaf(text)] }
    }

    pub fn empty() -> Field {
        Field::leaf("")
    }

    pub fn is_empty(&self) -> bool {
        self.repeats.iter().all(Repeat::is_empty)
    }

    /// The text of a field that is one plain value (MSH.1 and MSH.2 are).
    pub fn as_leaf(&self) -> Option<&str> {
        match self.repeats.as_slice() {
            [Repeat { components }] => match components.as_slice() {
                [Component { subcomponents }] => match subcomponents.as_slice() {
                    [text] => Some(text),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        }
    }

    fn print(&self, d: &Delimiters, out: &mut String) {
        for (r, repeat) in self.repeats.iter().enumerate() {
            if r > 0 {
                out.push(d.repetition);
            }
            for (c, component) in repeat.components.iter().enumerate() {
                if c > 0 {
                    out.push(d.component);
                }
                for (s, sub) in component.subcomponents.iter().enumerate() {
                    if s > 0 {
                        out.push(d.subcomponent);
                    }
                    out.push_str(sub);
                }
            }
        }
    }

    /// Drops trailing empty repetitions, components and subcomponents: after a
    /// patch cleared something, `DOE^` carries nothing `DOE` does not.
    fn trim(&mut self) {
        for repeat in &mut self.repeats {
            for component in &mut repeat.components {
                while component.subcomponents.len() > 1 && component.subcomponents.last().is_some_and(String::is_empty)
                {
                    component.subcomponents.pop();
                }
            }
            while repeat.components.len() > 1 && repeat.components.last().is_some_and(Component::is_empty) {
                repeat.components.pop();
            }
        }
        while self.repeats.len() > 1 && self.repeats.last().is_some_and(Repeat::is_empty) {
            self.repeats.pop();
        }
    }
}

/// Three capital letters or digits (`PID`, `OBX`, `ZPI`): a segment ID.
/// hl7-parser takes any three alphanumerics, lower case and accented ones
/// too; the host holds to the standard's, in text, trees and patch paths alike.
pub fn is_segment_name(name: &str) -> bool {
    name.len() == 3 && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// One segment. `fields[0]` is field 1; in MSH that is the field separator
/// and `fields[1]` the encoding characters, each one plain value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub name: String,
    pub fields: Vec<Field>,
}

impl Segment {
    pub fn new(name: &str) -> Segment {
        Segment { name: name.to_owned(), fields: Vec::new() }
    }

    pub fn is_header(&self) -> bool {
        self.name == "MSH"
    }

    fn trim(&mut self) {
        let keep = if self.is_header() { 2 } else { 0 };
        while self.fields.len() > keep && self.fields.last().is_some_and(Field::is_empty) {
            self.fields.pop();
        }
    }
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

/// A parsed message, printed back exactly as it was read (segments joined by `\r`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hl7Message {
    pub delimiters: Delimiters,
    pub segments: Vec<Segment>,
}

impl Hl7Message {
    /// Parses HL7 text. Segments may end in `\r`, `\n` or `\r\n`; blank lines
    /// (a trailing newline, say) are not segments.
    pub fn parse(text: &str) -> Result<Hl7Message, InvalidMessage> {
        let text = text.trim_start_matches(['\r', '\n']).trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            return Err(InvalidMessage::Empty);
        }
        if !text.starts_with("MSH") {
            return Err(InvalidMessage::NoHeader);
        }
        // The parser reads `\r` only when lenient newlines are off, and
        // splits `\r\n` into an empty segment otherwise: normalise first.
        let normalised;
        let text = if text.contains('\n') {
            normalised = text.replace("\r\n", "\r").replace('\n', "\r");
            normalised.as_str()
        } else {
            text
        };
        let parsed = hl7_parser::parse_message(text).map_err(|e| InvalidMessage::Parse(e.to_string()))?;
        let s = parsed.separators;
        let delimiters = Delimiters {
            field: s.field,
            component: s.component,
            repetition: s.repetition,
            escape: s.escape,
            subcomponent: s.subcomponent,
        };
        delimiters.check().map_err(InvalidMessage::Parse)?;
        let mut segments = Vec::with_capacity(parsed.segments.len());
        for segment in parsed.segments() {
            if segment.name.is_empty() && segment.fields.is_empty() {
                continue;
            }
            if !is_segment_name(segment.name) {
                return Err(InvalidMessage::Parse(format!(
                    "{:?} is not a segment name (three capital letters or digits)",
                    segment.name
                )));
            }
            let header = segment.name == "MSH";
            // hl7-parser reads the first segment as the header, MSH.1 and
            // MSH.2 its first fields; a later MSH is an ordinary segment to
            // it, whose first field is MSH.2. Those are plain values.
            let plain = match (header, segments.is_empty()) {
                (true, true) => 2,
                (true, false) => 1,
                (false, _) => 0,
            };
            let mut fields: Vec<Field> = segment
                .fields()
                .enumerate()
                .map(|(i, field)| {
                    if i < plain {
                        return Field::leaf(field.raw_value());
                    }
                    Field {
                        repeats: field
                            .repeats()
                            .map(|repeat| Repeat {
                                components: repeat
                                    .components()
                                    .map(|c| Component {
                                        subcomponents: c.subcomponents().map(|s| s.value.to_owned()).collect(),
                                    })
                                    .collect(),
                            })
                            .collect(),
                    }
                })
                .collect();
            if header && fields.first().and_then(Field::as_leaf) != Some(&delimiters.field.to_string()) {
                // The parser may leave MSH.1 implicit; the model always holds it.
                fields.insert(0, Field::leaf(delimiters.field.to_string()));
            }
            // The parser reports an empty MSH.3 for a bare `MSH|^~\&`.
            let bare_header =
                3 + delimiters.field.len_utf8() + fields.get(1).and_then(Field::as_leaf).map_or(0, str::len);
            if header && segment.raw_value().len() == bare_header && fields.len() == 3 && fields[2].is_empty() {
                fields.pop();
            }
            if header && fields.get(1).and_then(Field::as_leaf) != Some(&delimiters.encoding_characters()) {
                return Err(InvalidMessage::Parse(format!(
                    "every MSH segment must give the encoding characters {:?}",
                    delimiters.encoding_characters()
                )));
            }
            segments.push(Segment { name: segment.name.to_owned(), fields });
        }
        let message = Hl7Message { delimiters, segments };
        // Whatever the parser made of odd input, the model must print back
        // what was read; anything else would silently change the message.
        let printed = message.to_string();
        if printed != text {
            return Err(InvalidMessage::Parse(format!(
                "the message does not read back the same (at byte {})",
                printed.bytes().zip(text.bytes()).take_while(|(a, b)| a == b).count()
            )));
        }
        Ok(message)
    }

    /// A new message: an MSH segment with the standard delimiters and nothing else.
    pub fn new_empty() -> Hl7Message {
        let d = Delimiters::default();
        let msh = Segment {
            name: "MSH".into(),
            fields: vec![Field::leaf(d.field.to_string()), Field::leaf(d.encoding_characters())],
        };
        Hl7Message { delimiters: d, segments: vec![msh] }
    }

    /// The `n`th (1-based) segment called `name`, as an index into `segments`.
    pub fn find(&self, name: &str, n: usize) -> Option<usize> {
        self.segments.iter().enumerate().filter(|(_, s)| s.name == name).nth(n.checked_sub(1)?).map(|(i, _)| i)
    }

    pub fn count(&self, name: &str) -> usize {
        self.segments.iter().filter(|s| s.name == name).count()
    }
}

impl fmt::Display for Hl7Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.delimiters;
        let mut out = String::new();
        for (i, segment) in self.segments.iter().enumerate() {
            if i > 0 {
                out.push('\r');
            }
            out.push_str(&segment.name);
            let mut fields = segment.fields.iter();
            if segment.is_header() {
                // MSH|^~\&|...: MSH.1 is the separator itself, MSH.2 follows it directly.
                out.push(d.field);
                fields.next();
                if let Some(encoding) = fields.next() {
                    encoding.print(d, &mut out);
                }
            }
            for field in fields {
                out.push(d.field);
                field.print(d, &mut out);
            }
            if segment.fields.is_empty() && !segment.is_header() {
                // A segment name alone (`NTE`) is not a segment to the parser:
                // one made empty by a patch or a tree is written `NTE|`.
                out.push(d.field);
            }
        }
        f.write_str(&out)
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

    #[test]
    fn the_model_has_repetitions_components_and_subcomponents() {
        let message = Hl7Message::parse(ADT_A01).unwrap();
        let pid = &message.segments[message.find("PID", 1).unwrap()];
        assert_eq!(pid.fields[2].repeats.len(), 2, "PID.3 repeats");
        assert_eq!(pid.fields[2].repeats[1].components[3].subcomponents, ["USSSA"]);
        let msh = &message.segments[0];
        assert_eq!(msh.fields[0].as_leaf(), Some("|"));
        assert_eq!(msh.fields[1].as_leaf(), Some("^~\\&"));
        assert_eq!(msh.fields[8].repeats[0].components[1].subcomponents, ["A01"]);
        let oru = Hl7Message::parse(ORU_R01).unwrap();
        let obr = &oru.segments[oru.find("OBR", 1).unwrap()];
        assert_eq!(obr.fields[15].repeats[0].components[0].subcomponents, ["555-55-5555", "PRIMARY", "PATRICIA P"]);
        assert_eq!(oru.find("OBX", 2), Some(4));
        assert_eq!(oru.find("OBX", 3), None);
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
        let second = &message.segments[2];
        assert_eq!(second.fields[2].repeats[0].components.len(), 2, "MSH.3 has components");
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
