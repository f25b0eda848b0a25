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
    /// line breaks in it are escaped, so that a value never makes structure.
    /// The escape character is kept as written, alone or in a sequence the
    /// host does not know (`A\B`, `\X\`, `\Z\`): a value is HL7 text, and
    /// rewriting it (`\E\`) would change a message read as a tree and back.
    pub fn escape_leaf(&self, value: &str) -> String {
        let e = self.escape;
        let mut out = String::with_capacity(value.len());
        for c in value.chars() {
            let code = match c {
                c if c == self.field => "F",
                c if c == self.component => "S",
                c if c == self.subcomponent => "T",
                c if c == self.repetition => "R",
                '\r' => "X0D",
                '\n' => "X0A",
                c => {
                    out.push(c);
                    continue;
                }
            };
            let _ = write!(out, "{e}{code}{e}");
        }
        out
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
    fn leaves_escape_delimiters_and_keep_the_escape_character_as_written() {
        let d = Delimiters::default();
        assert_eq!(d.escape_leaf("A|B^C&D~E"), "A\\F\\B\\S\\C\\T\\D\\R\\E");
        assert_eq!(d.escape_leaf("keep \\T\\ and \\X0D0A\\ and \\.br\\"), "keep \\T\\ and \\X0D0A\\ and \\.br\\");
        assert_eq!(d.escape_leaf("C:\\dir"), "C:\\dir");
        assert_eq!(d.escape_leaf("\\X\\ \\Z\\ \\"), "\\X\\ \\Z\\ \\");
        assert_eq!(d.escape_leaf("two\nlines"), "two\\X0A\\lines");
        assert_eq!(d.escape_leaf("Zoë"), "Zoë");
    }
}
