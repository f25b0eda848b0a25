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

use super::{Component, Delimiters, Field, Hl7Message, InvalidMessage, Repeat, Segment, is_segment_name};

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
        Format::Yaml => Ok(yaml(message)),
        Format::Toml => toml::to_string(&TreeOut(message)).map_err(|e| e.to_string()),
    }
}

/// Reads a message given as text in `format`.
pub fn read(text: &str, format: Format) -> Result<Hl7Message, InvalidMessage> {
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
// Out: the message as a tree, serialised straight from the model
// ---------------------------------------------------------------------------

struct TreeOut<'a>(&'a Hl7Message);

impl Serialize for TreeOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        let segments: Vec<SegmentOut> = self.0.segments.iter().map(SegmentOut).collect();
        map.serialize_entry("segments", &segments)?;
        map.end()
    }
}

struct SegmentOut<'a>(&'a Segment);

impl Serialize for SegmentOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("segment", &self.0.name)?;
        map.serialize_entry("fields", &Indexed(&fields_of(self.0)))?;
        map.end()
    }
}

/// A segment's non-empty fields with their numbers.
fn fields_of(segment: &Segment) -> Vec<(usize, Node)> {
    segment
        .fields
        .iter()
        .enumerate()
        .filter_map(|(i, field)| {
            let node = if segment.is_header() && i < 2 {
                Node::Text(field.as_leaf().unwrap_or_default().to_owned())
            } else {
                field_node(field)
            };
            (!node.is_empty()).then_some((i + 1, node))
        })
        .collect()
}

/// The tree as YAML, written here rather than by serde-saphyr, whose plain
/// scalars lose trailing blanks (`"12345- "` read back as `"12345-"`; found
/// by the hl7_tree fuzz target). Block style, and every scalar in double
/// quotes, so that no value is ever taken for a number, a boolean or null.
fn yaml(message: &Hl7Message) -> String {
    let mut out = String::from("segments:");
    if message.segments.is_empty() {
        out.push_str(" []");
    }
    out.push('\n');
    for segment in &message.segments {
        out.push_str("- segment: ");
        yaml_quoted(&segment.name, &mut out);
        out.push_str("\n  fields:");
        yaml_value(&Node::Map(fields_of(segment)), 2, &mut out);
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
        Node::Map(entries) if entries.is_empty() => out.push_str(" {}\n"),
        Node::List(items) if items.is_empty() => out.push_str(" []\n"),
        Node::Map(entries) => {
            out.push('\n');
            for (key, node) in entries {
                let _ = write!(out, "{:width$}\"{key}\":", "", width = indent + 2);
                yaml_value(node, indent + 2, out);
            }
        }
        Node::List(items) => {
            out.push('\n');
            for item in items {
                let _ = write!(out, "{:width$}-", "", width = indent + 2);
                yaml_value(item, indent + 2, out);
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

enum Node {
    Text(String),
    Map(Vec<(usize, Node)>),
    List(Vec<Node>),
}

impl Node {
    fn is_empty(&self) -> bool {
        match self {
            Node::Text(text) => text.is_empty(),
            Node::Map(entries) => entries.is_empty(),
            Node::List(items) => items.is_empty(),
        }
    }
}

/// Entries with 1-based numeric keys, written as a map with string keys in
/// numeric order ("2" before "10").
struct Indexed<'a>(&'a [(usize, Node)]);

impl Serialize for Indexed<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (index, node) in self.0 {
            map.serialize_entry(&index.to_string(), node)?;
        }
        map.end()
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Node::Text(text) => s.serialize_str(text),
            Node::Map(entries) => Indexed(entries).serialize(s),
            Node::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
        }
    }
}

fn field_node(field: &Field) -> Node {
    match field.repeats.as_slice() {
        [] => Node::Text(String::new()),
        [one] => repeat_node(one),
        many => Node::List(
            many.iter()
                .map(|r| match repeat_node(r) {
                    // An empty repetition keeps its place in the array.
                    node if node.is_empty() => Node::Text(String::new()),
                    node => node,
                })
                .collect(),
        ),
    }
}

fn repeat_node(repeat: &Repeat) -> Node {
    match repeat.components.as_slice() {
        [] => Node::Text(String::new()),
        // A plain value; a lone component with subcomponents stays an object
        // of components (see the module doc).
        [only] if only.subcomponents.len() <= 1 => component_node(only),
        components => Node::Map(
            components
                .iter()
                .enumerate()
                .map(|(i, c)| (i + 1, component_node(c)))
                .filter(|(_, node)| !node.is_empty())
                .collect(),
        ),
    }
}

fn component_node(component: &Component) -> Node {
    match component.subcomponents.as_slice() {
        [] => Node::Text(String::new()),
        [only] => Node::Text(only.clone()),
        subs => Node::Map(
            subs.iter()
                .enumerate()
                .filter(|(_, s)| !s.is_empty())
                .map(|(i, s)| (i + 1, Node::Text(s.clone())))
                .collect(),
        ),
    }
}

// ---------------------------------------------------------------------------
// In: a tree back into a message
// ---------------------------------------------------------------------------

/// Builds the message a tree describes, then reads its text back (so a
/// tree can only produce what the parser accepts).
fn from_tree(tree: &Value, budget: usize) -> Result<Hl7Message, String> {
    let segments =
        tree.get("segments").and_then(Value::as_array).ok_or("expected an object with a `segments` array")?;
    let delimiters = delimiters_of(segments)?;
    let mut reader = TreeReader { d: delimiters, left: budget };
    let mut message = Hl7Message { delimiters, segments: Vec::with_capacity(segments.len()) };
    for (n, segment) in segments.iter().enumerate() {
        let at = format!("segments[{n}]");
        message.segments.push(reader.segment(segment).map_err(|e| format!("{at}: {e}"))?);
    }
    let text = message.to_string();
    Hl7Message::parse(&text).map_err(|e| e.to_string())
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

/// Makes `items` at least `len` long.
pub(super) fn grow<T>(items: &mut Vec<T>, len: usize, empty: impl Fn() -> T) {
    while items.len() < len {
        items.push(empty());
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
        let empty = Hl7Message { delimiters: Delimiters::default(), segments: vec![] };
        assert_eq!(render(&empty, Format::Yaml).unwrap(), "segments: []\n");
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
