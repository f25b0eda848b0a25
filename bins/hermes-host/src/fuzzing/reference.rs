//! How the host read messages before it kept them as text: hl7-parser's
//! tree of the whole message, copied into owned parts, printed back and
//! compared with the input. What it accepts and how it splits it is what
//! [`Hl7Message::parse`](crate::hl7::Hl7Message::parse) must do, at a fraction of the memory.

use serde_json::Value;

use crate::hl7::owned::{Component, Field, Repeat, Segment, grow};
use crate::hl7::patch::{self, Patch};
use crate::hl7::{Delimiters, InvalidMessage, is_segment_name};

pub(super) fn parse(text: &str) -> Result<Vec<Segment>, InvalidMessage> {
    let text = text.trim_start_matches(['\r', '\n']).trim_end_matches(['\r', '\n']);
    if text.is_empty() {
        return Err(InvalidMessage::Empty);
    }
    if !text.starts_with("MSH") {
        return Err(InvalidMessage::NoHeader);
    }
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
        let first = segments.is_empty();
        segments.push(owned_segment(segment, first, &delimiters)?);
    }
    let printed = print(&segments, &delimiters);
    if printed != text {
        let at = printed.bytes().zip(text.bytes()).take_while(|(a, b)| a == b).count();
        return Err(crate::hl7::stops_at(text, at, delimiters.field));
    }
    Ok(segments)
}

/// One segment of hl7-parser's tree as owned parts, checked as the host
/// checked it: a segment name, and in every MSH segment the delimiters as
/// plain values (MSH.1 and MSH.2 in the first, MSH.2 in a later one, which
/// hl7-parser reads without its field separator) and the encoding characters.
fn owned_segment(
    segment: &hl7_parser::message::Segment<'_>,
    first: bool,
    delimiters: &Delimiters,
) -> Result<Segment, InvalidMessage> {
    if !is_segment_name(segment.name) {
        return Err(InvalidMessage::Parse(format!(
            "{:?} is not a segment name (three capital letters or digits)",
            segment.name
        )));
    }
    let header = segment.name == "MSH";
    let plain = match (header, first) {
        (true, true) => 2,
        (true, false) => 1,
        (false, _) => 0,
    };
    let mut fields: Vec<Field> = segment
        .fields()
        .enumerate()
        .map(|(i, field)| if i < plain { Field::leaf(field.raw_value()) } else { owned_field(field) })
        .collect();
    if header && fields.first().and_then(Field::as_leaf) != Some(&delimiters.field.to_string()) {
        fields.insert(0, Field::leaf(delimiters.field.to_string()));
    }
    let bare_header = 3 + delimiters.field.len_utf8() + fields.get(1).and_then(Field::as_leaf).map_or(0, str::len);
    if header && segment.raw_value().len() == bare_header && fields.len() == 3 && fields[2].is_empty() {
        fields.pop();
    }
    if header && fields.get(1).and_then(Field::as_leaf) != Some(&delimiters.encoding_characters()) {
        return Err(InvalidMessage::Parse(format!(
            "every MSH segment must give the encoding characters {:?}",
            delimiters.encoding_characters()
        )));
    }
    Ok(Segment { name: segment.name.to_owned(), fields })
}

/// A field of hl7-parser's tree, copied: repetitions, components, subcomponents.
fn owned_field(field: &hl7_parser::message::Field<'_>) -> Field {
    Field {
        repeats: field
            .repeats()
            .map(|repeat| Repeat {
                components: repeat
                    .components()
                    .map(|c| Component { subcomponents: c.subcomponents().map(|s| s.value.to_owned()).collect() })
                    .collect(),
            })
            .collect(),
    }
}

/// The segments as HL7 text.
pub(super) fn print(segments: &[Segment], d: &Delimiters) -> String {
    let mut printed = String::new();
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            printed.push('\r');
        }
        segment.print(d, &mut printed);
    }
    printed
}

fn find(segments: &[Segment], name: &str, n: usize) -> Option<usize> {
    segments.iter().enumerate().filter(|(_, s)| s.name == name).nth(n.checked_sub(1)?).map(|(i, _)| i)
}

/// A patch applied to owned segments, as the host did before patches
/// spliced the text.
pub(super) fn apply(segments: &mut Vec<Segment>, d: &Delimiters, patch: &Patch) -> Result<(), String> {
    let query = patch::parse_path(&patch.path)?;
    let remove = patch.remove == Some(true);
    let create = patch.create == Some(true);
    let nth = query.segment_index.unwrap_or(1);
    let Some(field_number) = query.field else {
        return match (create, remove) {
            (true, false) => create_segment(segments, &query.segment, query.segment_index),
            (false, true) => remove_segment(segments, &query.segment, nth),
            (true, true) => Err("a patch cannot both create and remove".into()),
            (false, false) => Err(format!("{}: a segment path needs `create` or `remove`", patch.path)),
        };
    };
    let value = match (&patch.value, remove) {
        (_, true) | (None | Some(Value::Null), _) => String::new(),
        (Some(Value::String(text)), false) => d.escape_leaf(text),
        (Some(Value::Number(n)), false) => n.to_string(),
        (Some(Value::Bool(b)), false) => b.to_string(),
        (Some(_), false) => return Err(format!("{}: `value` must be a string", patch.path)),
    };
    if query.segment == "MSH" && field_number <= 2 {
        return Err("MSH.1 and MSH.2 hold the delimiters and cannot be patched".into());
    }
    let index = match find(segments, &query.segment, nth) {
        Some(index) => index,
        None if create => {
            create_segment(segments, &query.segment, Some(nth))?;
            find(segments, &query.segment, nth).ok_or("the segment could not be created")?
        }
        None => return Err(format!("segment {}[{nth}] not found", query.segment)),
    };
    let segment = &mut segments[index];
    grow(&mut segment.fields, field_number, Field::empty);
    let field = &mut segment.fields[field_number - 1];
    set(field, query.repeat, query.component, query.subcomponent, value);
    field.trim();
    segment.trim();
    Ok(())
}

fn set(field: &mut Field, repeat: Option<usize>, component: Option<usize>, sub: Option<usize>, value: String) {
    if repeat.is_none() && component.is_none() {
        *field = Field::leaf(value);
        return;
    }
    let r = repeat.unwrap_or(1);
    grow(&mut field.repeats, r, || Repeat::leaf(""));
    let target = &mut field.repeats[r - 1];
    let Some(c) = component else {
        *target = Repeat::leaf(value);
        return;
    };
    grow(&mut target.components, c, || Component::leaf(""));
    let component = &mut target.components[c - 1];
    match sub {
        None => *component = Component::leaf(value),
        Some(s) => {
            grow(&mut component.subcomponents, s, String::new);
            component.subcomponents[s - 1] = value;
        }
    }
}

fn create_segment(segments: &mut Vec<Segment>, name: &str, nth: Option<usize>) -> Result<(), String> {
    if name == "MSH" {
        return Err("a message has one MSH segment".into());
    }
    let count = segments.iter().filter(|s| s.name == name).count();
    let wanted = nth.unwrap_or(count + 1);
    if wanted <= count {
        return Err(format!("segment {name}[{wanted}] already exists"));
    }
    let at = segments.iter().rposition(|s| s.name == name).map_or(segments.len(), |i| i + 1);
    for offset in 0..wanted - count {
        segments.insert(at + offset, Segment::new(name));
    }
    Ok(())
}

fn remove_segment(segments: &mut Vec<Segment>, name: &str, nth: usize) -> Result<(), String> {
    if name == "MSH" {
        return Err("the MSH segment cannot be removed".into());
    }
    let index = find(segments, name, nth).ok_or_else(|| format!("segment {name}[{nth}] not found"))?;
    segments.remove(index);
    Ok(())
}

/// The JSON tree as the host wrote it from owned segments.
pub(super) fn json(segments: &[Segment]) -> String {
    let mut out = String::from("{\"segments\":[");
    for (n, segment) in segments.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        let fields = segment.fields.iter().enumerate().filter_map(|(i, field)| {
            let node = if segment.is_header() && i < 2 {
                Node::Text(field.as_leaf().unwrap_or_default().to_owned())
            } else {
                field_node(field)
            };
            (!node.is_empty()).then_some((i + 1, node))
        });
        out.push_str(&format!("{{\"segment\":{},\"fields\":", Value::from(segment.name.as_str())));
        write_json(&Node::Map(fields.collect()), &mut out);
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// JSON text, object keys in numeric order.
fn write_json(node: &Node, out: &mut String) {
    match node {
        Node::Text(text) => out.push_str(&Value::from(text.as_str()).to_string()),
        Node::Map(entries) => {
            out.push('{');
            for (i, (key, node)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&format!("\"{key}\":"));
                write_json(node, out);
            }
            out.push('}');
        }
        Node::List(items) => {
            out.push('[');
            for (i, node) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(node, out);
            }
            out.push(']');
        }
    }
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

fn field_node(field: &Field) -> Node {
    match field.repeats.as_slice() {
        [] => Node::Text(String::new()),
        [one] => repeat_node(one),
        many => Node::List(
            many.iter()
                .map(|r| match repeat_node(r) {
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
