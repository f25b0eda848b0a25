//! The tree form of a message, shared by the `json`, `yaml` and `toml`
//! formats:
//!
//! ```json
//! {"segments": [{"segment": "PID", "fields": {"5": {"1": "DOE", "2": "JOHN"}}}]}
//! ```
//!
//! Keys are 1-based indices written as strings. A field that is one plain
//! value is a string; with components it is an object (components), whose
//! values are strings or objects (subcomponents); repetitions are an array.
//! Empty fields, components and subcomponents are left out; an empty
//! repetition inside an array is `""` (TOML has no null). In MSH, `"1"` is
//! the field separator and `"2"` the encoding characters.
//!
//! One departure from Hermes' own export, which is ambiguous there: a field
//! whose only component has subcomponents (`A&B`) is written
//! `{"1": {"1": "A", "2": "B"}}`, not `{"1": "A", "2": "B"}` (which reads as
//! two components), so that every tree converts back to the message it came
//! from.
//!
//! Leaves are HL7 text: escape sequences stay as written, so hl7 -> tree ->
//! hl7 gives the same bytes (trailing empty fields and components, which
//! the tree cannot hold and which carry nothing, aside). On the way in, a
//! delimiter inside a leaf is escaped rather than allowed to change the
//! structure, and so is an escape character that starts no escape sequence:
//! a stray `\` in a message comes back as `\E\`, which means the same.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use toml_write::{TomlKeyBuilder, TomlStringBuilder, TomlWrite as _};

use super::owned::{Component, Field, Repeat, Segment, grow};
use super::{ComponentRef, Delimiters, FieldRef, Hl7Message, InvalidMessage, RepeatRef, SegmentRef, is_segment_name};

/// The formats of `editor/getMessage` and `editor/setMessage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Hl7,
    Json,
    Yaml,
    Toml,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Hl7 => "hl7",
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Toml => "toml",
        }
    }
}

/// The highest index a tree or a patch may use at any level. Real segments
/// have well under a hundred fields; the bound keeps one short key from
/// allocating millions of empty fields.
pub const MAX_INDEX: usize = 10_000;

/// Most elements (fields, repetitions, components, subcomponents) one tree
/// may make besides one per byte of its text.
const ELEMENT_ALLOWANCE: usize = 1_000_000;

/// The message as text in `format`.
pub fn render(message: &Hl7Message, format: Format) -> Result<String, String> {
    match format {
        Format::Hl7 => Ok(message.to_string()),
        Format::Json => serde_json::to_string(&TreeOut(message)).map_err(|e| e.to_string()),
        Format::Yaml => Ok(yaml(message.segments())),
        Format::Toml => Ok(toml(message)),
    }
}

/// The tree as TOML, by the toml crate, as it was written before [`toml`];
/// the `hl7_message` fuzz target checks they agree.
pub(crate) fn toml_in_one_piece(message: &Hl7Message) -> Result<String, String> {
    toml::to_string(&TreeOut(message)).map_err(|e| e.to_string())
}

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
fn toml(message: &Hl7Message) -> String {
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

/// Reads a message given as text in `format`.
pub fn read(text: &str, format: Format) -> Result<Hl7Message, InvalidMessage> {
    match format {
        Format::Hl7 => Hl7Message::parse(text),
        _ => read_tree(text, format),
    }
}

/// [`read`] of text the caller gives away: HL7 text becomes the message
/// itself, not a copy of it.
pub fn read_owned(text: String, format: Format) -> Result<Hl7Message, InvalidMessage> {
    match format {
        Format::Hl7 => Hl7Message::parse_owned(text),
        _ => read_tree(&text, format),
    }
}

fn read_tree(text: &str, format: Format) -> Result<Hl7Message, InvalidMessage> {
    let tree: Value = match format {
        Format::Hl7 => return Hl7Message::parse(text),
        Format::Json => serde_json::from_str(text).map_err(|e| InvalidMessage::Tree(format!("not JSON: {e}")))?,
        Format::Yaml => serde_saphyr::from_str(text).map_err(|e| InvalidMessage::Tree(format!("not YAML: {e}")))?,
        Format::Toml => toml::from_str(text).map_err(|e| InvalidMessage::Tree(format!("not TOML: {e}")))?,
    };
    let budget = ELEMENT_ALLOWANCE + text.len();
    from_tree(&tree, budget).map_err(InvalidMessage::Tree)
}

// ---------------------------------------------------------------------------
// Out: the message as a tree, serialised straight from its text
// ---------------------------------------------------------------------------

/// A node of the tree, borrowing the message's text: what it is (a value,
/// an array, an object) is read from the text as it is written, so a tree
/// of any size costs its output and no more.
#[derive(Clone, Copy)]
enum Node<'a> {
    Text(&'a str),
    /// A field of several repetitions: an array, an empty one kept as `""`.
    Repeats(FieldRef<'a>),
    /// A repetition's components by number, empty ones left out.
    Components(RepeatRef<'a>),
    /// A component's subcomponents by number, empty ones left out.
    Subcomponents(ComponentRef<'a>),
    /// A segment's fields by number, empty ones left out.
    Fields(SegmentRef<'a>),
}

impl<'a> Node<'a> {
    fn field(field: FieldRef<'a>) -> Node<'a> {
        match field.repeats().nth(1) {
            Some(_) => Node::Repeats(field),
            None => Node::repeat(field.repeats().next().expect("a field has a repetition")),
        }
    }

    /// A plain value; a lone component with subcomponents stays an object
    /// of components (see the module doc).
    fn repeat(repeat: RepeatRef<'a>) -> Node<'a> {
        match repeat.is_leaf() {
            true => Node::Text(repeat.as_str()),
            false => Node::Components(repeat),
        }
    }

    fn component(component: ComponentRef<'a>) -> Node<'a> {
        match component.is_leaf() {
            true => Node::Text(component.as_str()),
            false => Node::Subcomponents(component),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Node::Text(text) => text.is_empty(),
            // Two repetitions or more, even empty ones.
            Node::Repeats(_) => false,
            _ => self.entries().next().is_none(),
        }
    }

    /// The items of an array.
    fn items(&self) -> impl Iterator<Item = Node<'a>> + 'a {
        let field = match self {
            Node::Repeats(field) => Some(*field),
            _ => None,
        };
        field.into_iter().flat_map(|field| field.repeats()).map(|repeat| match Node::repeat(repeat) {
            // An empty repetition keeps its place in the array.
            node if node.is_empty() => Node::Text(""),
            node => node,
        })
    }

    /// The non-empty entries of an object, with their 1-based numbers.
    fn entries(&self) -> Box<dyn Iterator<Item = (usize, Node<'a>)> + 'a> {
        let numbered = |nodes: Box<dyn Iterator<Item = Node<'a>> + 'a>| {
            Box::new(nodes.enumerate().map(|(i, node)| (i + 1, node)).filter(|(_, node)| !node.is_empty()))
        };
        match *self {
            Node::Text(_) | Node::Repeats(_) => Box::new(std::iter::empty()),
            Node::Components(repeat) => numbered(Box::new(repeat.components().map(Node::component))),
            Node::Subcomponents(component) => numbered(Box::new(component.subcomponents().map(Node::Text))),
            Node::Fields(segment) => {
                let header = segment.is_header();
                numbered(Box::new(segment.fields().enumerate().map(move |(i, field)| match header && i < 2 {
                    true => Node::Text(field.as_leaf().unwrap_or_default()),
                    false => Node::field(field),
                })))
            }
        }
    }
}

struct TreeOut<'a>(&'a Hl7Message);

impl Serialize for TreeOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry("segments", &SegmentsOut(self.0))?;
        map.end()
    }
}

struct SegmentsOut<'a>(&'a Hl7Message);

impl Serialize for SegmentsOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.segment_count()))?;
        for segment in self.0.segments() {
            seq.serialize_element(&SegmentOut(segment))?;
        }
        seq.end()
    }
}

struct SegmentOut<'a>(SegmentRef<'a>);

impl Serialize for SegmentOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("segment", self.0.name())?;
        map.serialize_entry("fields", &Node::Fields(self.0))?;
        map.end()
    }
}

/// The tree as YAML, written here rather than by serde-saphyr, whose plain
/// scalars lose trailing blanks (`"12345- "` read back as `"12345-"`; found
/// by the hl7_tree fuzz target). Block style, and every scalar in double
/// quotes, so that no value is ever taken for a number, a boolean or null.
fn yaml<'a>(segments: impl Iterator<Item = SegmentRef<'a>>) -> String {
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

/// Objects have 1-based numeric keys, written as strings, in numeric order
/// ("2" before "10"); arrays are repetitions.
impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Text(text) => s.serialize_str(text),
            Node::Repeats(_) => {
                let mut seq = s.serialize_seq(Some(self.items().count()))?;
                for item in self.items() {
                    seq.serialize_element(&item)?;
                }
                seq.end()
            }
            _ => {
                let mut map = s.serialize_map(Some(self.entries().count()))?;
                for (index, node) in self.entries() {
                    map.serialize_entry(&index.to_string(), &node)?;
                }
                map.end()
            }
        }
    }
}

// ---------------------------------------------------------------------------
// In: a tree back into a message
// ---------------------------------------------------------------------------

/// Builds the message a tree describes, one segment at a time into its
/// text, then reads that back (so a tree can only produce what the parser
/// accepts).
fn from_tree(tree: &Value, budget: usize) -> Result<Hl7Message, String> {
    let segments =
        tree.get("segments").and_then(Value::as_array).ok_or("expected an object with a `segments` array")?;
    let delimiters = delimiters_of(segments)?;
    let mut reader = TreeReader { d: delimiters, left: budget };
    let mut text = String::new();
    for (n, segment) in segments.iter().enumerate() {
        let at = format!("segments[{n}]");
        let segment = reader.segment(segment).map_err(|e| format!("{at}: {e}"))?;
        if n > 0 {
            text.push('\r');
        }
        segment.print(&delimiters, &mut text);
    }
    Hl7Message::parse_owned(text).map_err(|e| e.to_string())
}

fn delimiters_of(segments: &[Value]) -> Result<Delimiters, String> {
    let mut d = Delimiters::default();
    let Some(msh) = segments.first().filter(|s| s.get("segment").and_then(Value::as_str) == Some("MSH")) else {
        return Err("the first segment must be MSH".into());
    };
    let fields = msh.get("fields");
    if let Some(separator) = fields.and_then(|f| f.get("1")).and_then(Value::as_str) {
        let mut chars = separator.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => d.field = c,
            _ => return Err(format!("MSH field 1 must be one character, not {separator:?}")),
        }
    }
    if let Some(encoding) = fields.and_then(|f| f.get("2")).and_then(Value::as_str) {
        let chars: Vec<char> = encoding.chars().collect();
        let [component, repetition, escape, subcomponent] = chars[..] else {
            return Err(format!("MSH field 2 must be four encoding characters, not {encoding:?}"));
        };
        d = Delimiters { field: d.field, component, repetition, escape, subcomponent };
    }
    d.check()?;
    Ok(d)
}

struct TreeReader {
    d: Delimiters,
    /// Elements this tree may still make.
    left: usize,
}

impl TreeReader {
    fn spend(&mut self, n: usize) -> Result<(), String> {
        self.left = self.left.checked_sub(n).ok_or("the tree describes too large a message")?;
        Ok(())
    }

    fn segment(&mut self, value: &Value) -> Result<Segment, String> {
        let name = value.get("segment").and_then(Value::as_str).ok_or("expected a `segment` name")?;
        if !is_segment_name(name) {
            return Err(format!("{name:?} is not a segment name (three capital letters or digits)"));
        }
        let mut segment = Segment::new(name);
        let header = segment.is_header();
        if header {
            segment.fields.push(Field::leaf(self.d.field.to_string()));
            segment.fields.push(Field::leaf(self.d.encoding_characters()));
        }
        let fields = match value.get("fields") {
            None | Some(Value::Null) => return Ok(segment),
            Some(Value::Object(fields)) => fields,
            Some(_) => return Err("`fields` must be an object".into()),
        };
        for (key, field) in fields {
            let index = index_of(key).map_err(|e| format!("fields: {e}"))?;
            if header && index <= 2 {
                continue;
            }
            self.spend(index.saturating_sub(segment.fields.len()))?;
            let field = self.field(field).map_err(|e| format!("fields.{key}: {e}"))?;
            grow(&mut segment.fields, index, Field::empty);
            segment.fields[index - 1] = field;
        }
        segment.trim();
        Ok(segment)
    }

    fn field(&mut self, value: &Value) -> Result<Field, String> {
        match value {
            Value::Array(items) => {
                self.spend(items.len())?;
                let repeats = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| match item {
                        Value::Array(_) => Err(format!("[{i}]: a repetition cannot be an array")),
                        item => self.repeat(item).map_err(|e| format!("[{i}]: {e}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(if repeats.is_empty() { Field::empty() } else { Field { repeats } })
            }
            other => Ok(Field { repeats: vec![self.repeat(other)?] }),
        }
    }

    fn repeat(&mut self, value: &Value) -> Result<Repeat, String> {
        let Value::Object(components) = value else {
            return Ok(Repeat::leaf(self.leaf(value)?));
        };
        let mut repeat = Repeat { components: Vec::new() };
        for (key, component) in components {
            let index = index_of(key)?;
            self.spend(index.saturating_sub(repeat.components.len()))?;
            let component = self.component(component).map_err(|e| format!("{key}: {e}"))?;
            grow(&mut repeat.components, index, || Component::leaf(""));
            repeat.components[index - 1] = component;
        }
        if repeat.components.is_empty() {
            repeat.components.push(Component::leaf(""));
        }
        Ok(repeat)
    }

    fn component(&mut self, value: &Value) -> Result<Component, String> {
        let Value::Object(subs) = value else {
            return Ok(Component::leaf(self.leaf(value)?));
        };
        let mut component = Component { subcomponents: Vec::new() };
        for (key, sub) in subs {
            let index = index_of(key)?;
            self.spend(index.saturating_sub(component.subcomponents.len()))?;
            let text = self.leaf(sub).map_err(|e| format!("{key}: {e}"))?;
            grow(&mut component.subcomponents, index, String::new);
            component.subcomponents[index - 1] = text;
        }
        if component.subcomponents.is_empty() {
            component.subcomponents.push(String::new());
        }
        Ok(component)
    }

    fn leaf(&mut self, value: &Value) -> Result<String, String> {
        match value {
            Value::String(text) => Ok(self.d.escape_leaf(text)),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Null => Ok(String::new()),
            Value::Array(_) | Value::Object(_) => Err("expected a value, found a nested array or object".into()),
        }
    }
}

/// A 1-based index key (`"5"`).
fn index_of(key: &str) -> Result<usize, String> {
    match key.parse::<usize>() {
        Ok(0) => Err(format!("{key:?}: indices start at 1")),
        Ok(n) if n <= MAX_INDEX => Ok(n),
        Ok(_) => Err(format!("{key:?}: indices go up to {MAX_INDEX}")),
        Err(_) => Err(format!("{key:?} is not an index")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hl7::tests::{ADT_A01, ORU_R01};
    use serde_json::json;

    fn without_trailing_empties(text: &str) -> String {
        // What the tree cannot hold: trailing delimiters with nothing after them.
        text.split('\r')
            .map(|segment| {
                segment
                    .split('|')
                    .map(|field| field.trim_end_matches('^').to_owned())
                    .collect::<Vec<_>>()
                    .join("|")
                    .trim_end_matches('|')
                    .to_owned()
            })
            .collect::<Vec<_>>()
            .join("\r")
    }

    #[test]
    fn the_spec_example_shape() {
        let message = Hl7Message::parse("MSH|^~\\&|APP\rPID|1||12345||DOE^JOHN").unwrap();
        let tree: Value = serde_json::from_str(&render(&message, Format::Json).unwrap()).unwrap();
        assert_eq!(
            tree,
            json!({"segments": [
                {"segment": "MSH", "fields": {"1": "|", "2": "^~\\&", "3": "APP"}},
                {"segment": "PID", "fields": {"1": "1", "3": "12345", "5": {"1": "DOE", "2": "JOHN"}}}
            ]})
        );
    }

    #[test]
    fn keys_come_in_numeric_order() {
        let message = Hl7Message::parse(ADT_A01).unwrap();
        let json = render(&message, Format::Json).unwrap();
        let pid = &json[json.find("\"PID\"").unwrap()..];
        assert!(pid.find("\"2\"").is_none_or(|two| two < pid.find("\"10\"").unwrap()), "{pid}");
        assert!(pid.find("\"3\"").unwrap() < pid.find("\"10\"").unwrap());
    }

    #[test]
    fn every_format_round_trips_real_messages() {
        for text in [ADT_A01, ORU_R01] {
            let message = Hl7Message::parse(text).unwrap();
            for format in [Format::Json, Format::Yaml, Format::Toml] {
                let rendered = render(&message, format).unwrap();
                let back = read(&rendered, format).unwrap_or_else(|e| panic!("{format:?}: {e}\n{rendered}"));
                assert_eq!(back.to_string(), without_trailing_empties(text), "{format:?}:\n{rendered}");
            }
        }
    }

    #[test]
    fn repetitions_subcomponents_and_escapes_keep_their_shape() {
        let text = "MSH|^~\\&\rOBX|1|TX|A&B||x\\T\\y~~z^^3&4";
        let message = Hl7Message::parse(text).unwrap();
        let tree: Value = serde_json::from_str(&render(&message, Format::Json).unwrap()).unwrap();
        let fields = &tree["segments"][1]["fields"];
        assert_eq!(fields["3"], json!({"1": {"1": "A", "2": "B"}}));
        assert_eq!(fields["5"], json!(["x\\T\\y", "", {"1": "z", "3": {"1": "3", "2": "4"}}]));
        for format in [Format::Json, Format::Yaml, Format::Toml] {
            let back = read(&render(&message, format).unwrap(), format).unwrap();
            assert_eq!(back.to_string(), text, "{format:?}");
        }
    }

    #[test]
    fn values_that_look_like_other_types_stay_strings() {
        let text = "MSH|^~\\&|007|yes|null|~x|1.50|true";
        let message = Hl7Message::parse(&text.replace("|~x", "|\\R\\x")).unwrap();
        for format in [Format::Yaml, Format::Toml, Format::Json] {
            let back = read(&render(&message, format).unwrap(), format).unwrap();
            assert_eq!(back, message, "{format:?}");
        }
    }

    #[test]
    fn delimiters_in_leaves_are_escaped_not_structural() {
        let tree = json!({"segments": [{"segment": "MSH", "fields": {"2": "^~\\&"}},
            {"segment": "PID", "fields": {"5": {"1": "A^B", "2": "C|D"}, "7": 19800101, "8": null}}]});
        let message = read(&tree.to_string(), Format::Json).unwrap();
        assert_eq!(message.to_string(), "MSH|^~\\&\rPID|||||A\\S\\B^C\\F\\D||19800101");
    }

    #[test]
    fn custom_delimiters_come_from_msh_2() {
        let text = "MSH|@#!$|APP\rPID|1||a@b#c$d";
        let message = Hl7Message::parse(text).unwrap();
        let back = read(&render(&message, Format::Json).unwrap(), Format::Json).unwrap();
        assert_eq!(back.to_string(), text);
    }

    #[test]
    fn bad_trees_are_refused_with_the_place() {
        let bad = |tree: Value| read(&tree.to_string(), Format::Json).unwrap_err().to_string();
        assert!(bad(json!({"nope": []})).contains("segments"));
        assert!(bad(json!({"segments": [{"segment": "PID"}]})).contains("MSH"));
        let e = bad(json!({"segments": [{"segment": "MSH"}, {"segment": "PID", "fields": {"x": "1"}}]}));
        assert!(e.contains("segments[1]") && e.contains("\"x\""), "{e}");
        let e = bad(json!({"segments": [{"segment": "MSH"}, {"segment": "PID", "fields": {"0": "1"}}]}));
        assert!(e.contains("start at 1"), "{e}");
        let e = bad(json!({"segments": [{"segment": "MSH"}, {"segment": "PID", "fields": {"99999999": "1"}}]}));
        assert!(e.contains("indices go up to"), "{e}");
        let e = bad(json!({"segments": [{"segment": "MSH"}, {"segment": "pid"}]}));
        assert!(e.contains("segment name"), "{e}");
        assert!(read("segments: [", Format::Yaml).is_err());
        assert!(read("segments = ", Format::Toml).is_err());
    }

    /// Found by the hl7_patch and hl7_tree fuzz targets: an empty segment, which every format
    /// renders as a name without fields, read back as `NTE`, which the
    /// parser refuses; so such a message could not round-trip.
    #[test]
    fn a_segment_without_fields_round_trips() {
        let message = read(r#"{"segments": [{"segment": "MSH"}, {"segment": "NTE"}]}"#, Format::Json).unwrap();
        assert_eq!(message.to_string(), "MSH|^~\\&\rNTE|");
        for format in [Format::Json, Format::Yaml, Format::Toml] {
            let back = read(&render(&message, format).unwrap(), format).unwrap();
            assert_eq!(back.to_string(), "MSH|^~\\&\rNTE|", "{format:?}");
        }
    }

    /// Found by the hl7_tree fuzz target: serde-saphyr wrote `12345- ` as a
    /// plain scalar, which reads back without its trailing blank.
    #[test]
    fn yaml_keeps_blanks_and_odd_characters() {
        let text = "MSH|^~\\&\rPID|||12345- ~ lead||a\"b:\\E\\ #c\tz\u{7f}\u{85}\u{2028}\u{feff}\u{1F691}";
        let message = Hl7Message::parse(text).unwrap();
        let yaml = render(&message, Format::Yaml).unwrap();
        assert_eq!(read(&yaml, Format::Yaml).unwrap().to_string(), text, "{yaml}");
        // A message always has its header; the writer of no segments at all:
        assert_eq!(super::yaml(std::iter::empty()), "segments: []\n");
    }

    #[test]
    fn a_tree_cannot_make_a_huge_message_from_a_small_text() {
        let fields: serde_json::Map<String, Value> = (1..=MAX_INDEX).map(|i| (i.to_string(), json!("x"))).collect();
        let segment = json!({"segment": "ZZZ", "fields": {"10000": {"10000": {"10000": "x"}}}});
        let mut segments = vec![json!({"segment": "MSH"})];
        segments.extend(std::iter::repeat_n(segment, 200));
        let e = read(&json!({ "segments": segments }).to_string(), Format::Json).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        // A wide but honest segment is fine.
        let wide = json!({"segments": [{"segment": "MSH"}, {"segment": "ZZZ", "fields": fields}]});
        assert!(read(&wide.to_string(), Format::Json).is_ok());
    }
}
