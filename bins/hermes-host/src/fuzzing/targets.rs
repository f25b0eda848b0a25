//! The three entry points (`hl7_message`, `hl7_tree`, `hl7_patch`) and what
//! each asserts of what the HL7 code makes of its input.

use serde_json::Value;

use super::reference;
use crate::hl7::Hl7Message;
use crate::hl7::owned::{Component, Field, Repeat, Segment};
use crate::hl7::patch::{self, Patch};
use crate::hl7::tree::{self, Format};

/// The message `hl7_patch` edits when its input names none.
const SAMPLE: &str =
    "MSH|^~\\&|APP|FAC|||20240101||ADT^A01|1|P|2.5\rPID|1||12345~67890||DOE^JOHN^&X\rOBX|1|TX|A&B||x\\T\\y~~z";

/// HL7 text, as an extension's `editor/setMessage` or a file sends it.
pub fn hl7_message(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parsed = Hl7Message::parse(text);
    match (&parsed, reference::parse(text)) {
        (Ok(message), Ok(segments)) => {
            assert_eq!(owned(message), segments, "{text:?} is not split as hl7-parser splits it");
            let json = tree::render(message, Format::Json).expect("every message renders");
            assert_eq!(json, reference::json(&segments), "{text:?}: another JSON tree");
            let toml = tree::render(message, Format::Toml).expect("every message renders");
            assert_eq!(Ok(toml), tree::toml_in_one_piece(message), "{text:?}: another TOML tree");
        }
        (Err(ours), Err(theirs)) => assert_eq!(ours, &theirs, "{text:?} is refused for another reason"),
        (ours, theirs) => panic!("{text:?}: the host reads {ours:?}, hl7-parser {theirs:?}"),
    }
    let Ok(message) = parsed else { return };
    assert_eq!(reads_back(&message), message, "{text:?} re-parses to another structure");
}

/// The message's segments as owned parts, to compare with [`reference::parse`].
fn owned(message: &Hl7Message) -> Vec<Segment> {
    message
        .segments()
        .map(|segment| Segment {
            name: segment.name().to_owned(),
            fields: segment
                .fields()
                .map(|field| Field {
                    repeats: field
                        .repeats()
                        .map(|repeat| Repeat {
                            components: repeat
                                .components()
                                .map(|c| Component { subcomponents: c.subcomponents().map(str::to_owned).collect() })
                                .collect(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
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
    let d = message.delimiters();
    let mut segments = reference::parse(message_text).expect("hl7-parser reads what the host reads");
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
        let applied = patch::apply(&mut message, &patch);
        // The host patched owned segments before it spliced text: the same
        // refusals, the same text.
        assert_eq!(applied, reference::apply(&mut segments, &d, &patch), "{line:?}");
        assert_eq!(message.as_str(), reference::print(&segments, &d), "{line:?} on {:?}", before.as_str());
        match applied {
            Err(_) => assert_eq!(message, before, "a refused patch changed the message: {line:?}"),
            Ok(()) => {
                let back = reads_back(&message);
                // What the message keeps about its text, kept up to date by the splice.
                assert_eq!((message.segment_count(), message.elements()), (back.segment_count(), back.elements()));
                // A segment path (`+NTE`) only creates or removes; a value is for a field path.
                let sets_a_field = patch::parse_path(path).is_ok_and(|q| q.field.is_some());
                if let Some(value) = value.filter(|v| !v.is_empty() && !remove && sets_a_field) {
                    let expected = message.delimiters().escape_leaf(value);
                    assert_eq!(located(&back, path).as_deref(), Some(expected.as_str()), "{line:?}");
                }
            }
        }
    }
}

/// What every message the host holds must satisfy: its text reads back to a
/// message that prints the same, and its tree in every format reads back to
/// a message with the same leaves at the same places, escape characters as
/// they were (trailing empty fields and components, which carry nothing, may
/// go), whose tree is then the same. Returns the message read back from its text.
fn reads_back(message: &Hl7Message) -> Hl7Message {
    let text = message.to_string();
    let back = Hl7Message::parse(&text).unwrap_or_else(|e| panic!("{text:?} does not read back: {e}"));
    assert_eq!(back.to_string(), text);
    let leaves = leaves(message);
    assert_eq!(self::leaves(&back), leaves, "{text:?}");
    // The model's own invariant: a leaf holds no delimiter but the escape
    // character (MSH.1 and MSH.2, the delimiters themselves, aside).
    let d = message.delimiters();
    for &(n, name, f, _, _, _, leaf) in &leaves {
        let plain = name == "MSH" && f < 2;
        assert!(plain || !leaf.contains([d.field, d.component, d.repetition, d.subcomponent]), "{n}: {leaf:?}");
    }
    // Every leaf comes back as it was, escape characters and all.
    let expected: Vec<_> =
        leaves.iter().map(|&(n, name, f, r, c, s, leaf)| (n, name, f, r, c, s, leaf.to_owned())).collect();
    for format in [Format::Json, Format::Yaml, Format::Toml] {
        let rendered = tree::render(message, format).unwrap_or_else(|e| panic!("{format:?} of {text:?}: {e}"));
        let again =
            tree::read(&rendered, format).unwrap_or_else(|e| panic!("{format:?} of {text:?} does not read: {e}"));
        let got: Vec<_> =
            self::leaves(&again).into_iter().map(|l| (l.0, l.1, l.2, l.3, l.4, l.5, l.6.to_owned())).collect();
        assert_eq!(got, expected, "{format:?} of {text:?}:\n{rendered}");
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
    for (n, segment) in message.segments().enumerate() {
        for (f, field) in segment.fields().enumerate() {
            for (r, repeat) in field.repeats().enumerate() {
                for (c, component) in repeat.components().enumerate() {
                    for (s, leaf) in component.subcomponents().enumerate().filter(|(_, l)| !l.is_empty()) {
                        out.push((n, segment.name(), f, r, c, s, leaf));
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
    let segment = message.segment(message.find(&query.segment, query.segment_index.unwrap_or(1))?)?;
    let field = segment.field(query.field?)?;
    if query.repeat.is_none() && query.component.is_none() {
        return field.as_leaf().map(str::to_owned);
    }
    let repeat = field.repeats().nth(query.repeat.unwrap_or(1) - 1)?;
    let component = repeat.components().nth(query.component.unwrap_or(1) - 1)?;
    match query.subcomponent {
        None if component.is_leaf() => Some(component.as_str().to_owned()),
        None => None,
        Some(s) => component.subcomponents().nth(s - 1).map(str::to_owned),
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

    /// Lines that are no segment (a name alone, a blank line, a short
    /// name) are refused by the host and the reference for the same reason.
    #[test]
    fn lines_that_are_no_segment_are_refused_alike() {
        for text in
            ["MSH|^~\\&|A\rPID\rPV1|1", "MSH|^~\\&|A\rPID", "MSH|^~\\&\r\rPID|1", "MSH|^~\\&\rPI|1", "MSH|^~\\&X"]
        {
            hl7_message(text.as_bytes());
        }
    }

    /// A small deterministic generator (xorshift), so that every test run
    /// tries the same inputs.
    struct Pick(u64);

    impl Pick {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn text(&mut self, pieces: &[&str], most: usize) -> String {
            (0..self.below(most)).map(|_| pieces[self.below(pieces.len())]).collect()
        }
    }

    /// Thousands of odd messages and patches, built from the pieces the
    /// grammar turns on: the host reads, refuses and patches them exactly
    /// as hl7-parser's tree of owned parts did (the checks are in the targets).
    #[test]
    fn odd_messages_and_patches_behave_as_they_did_on_owned_parts() {
        let pieces = [
            "MSH",
            "|",
            "^",
            "~",
            "\\",
            "&",
            "\r",
            "\n",
            "\r\n",
            "PID",
            "NTE",
            "A",
            "1",
            "ä",
            "x",
            "MSH|^~\\&",
            "#",
            " ",
            "ote",
            "|^~\\&",
            "\\T\\",
            // How TOML writes a string turns on quotes, tabs and control characters.
            "\"",
            "'",
            "'''",
            "\"\"\"",
            "\t",
            "\u{1}",
            "é",
        ];
        let paths = [
            "PID",
            "PID.1",
            "PID.3",
            "PID.3[2]",
            "PID.3[2].1",
            "PID.5.1",
            "PID.5.2.3",
            "NTE[2].3",
            "NTE",
            "MSH.3",
            "MSH.9.2",
            "OBX[3]",
            "ZZZ.4[3].2.2",
            "MSH",
            "MSH.2",
            "MSH[2].3",
            "PID.1.1.1",
        ];
        let values = ["", "=v", "=a|b^c&d~e", "=", "=\\X0D\\", "=ü"];
        // HL7_ODD_CASES=N tries more (or other) cases.
        let cases = std::env::var("HL7_ODD_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(3_000);
        let mut pick = Pick(0x9e37_79b9_7f4a_7c15 ^ cases);
        for _ in 0..cases {
            let start = ["MSH|^~\\&", "MSH|^~\\&|", "MSH", ""][pick.below(4)];
            let text = format!("{start}{}", pick.text(&pieces, 30));
            hl7_message(text.as_bytes());
            let patches: Vec<String> = (0..pick.below(6))
                .map(|_| {
                    let sign = ["", "+", "-"][pick.below(3)];
                    format!("{sign}{}{}", paths[pick.below(paths.len())], values[pick.below(values.len())])
                })
                .collect();
            let message = if pick.below(3) == 0 { String::new() } else { text };
            hl7_patch(format!("{message}\0{}", patches.join("\n")).as_bytes());
        }
    }

    #[test]
    fn the_sample_holds_what_the_targets_assert() {
        hl7_message(SAMPLE.as_bytes());
        hl7_patch(b"\0PID.5.1=TEST\nPID.3[2].1=B\n+NTE[2].3=note\n-OBX\nMSH.9.2=A08\nPID.5.2");
    }
}
