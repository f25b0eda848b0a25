//! Text from the other side shown to a person: in the log and on a terminal.
//!
//! Method names, session ids, versions, tool names and descriptions come from
//! peers. Written raw, a newline forges a log line and an ESC sequence clears
//! a terminal or sets its title; shown through these wrappers, every control
//! character (C0, DEL, C1), the Unicode line separators and the bidi
//! overrides are written as `\u{..}` escapes, and `\` as `\\` so that an
//! escape cannot be faked. Anything else is written as it is, so ordinary
//! names read the same, in text logs and in JSON ones.

use std::fmt::{self, Display, Write as _};

/// `text` on one line: every control character escaped, newlines too.
pub struct OneLine<'a>(pub &'a str);

/// `text` as lines: like [`OneLine`], but newlines and tabs kept (a tool's
/// text result printed by `btcp-broker call`).
pub struct Lines<'a>(pub &'a str);

/// `text` on one line with its tabs kept: like [`OneLine`] otherwise (an
/// extension's log line or a dialog's words at a terminal).
pub struct Tabbed<'a>(pub &'a str);

impl Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, |_| false)
    }
}

impl Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, |c| c == '\n' || c == '\t')
    }
}

impl Display for Tabbed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, |c| c == '\t')
    }
}

/// Whether `c` changes what a terminal or a log reader shows beyond itself.
fn unsafe_to_show(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn write_escaped(f: &mut fmt::Formatter<'_>, text: &str, keep: impl Fn(char) -> bool) -> fmt::Result {
    let mut rest = text;
    while let Some(at) = rest.find(|c: char| c == '\\' || (unsafe_to_show(c) && !keep(c))) {
        f.write_str(&rest[..at])?;
        let c = rest[at..].chars().next().unwrap_or_default();
        match c {
            '\\' => f.write_str("\\\\")?,
            c => write!(f, "\\u{{{:x}}}", c as u32)?,
        }
        rest = &rest[at + c.len_utf8()..];
    }
    f.write_str(rest)?;
    Ok(())
}

/// `text` escaped as [`OneLine`] shows it, as an owned string.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let _ = write!(out, "{}", OneLine(text));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(one_line("demo-1 été"), "demo-1 été");
        assert_eq!(one_line("a\nb\r\u{1b}[31mc\u{7f}\u{9b}"), "a\\u{a}b\\u{d}\\u{1b}[31mc\\u{7f}\\u{9b}");
        assert_eq!(one_line("cli\u{202e}txt"), "cli\\u{202e}txt");
        assert_eq!(one_line("a\\u{a}"), "a\\\\u{a}");
        assert_eq!(Lines("x\n\ty\u{1b}]0;t\u{7}").to_string(), "x\n\ty\\u{1b}]0;t\\u{7}");
        assert_eq!(Tabbed("x\n\ty\u{1b}").to_string(), "x\\u{a}\ty\\u{1b}");
    }
}
