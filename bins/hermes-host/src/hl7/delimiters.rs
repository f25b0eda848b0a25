//! The five delimiters of a message, read from its MSH segment, and what
//! they decide: which segment names there are, and how a value is escaped to
//! stand as one leaf.

use std::fmt::Write as _;

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

#[cfg(test)]
mod tests {
    use super::*;

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
