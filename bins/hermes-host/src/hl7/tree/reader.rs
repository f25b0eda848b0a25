//! A tree back into a message: one segment at a time into owned parts,
//! written out as HL7 text and parsed, so a tree can only make what the
//! parser accepts; every index bounded ([`MAX_INDEX`]) and every element the
//! tree makes counted against a budget.

use serde_json::Value;

use crate::hl7::delimiters::{Delimiters, is_segment_name};
use crate::hl7::message::Hl7Message;
use crate::hl7::owned::{Component, Field, Repeat, Segment, grow};

/// The highest index a tree or a patch may use at any level. Real segments
/// have well under a hundred fields; the bound keeps one short key from
/// allocating millions of empty fields.
pub const MAX_INDEX: usize = 10_000;

/// Builds the message a tree describes, one segment at a time into its
/// text, then reads that back (so a tree can only produce what the parser
/// accepts).
pub(super) fn from_tree(tree: &Value, budget: usize) -> Result<Hl7Message, String> {
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
