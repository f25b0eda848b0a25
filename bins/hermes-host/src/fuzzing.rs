//! Entry points for the fuzz targets in `fuzz/` (`hl7_message`, `hl7_tree`,
//! `hl7_patch`), kept here so that plain tests run them too. Each one feeds
//! untrusted text to the HL7 code and asserts what must hold beyond "no
//! panic": a message prints back as read and reads back the same, its tree
//! in every format reads back to the same tree, and a patch either leaves
//! the message as it was or makes one that reads back with the value set.

use serde_json::Value;

use crate::hl7::patch::{self, Patch};
use crate::hl7::tree::{self, Format};
use crate::hl7::{Field, Hl7Message};

/// The message `hl7_patch` edits when its input names none.
const SAMPLE: &str =
    "MSH|^~\\&|APP|FAC|||20240101||ADT^A01|1|P|2.5\rPID|1||12345~67890||DOE^JOHN^&X\rOBX|1|TX|A&B||x\\T\\y~~z";

/// HL7 text, as an extension's `editor/setMessage` or a file sends it.
pub fn hl7_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(message) = Hl7Message::parse(text) else { return };
    assert_eq!(reads_back(&message), message, "{text:?} re-parses to another structure");
}

/// A tree (`editor/setMessage` in json, yaml or toml; the first byte picks).
pub fn hl7_tree(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else { return };
    let format = [Format::Json, Format::Yaml, Format::Toml][usize::from(pick) % 3];
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let Ok(message) = tree::read(text, format) else { return };
    reads_back(&message);
}

/// A message, a NUL byte, then one patch a line (`editor/patchMessage`):
/// `PATH=VALUE` sets, `PATH` clears, `-PATH` removes, `+PATH[=VALUE]` creates.
/// An empty message part means [`SAMPLE`].
pub fn hl7_patch(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (message_text, patches) = text.split_once('\0').unwrap_or(("", text));
    let message_text = if message_text.is_empty() { SAMPLE } else { message_text };
    let Ok(mut message) = Hl7Message::parse(message_text) else { return };
    for line in patches.lines() {
        let (create, remove, rest) = match line.as_bytes().first() {
            Some(b'+') => (true, false, &line[1..]),
            Some(b'-') => (false, true, &line[1..]),
            _ => (false, false, line),
        };
        let (path, value) = match rest.split_once('=') {
            Some((path, value)) => (path, Some(value)),
            None => (rest, None),
        };
        let patch = Patch {
            path: path.to_owned(),
            value: value.map(|v| Value::String(v.to_owned())),
            remove: remove.then_some(true),
            create: create.then_some(true),
        };
        if let Ok(query) = patch::parse_path(path) {
            let canonical = query.to_string();
            let again = patch::parse_path(&canonical).expect("a path's canonical form is a path");
            assert_eq!(again.to_string(), canonical);
        }
        let before = message.clone();
        match patch::apply(&mut message, &patch) {
            Err(_) => assert_eq!(message, before, "a refused patch changed the message: {line:?}"),
            Ok(()) => {
                let back = reads_back(&message);
                // A segment path (`+NTE`) only creates or removes; a value is for a field path.
                let sets_a_field = patch::parse_path(path).is_ok_and(|q| q.field.is_some());
                if let Some(value) = value.filter(|v| !v.is_empty() && !remove && sets_a_field) {
                    let expected = message.delimiters.escape_leaf(value);
                    assert_eq!(located(&back, path).as_deref(), Some(expected.as_str()), "{line:?}");
                }
            }
        }
    }
}

/// What every message the host holds must satisfy: its text reads back to a
/// message that prints the same, and its tree in every format reads back to
/// a message with the same leaves at the same places (trailing empty
/// fields and components, which carry nothing, may go; a stray escape
/// character comes back escaped), whose tree is then the same. Returns the message read back from its text.
fn reads_back(message: &Hl7Message) -> Hl7Message {
    let text = message.to_string();
    let back = Hl7Message::parse(&text).unwrap_or_else(|e| panic!("{text:?} does not read back: {e}"));
    assert_eq!(back.to_string(), text);
    let leaves = leaves(message);
    assert_eq!(self::leaves(&back), leaves, "{text:?}");
    // The model's own invariant: a leaf holds no delimiter but the escape
    // character (MSH.1 and MSH.2, the delimiters themselves, aside).
    let d = message.delimiters;
    for &(n, name, f, _, _, _, leaf) in &leaves {
        let plain = name == "MSH" && f < 2;
        assert!(plain || !leaf.contains([d.field, d.component, d.repetition, d.subcomponent]), "{n}: {leaf:?}");
    }
    // A tree escapes a stray escape character (`\` comes back `\E\`);
    // MSH.1 and MSH.2 are the delimiters themselves, not leaves.
    let escaped: Vec<_> = leaves
        .iter()
        .map(|&(n, name, f, r, c, s, leaf)| {
            let leaf = if name == "MSH" && f < 2 { leaf.to_owned() } else { message.delimiters.escape_leaf(leaf) };
            (n, name, f, r, c, s, leaf)
        })
        .collect();
    for format in [Format::Json, Format::Yaml, Format::Toml] {
        let rendered = tree::render(message, format).unwrap_or_else(|e| panic!("{format:?} of {text:?}: {e}"));
        let again =
            tree::read(&rendered, format).unwrap_or_else(|e| panic!("{format:?} of {text:?} does not read: {e}"));
        let got: Vec<_> =
            self::leaves(&again).into_iter().map(|l| (l.0, l.1, l.2, l.3, l.4, l.5, l.6.to_owned())).collect();
        assert_eq!(got, escaped, "{format:?} of {text:?}:\n{rendered}");
        let rendered_again = tree::render(&again, format).expect("every message renders");
        let twice = tree::read(&rendered_again, format).expect("a tree read back reads again");
        assert_eq!(tree::render(&twice, format).as_ref(), Ok(&rendered_again), "{format:?} of {text:?}");
    }
    back
}

/// Every non-empty leaf with its place: segment (index and name), field,
/// repetition, component, subcomponent.
fn leaves(message: &Hl7Message) -> Vec<(usize, &str, usize, usize, usize, usize, &str)> {
    let mut out = Vec::new();
    for (n, segment) in message.segments.iter().enumerate() {
        for (f, field) in segment.fields.iter().enumerate() {
            for (r, repeat) in field.repeats.iter().enumerate() {
                for (c, component) in repeat.components.iter().enumerate() {
                    for (s, leaf) in component.subcomponents.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
                        out.push((n, segment.name.as_str(), f, r, c, s, leaf.as_str()));
                    }
                }
            }
        }
    }
    out
}

/// The leaf a set patch at `path` wrote, as HL7 text.
fn located(message: &Hl7Message, path: &str) -> Option<String> {
    let query = patch::parse_path(path).ok()?;
    let segment = &message.segments[message.find(&query.segment, query.segment_index.unwrap_or(1))?];
    let field: &Field = segment.fields.get(query.field? - 1)?;
    if query.repeat.is_none() && query.component.is_none() {
        return field.as_leaf().map(str::to_owned);
    }
    let repeat = field.repeats.get(query.repeat.unwrap_or(1) - 1)?;
    let component = repeat.components.get(query.component.unwrap_or(1) - 1)?;
    match query.subcomponent {
        None if component.subcomponents.len() == 1 => component.subcomponents.first().cloned(),
        None => None,
        Some(s) => component.subcomponents.get(s - 1).cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed seeds of each target (fuzz/seeds/<target>/) through
    /// their entry point: a cheap stand-in for the fuzzer in every test run.
    #[test]
    fn the_seed_corpora_pass() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
        for (target, run) in
            [("hl7_message", hl7_message as fn(&[u8])), ("hl7_tree", hl7_tree), ("hl7_patch", hl7_patch)]
        {
            let dir = seeds.join(target);
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                run(&std::fs::read(entry.unwrap().path()).unwrap());
            }
        }
    }

    #[test]
    fn the_sample_holds_what_the_targets_assert() {
        hl7_message(SAMPLE.as_bytes());
        hl7_patch(b"\0PID.5.1=TEST\nPID.3[2].1=B\n+NTE[2].3=note\n-OBX\nMSH.9.2=A08\nPID.5.2");
    }
}
