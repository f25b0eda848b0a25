//! Patches: HL7 location queries (`PID.5.1`, `OBX[2].5`, `PID.3[2].1`) with a
//! value to set, a field to clear, or a segment to create or remove.
//!
//! Paths are parsed by `hl7-parser`'s `LocationQuery` and must be nothing but
//! a query (`PID.5x` is refused, not read as `PID.5`). A value is HL7 text
//! for one leaf: a delimiter in it is escaped (`DOE^JOHN` at `PID.5` is one
//! value, `DOE\S\JOHN`; set components one by one). Setting a place that does
//! not exist yet creates it (fields, repetitions, components in between are
//! empty); clearing trims the empty delimiters left at the end.
//!
//! A patch is worked out as one [`Splice`] of the message's text (a segment
//! rewritten, segments inserted or one removed), built from the parts it
//! touches: a patch on a segment of a million fields copies its text once
//! and allocates nothing per field. Whoever applies it can first check
//! where it leaves the message ([`Hl7Message::check_splice`]).

use std::ops::Range;

use hl7_parser::query::LocationQuery;
use serde::Deserialize;
use serde_json::Value;

use super::bounds::{Bounds, Exceeded};
use super::delimiters::{Delimiters, is_segment_name};
use super::message::Hl7Message;
use super::tree::reader::MAX_INDEX;

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

/// What a patch does to the text: `range` replaced by `text`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Splice {
    pub range: Range<usize>,
    pub text: String,
}

/// Why a patch was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The patch is wrong for this message (its path, its value, its place).
    Invalid(String),
    /// It would take the message past its bounds.
    Exceeds(Exceeded),
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
    apply_within(message, patch, &Bounds::NONE).map_err(|refusal| match refusal {
        Refusal::Invalid(reason) => reason,
        Refusal::Exceeds(exceeded) => format!("{exceeded:?}"),
    })
}

/// Applies one patch unless it is invalid or would take the message past
/// `bounds`; either way, on error the message is unchanged.
pub fn apply_within(message: &mut Hl7Message, patch: &Patch, bounds: &Bounds) -> Result<(), Refusal> {
    let Splice { range, text } = plan(message, patch).map_err(Refusal::Invalid)?;
    message.check_splice(&range, &text, bounds).map_err(Refusal::Exceeds)?;
    message.splice(range, &text);
    Ok(())
}

/// Works out what `patch` does to `message`, changing nothing.
pub fn plan(message: &Hl7Message, patch: &Patch) -> Result<Splice, String> {
    let query = parse_path(&patch.path)?;
    let remove = patch.remove == Some(true);
    let create = patch.create == Some(true);
    let nth = query.segment_index.unwrap_or(1);
    let Some(field_number) = query.field else {
        return match (create, remove) {
            (true, false) => create_segment(message, &query.segment, query.segment_index, None),
            (false, true) => remove_segment(message, &query.segment, nth),
            (true, true) => Err("a patch cannot both create and remove".into()),
            (false, false) => Err(format!("{}: a segment path needs `create` or `remove`", patch.path)),
        };
    };
    let d = message.delimiters();
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
    let place =
        Place { field: field_number, repeat: query.repeat, component: query.component, sub: query.subcomponent };
    match message.find(&query.segment, nth) {
        Some(index) => {
            let range = message.segment_range(index).expect("a segment found is there");
            let text = place.set(&message.as_str()[range.clone()], &d, &value);
            Ok(Splice { range, text })
        }
        // The segment is created with the field set: the last one it adds.
        None if create => {
            create_segment(message, &query.segment, Some(nth), Some(&|empty| place.set(empty, &d, &value)))
        }
        None => Err(format!("segment {}[{nth}] not found", query.segment)),
    }
}

/// Where in a segment a patch writes: field, repetition, component,
/// subcomponent, each 1-based.
struct Place {
    field: usize,
    repeat: Option<usize>,
    component: Option<usize>,
    sub: Option<usize>,
}

impl Place {
    /// The segment `segment` with `value` written at this place, the empty
    /// delimiters left at the end of the field and of the segment trimmed.
    fn set(&self, segment: &str, d: &Delimiters, value: &str) -> String {
        let header = segment.starts_with("MSH");
        // The fields after the name; in MSH, after MSH.2 (`MSH|^~\&`, 8 bytes):
        // none at all when the segment ends there.
        let (head, body, before) = match header {
            true => (&segment[..8], segment.get(9..), 2),
            false => (&segment[..3], Some(&segment[4..]), 0),
        };
        let body = replace_part(body.unwrap_or(""), d.field, self.field - 1 - before, body.is_none(), |old| {
            trim_field(&self.set_in_field(old, d, value), d)
        });
        // Trailing empty fields go: in MSH down to MSH.2, elsewhere all of
        // them, and the segment is then written `NTE|` (a name alone is not
        // a segment).
        let empty = |field: &str| field.chars().all(|c| c == d.repetition || c == d.component || c == d.subcomponent);
        let mut body = Some(body);
        while let Some(fields) = &mut body {
            match fields.rfind(d.field) {
                Some(at) if empty(&fields[at + 1..]) => fields.truncate(at),
                None if empty(fields) => body = None,
                _ => break,
            }
        }
        let mut out = String::with_capacity(segment.len() + value.len());
        out.push_str(head);
        match (header, body) {
            (true, None) => {}
            (false, None) => out.push(d.field),
            (_, Some(fields)) => {
                out.push(d.field);
                out.push_str(&fields);
            }
        }
        out
    }

    /// A field's text with `value` at this place. A whole field without a
    /// repetition index: the value replaces every repetition.
    fn set_in_field(&self, field: &str, d: &Delimiters, value: &str) -> String {
        if self.repeat.is_none() && self.component.is_none() {
            return value.to_owned();
        }
        replace_part(field, d.repetition, self.repeat.unwrap_or(1) - 1, false, |repeat| match self.component {
            None => value.to_owned(),
            Some(c) => replace_part(repeat, d.component, c - 1, false, |component| match self.sub {
                None => value.to_owned(),
                Some(s) => replace_part(component, d.subcomponent, s - 1, false, |_| value.to_owned()),
            }),
        })
    }
}

/// `text` split at `sep`, with part `index` (0-based) replaced by what `with`
/// makes of it; missing parts before it are added empty. `none` says `text`
/// has no parts at all (a bare MSH has no fields after MSH.2).
fn replace_part(text: &str, sep: char, index: usize, none: bool, with: impl FnOnce(&str) -> String) -> String {
    let mut start = 0;
    let mut parts = if none { 0 } else { 1 };
    while parts <= index {
        match text[start..].find(sep) {
            Some(at) => {
                start += at + sep.len_utf8();
                parts += 1;
            }
            None => break,
        }
    }
    if parts > index {
        let end = text[start..].find(sep).map_or(text.len(), |at| start + at);
        let mut out = String::with_capacity(text.len());
        out.push_str(&text[..start]);
        out.push_str(&with(&text[start..end]));
        out.push_str(&text[end..]);
        return out;
    }
    // Parts 0..parts exist; add the empty ones up to `index`, then the new one.
    let mut out = String::from(text);
    let missing = if none { index } else { index + 1 - parts };
    out.extend(std::iter::repeat_n(sep, missing));
    out.push_str(&with(""));
    out
}

/// Drops trailing empty repetitions, components and subcomponents: after a
/// patch cleared something, `DOE^` carries nothing `DOE` does not.
fn trim_field(field: &str, d: &Delimiters) -> String {
    let mut out = String::with_capacity(field.len());
    for (r, repeat) in field.split(d.repetition).enumerate() {
        if r > 0 {
            out.push(d.repetition);
        }
        let start = out.len();
        for (c, component) in repeat.split(d.component).enumerate() {
            if c > 0 {
                out.push(d.component);
            }
            out.push_str(component.trim_end_matches(d.subcomponent));
        }
        let kept = out[start..].trim_end_matches(d.component).len();
        out.truncate(start + kept);
    }
    let kept = out.trim_end_matches(d.repetition).len();
    out.truncate(kept);
    out
}

/// Adds a segment after the last one of its name (at the end when there is
/// none). `OBX[3]` with one OBX present adds two, so that the path then
/// exists; `last`, if given, makes the text of the last one added from the
/// empty one (`NTE|`).
fn create_segment(
    message: &Hl7Message,
    name: &str,
    nth: Option<usize>,
    last: Option<&dyn Fn(&str) -> String>,
) -> Result<Splice, String> {
    if name == "MSH" {
        return Err("a message has one MSH segment".into());
    }
    let count = message.count(name);
    let wanted = nth.unwrap_or(count + 1);
    if wanted <= count {
        return Err(format!("segment {name}[{wanted}] already exists"));
    }
    let after = message.segments().enumerate().filter(|(_, s)| s.name() == name).last().map(|(i, _)| i);
    let at = after.and_then(|i| message.segment_range(i)).map_or(message.len(), |range| range.end);
    let empty = format!("{name}{}", message.delimiters().field);
    let mut text = format!("\r{empty}").repeat(wanted - count);
    if let Some(last) = last {
        text.truncate(text.len() - empty.len());
        text.push_str(&last(&empty));
    }
    Ok(Splice { range: at..at, text })
}

fn remove_segment(message: &Hl7Message, name: &str, nth: usize) -> Result<Splice, String> {
    if name == "MSH" {
        return Err("the MSH segment cannot be removed".into());
    }
    let index = message.find(name, nth).ok_or_else(|| format!("segment {name}[{nth}] not found"))?;
    let range = message.segment_range(index).expect("a segment found is there");
    // With the `\r` before it (it is not the first segment: that is MSH).
    Ok(Splice { range: range.start - 1..range.end, text: String::new() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hl7::samples::ORU_R01;
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

    /// Found by the hl7_patch fuzz target: creating `MSH[2]` with a field
    /// set wrote the field into an empty `MSH|` before refusing it.
    #[test]
    fn a_second_msh_is_refused_before_anything_is_written() {
        let (text, errors) = patched(ADT, json!([{"path": "MSH[2].3", "value": "x", "create": true}]));
        assert_eq!(errors, ["a message has one MSH segment"]);
        assert_eq!(text, ADT);
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
