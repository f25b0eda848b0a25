//! The tree as TOML, written here as it goes rather than by the toml crate
//! (see [`toml`]).

use std::fmt::Write as _;

use toml_write::{TomlKeyBuilder, TomlStringBuilder, TomlWrite as _};

use super::node::Node;
use crate::hl7::message::Hl7Message;

/// The tree as TOML, written here as it goes, exactly as the toml crate
/// writes it (the `hl7_message` fuzz target checks that they agree byte
/// for byte): the crate builds a document of every value before it writes
/// any, some 500 bytes a value.
///
/// The crate's layout, for this tree: the segments are an array of tables,
/// and so is a field whose repetitions are all objects; other objects are
/// tables, except inside an array, where they are inline. A table's header
/// is left out when it has tables and no values of its own; its values come
/// first, then its tables, each after a blank line.
pub(super) fn toml(message: &Hl7Message) -> String {
    let mut out = TomlOut { text: String::new(), first: true };
    for segment in message.segments() {
        out.header(true, &["segments"]);
        out.text.push_str("segment = ");
        out.value(&Node::Text(segment.name()));
        out.text.push('\n');
        out.table(&mut vec!["segments".into(), "fields".into()], &Node::Fields(segment), false);
    }
    out.text
}

struct TomlOut {
    text: String,
    /// No table header written yet (the first one has no blank line before it).
    first: bool,
}

/// What the toml crate makes of a node inside a table.
#[derive(PartialEq, Eq)]
enum TomlKind {
    Value,
    Table,
    ArrayOfTables,
}

impl Node<'_> {
    fn toml_kind(&self) -> TomlKind {
        match self {
            Node::Text(_) => TomlKind::Value,
            Node::Repeats(_) if self.items().all(|item| matches!(item, Node::Components(_))) => TomlKind::ArrayOfTables,
            Node::Repeats(_) => TomlKind::Value,
            _ => TomlKind::Table,
        }
    }
}

impl TomlOut {
    fn header(&mut self, array: bool, path: &[impl AsRef<str>]) {
        if !std::mem::take(&mut self.first) {
            self.text.push('\n');
        }
        self.text.push_str(if array { "[[" } else { "[" });
        for (i, key) in path.iter().enumerate() {
            if i > 0 {
                self.text.push('.');
            }
            let _ = self.text.key(TomlKeyBuilder::new(key.as_ref()).as_default());
        }
        self.text.push_str(if array { "]]\n" } else { "]\n" });
    }

    /// A table at `path` (an element of an array of tables if `array`):
    /// its header, its values, then its tables.
    fn table(&mut self, path: &mut Vec<String>, node: &Node, array: bool) {
        let empty = node.entries().next().is_none();
        if array || empty || node.entries().any(|(_, n)| n.toml_kind() == TomlKind::Value) {
            self.header(array, path);
        }
        for (key, node) in node.entries().filter(|(_, n)| n.toml_kind() == TomlKind::Value) {
            let _ = write!(self.text, "{key} = ");
            self.value(&node);
            self.text.push('\n');
        }
        for (key, node) in node.entries() {
            path.push(key.to_string());
            match node.toml_kind() {
                TomlKind::Value => {}
                TomlKind::Table => self.table(path, &node, false),
                TomlKind::ArrayOfTables => node.items().for_each(|item| self.table(path, &item, true)),
            }
            path.pop();
        }
    }

    /// A value: a string, an inline array, an inline table.
    fn value(&mut self, node: &Node) {
        match node {
            Node::Text(text) => {
                let _ = self.text.value(TomlStringBuilder::new(text).as_default());
            }
            Node::Repeats(_) => {
                self.text.push('[');
                for (i, item) in node.items().enumerate() {
                    if i > 0 {
                        self.text.push_str(", ");
                    }
                    self.value(&item);
                }
                self.text.push(']');
            }
            _ => {
                self.text.push_str("{ ");
                for (i, (key, node)) in node.entries().enumerate() {
                    if i > 0 {
                        self.text.push_str(", ");
                    }
                    let _ = write!(self.text, "{key} = ");
                    self.value(&node);
                }
                self.text.push_str(" }");
            }
        }
    }
}
