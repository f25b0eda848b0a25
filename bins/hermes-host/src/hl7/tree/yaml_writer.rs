//! The tree as YAML, written here (see [`yaml`]).

use std::fmt::Write as _;

use super::node::Node;
use crate::hl7::parts::SegmentRef;

/// The tree as YAML, written here rather than by serde-saphyr, whose plain
/// scalars lose trailing blanks (`"12345- "` read back as `"12345-"`; found
/// by the hl7_tree fuzz target). Block style, and every scalar in double
/// quotes, so that no value is ever taken for a number, a boolean or null.
pub(super) fn yaml<'a>(segments: impl Iterator<Item = SegmentRef<'a>>) -> String {
    let mut out = String::from("segments:");
    let mut segments = segments.peekable();
    if segments.peek().is_none() {
        out.push_str(" []");
    }
    out.push('\n');
    for segment in segments {
        out.push_str("- segment: ");
        yaml_quoted(segment.name(), &mut out);
        out.push_str("\n  fields:");
        yaml_value(&Node::Fields(segment), 2, &mut out);
    }
    out
}

/// Writes ` value` after a key (or `-`) and ends the line; a block
/// collection goes on the next lines, indented past `indent`.
fn yaml_value(node: &Node, indent: usize, out: &mut String) {
    match node {
        Node::Text(text) => {
            out.push(' ');
            yaml_quoted(text, out);
            out.push('\n');
        }
        Node::Repeats(_) => {
            out.push('\n');
            for item in node.items() {
                let _ = write!(out, "{:width$}-", "", width = indent + 2);
                yaml_value(&item, indent + 2, out);
            }
        }
        _ if node.is_empty() => out.push_str(" {}\n"),
        _ => {
            out.push('\n');
            for (key, node) in node.entries() {
                let _ = write!(out, "{:width$}\"{key}\":", "", width = indent + 2);
                yaml_value(&node, indent + 2, out);
            }
        }
    }
}

/// A double-quoted YAML scalar. Printable characters stand as they are;
/// the rest, and the line separators YAML 1.1 readers break at, are escaped.
fn yaml_quoted(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' | '\u{a0}'..='\u{2027}' | '\u{202a}'..='\u{d7ff}' | '\u{e000}'..='\u{fefe}' => out.push(c),
            '\u{ff00}'..='\u{fffd}' | '\u{10000}'.. => out.push(c),
            c => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        }
    }
    out.push('"');
}
