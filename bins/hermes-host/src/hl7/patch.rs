//! Patches: HL7 location queries (`PID.5.1`, `OBX[2].5`, `PID.3[2].1`) with a
//! value to set, a field to clear, or a segment to create or remove.
//!
//! Paths are parsed by `hl7-parser`'s `LocationQuery` and must be nothing but
//! a query (`PID.5x` is refused, not read as `PID.5`). A value is HL7 text
//! for one leaf: a delimiter in it is escaped (`DOE^JOHN` at `PID.5` is one
//! value, `DOE\S\JOHN`; set components one by one). Setting a place that does
//! not exist yet creates it (fields, repetitions, components in between are
//! empty); clearing trims the empty delimiters left at the end.

use hl7_parser::query::LocationQuery;
use serde::Deserialize;
use serde_json::Value;

use super::tree::{MAX_INDEX, grow};
use super::{Component, Field, Hl7Message, Repeat, Segment, is_segment_name};

/// One patch of `editor/patchMessage`.
#[derive(Clone, Debug, Deserialize)]
pub struct Patch {
    pub path: String,
    #[serde(default)]
    pub value: Option<Value>,
    #[serde(default)]
    pub remove: Option<bool>,
    #[serde(default)]
    pub create: Option<bool>,
}

/// Parses a location query, strictly.
pub fn parse_path(path: &str) -> Result<LocationQuery, String> {
    // hl7-parser panics (`todo!()`) on an index past usize::MAX; any index
    // longer than MAX_INDEX's digits is refused below anyway, so stop here.
    if path.split(|c: char| !c.is_ascii_digit()).any(|digits| digits.len() > MAX_INDEX.ilog10() as usize + 1) {
        return Err(format!("invalid path {path:?}: indices go up to {MAX_INDEX}"));
    }
    let query = LocationQuery::parse(path).map_err(|e| format!("invalid path {path:?}: {e}"))?;
    // The parser stops at the first thing it does not understand; the rest
    // must not be silently ignored. Its printed form is canonical.
    let canonical: String = path.chars().map(|c| if c == '-' || c == ' ' { '.' } else { c }).collect();
    if query.to_string() != canonical {
        return Err(format!("invalid path {path:?}: expected SEG[N].F[R].C.S"));
    }
    if !is_segment_name(&query.segment) {
        return Err(format!("invalid path {path:?}: a segment name is three capital letters or digits"));
    }
    for index in
        [query.segment_index, query.field, query.repeat, query.component, query.subcomponent].into_iter().flatten()
    {
        if index > MAX_INDEX {
            return Err(format!("invalid path {path:?}: indices go up to {MAX_INDEX}"));
        }
    }
    Ok(query)
}

/// Applies one patch to `message`; on error the message is unchanged.
pub fn apply(message: &mut Hl7Message, patch: &Patch) -> Result<(), String> {
    let query = parse_path(&patch.path)?;
    let remove = patch.remove == Some(true);
    let create = patch.create == Some(true);
    let nth = query.segment_index.unwrap_or(1);
    let Some(field_number) = query.field else {
        return match (create, remove) {
            (true, false) => create_segment(message, &query.segment, query.segment_index),
            (false, true) => remove_segment(message, &query.segment, nth),
            (true, true) => Err("a patch cannot both create and remove".into()),
            (false, false) => Err(format!("{}: a segment path needs `create` or `remove`", patch.path)),
        };
    };
    let value = match (&patch.value, remove) {
        (_, true) | (None | Some(Value::Null), _) => String::new(),
        (Some(Value::String(text)), false) => message.delimiters.escape_leaf(text),
        (Some(Value::Number(n)), false) => n.to_string(),
        (Some(Value::Bool(b)), false) => b.to_string(),
        (Some(_), false) => return Err(format!("{}: `value` must be a string", patch.path)),
    };
    if query.segment == "MSH" && field_number <= 2 {
        return Err("MSH.1 and MSH.2 hold the delimiters and cannot be patched".into());
    }
    let index = match message.find(&query.segment, nth) {
        Some(index) => index,
        None if create => {
            create_segment(message, &query.segment, Some(nth))?;
            message.find(&query.segment, nth).ok_or("the segment could not be created")?
        }
        None => return Err(format!("segment {}[{nth}] not found", query.segment)),
    };
    let segment = &mut message.segments[index];
    grow(&mut segment.fields, field_number, Field::empty);
    let field = &mut segment.fields[field_number - 1];
    set(field, query.repeat, query.component, query.subcomponent, value);
    field.trim();
    segment.trim();
    Ok(())
}

/// Sets the place a query names within one field.
fn set(field: &mut Field, repeat: Option<usize>, component: Option<usize>, sub: Option<usize>, value: String) {
    // A whole field without a repetition index: the value replaces every repetition.
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

/// Adds a segment after the last one of its name (at the end when there is
/// none). `OBX[3]` with one OBX present adds two, so that the path then exists.
fn create_segment(message: &mut Hl7Message, name: &str, nth: Option<usize>) -> Result<(), String> {
    if name == "MSH" {
        return Err("a message has one MSH segment".into());
    }
    let count = message.count(name);
    let wanted = nth.unwrap_or(count + 1);
    if wanted <= count {
        return Err(format!("segment {name}[{wanted}] already exists"));
    }
    let at = message.segments.iter().rposition(|s| s.name == name).map_or(message.segments.len(), |i| i + 1);
    for offset in 0..wanted - count {
        message.segments.insert(at + offset, Segment::new(name));
    }
    Ok(())
}

fn remove_segment(message: &mut Hl7Message, name: &str, nth: usize) -> Result<(), String> {
    if name == "MSH" {
        return Err("the MSH segment cannot be removed".into());
    }
    let index = message.find(name, nth).ok_or_else(|| format!("segment {name}[{nth}] not found"))?;
    message.segments.remove(index);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hl7::tests::ORU_R01;
    use serde_json::json;

    fn patched(text: &str, patches: Value) -> (String, Vec<String>) {
        let mut message = Hl7Message::parse(text).unwrap();
        let patches: Vec<Patch> = serde_json::from_value(patches).unwrap();
        let errors = patches.iter().filter_map(|p| apply(&mut message, p).err()).collect();
        (message.to_string(), errors)
    }

    const ADT: &str = "MSH|^~\\&|APP\rPID|1||12345~67890||DOE^JOHN";

    #[test]
    fn fields_components_and_subcomponents_are_set() {
        let (text, errors) = patched(
            ADT,
            json!([{"path": "PID.5.1", "value": "TEST"}, {"path": "PID.8", "value": "F"},
                   {"path": "PID.5.3.2", "value": "X"}, {"path": "MSH.9.2", "value": "A08"}]),
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(text, "MSH|^~\\&|APP||||||^A08\rPID|1||12345~67890||TEST^JOHN^&X|||F");
    }

    #[test]
    fn repetitions_and_segment_occurrences_are_addressed() {
        let (text, errors) =
            patched(ORU_R01, json!([{"path": "OBX[2].5", "value": "new"}, {"path": "OBX[1].5.2", "value": "200"}]));
        assert!(errors.is_empty(), "{errors:?}");
        assert!(text.contains("OBX|2|TX|NOTE^Comment||new|"), "{text}");
        assert!(text.contains("||^200|mg/dl"), "{text}");
        let (text, _) = patched(ADT, json!([{"path": "PID.3[2].1", "value": "B"}, {"path": "PID.3[4]", "value": "D"}]));
        assert!(text.contains("PID|1||12345~B~~D||"), "{text}");
    }

    #[test]
    fn a_missing_value_clears_and_trailing_empties_go() {
        let (text, errors) = patched(ADT, json!([{"path": "PID.5.2"}, {"path": "PID.3", "remove": true}]));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(text, "MSH|^~\\&|APP\rPID|1||||DOE");
        let (text, _) = patched(ADT, json!([{"path": "PID.5", "value": null}]));
        assert_eq!(text, "MSH|^~\\&|APP\rPID|1||12345~67890");
    }

    #[test]
    fn segments_are_created_and_removed() {
        let (text, errors) = patched(
            ADT,
            json!([{"path": "OBX", "create": true}, {"path": "OBX[1].1", "value": "1"},
                   {"path": "NTE[2].3", "value": "note", "create": true}, {"path": "PID", "remove": true}]),
        );
        assert!(errors.is_empty(), "{errors:?}");
        // An empty segment is written with its field separator: `NTE` alone does not parse.
        assert_eq!(text, "MSH|^~\\&|APP\rOBX|1\rNTE|\rNTE|||note");
        assert_eq!(Hl7Message::parse(&text).unwrap().to_string(), text);
    }

    #[test]
    fn bad_patches_are_reported_and_the_rest_apply() {
        let (text, errors) = patched(
            ADT,
            json!([{"path": "PID.5x", "value": "a"}, {"path": "ZZZ.1", "value": "a"}, {"path": "MSH.2", "value": "a"},
                   {"path": "MSH", "remove": true}, {"path": "PID.0", "value": "a"}, {"path": "pid.1", "value": "a"},
                   {"path": "OBX[3]", "remove": true}, {"path": "PID.99999", "value": "a"},
                   {"path": "PID.2", "value": "ok"}]),
        );
        assert_eq!(errors.len(), 8, "{errors:?}");
        assert!(errors[1].contains("not found"), "{errors:?}");
        assert!(text.contains("PID|1|ok|12345"), "{text}");
    }

    /// Found by the hl7_patch fuzz target: an index too large for a usize
    /// hit a `todo!()` in hl7-parser's query parser, a panic in the handler.
    #[test]
    fn huge_indices_are_refused_not_a_panic() {
        for path in ["PID.99999999999999999999", "OBX[184467440737095516160].1", "PID.1.000000000000000000001"] {
            assert!(parse_path(path).unwrap_err().contains("indices go up to"), "{path}");
        }
        assert!(parse_path("PID.10000").is_ok());
        assert!(parse_path("ote.1").unwrap_err().contains("three capital letters"));
        assert!(parse_path("PID.010000").is_err());
    }

    #[test]
    fn values_are_one_leaf_with_delimiters_escaped() {
        let (text, _) =
            patched(ADT, json!([{"path": "PID.5", "value": "O'BRIEN^PAT & CO|"}, {"path": "PID.6", "value": 42}]));
        assert!(text.ends_with("||O'BRIEN\\S\\PAT \\T\\ CO\\F\\|42"), "{text}");
        let (text, _) = patched(ADT, json!([{"path": "PID.5.1", "value": "Ünïcödé 李"}]));
        assert!(text.ends_with("||Ünïcödé 李^JOHN"), "{text}");
    }
}
