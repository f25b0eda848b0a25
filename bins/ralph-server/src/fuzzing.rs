//! Entry points for the fuzz targets in `fuzz/` (`prd`, `agent_output`), kept
//! here so that plain tests run them too. Each feeds what the agent writes to
//! the code that reads it and asserts what must hold beyond "no panic".

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::output::{self, LineSplitter, OutputWatch, Piece};
use crate::prd::Prd;

/// The bytes of a `prd.json`: a PRD that reads picks a story the way the
/// loop says (not passing, lowest priority, first on a tie), and what it
/// keeps serialises and reads back the same.
pub fn prd(data: &[u8]) {
    let Ok(prd) = Prd::parse(data) else { return };
    let next = prd.next_story();
    assert_eq!(prd.all_pass(), next.is_none());
    if let Some(story) = next {
        assert!(!story.passes);
        let rank = |s: &crate::prd::Story| (s.priority.is_none(), s.priority);
        let first = prd.user_stories.iter().position(|s| std::ptr::eq(s, story)).unwrap();
        for (i, other) in prd.user_stories.iter().enumerate().filter(|(_, s)| !s.passes) {
            assert!(rank(other) > rank(story) || (rank(other) == rank(story) && i >= first), "{:?}", other.id);
        }
    }
    let json = serde_json::to_value(&prd).expect("a PRD serialises");
    let again = Prd::parse(json.to_string().as_bytes()).unwrap_or_else(|e| panic!("{json} does not read back: {e}"));
    assert!(same(&serde_json::to_value(&again).unwrap(), &json), "{json} reads back changed");
}

/// Equal JSON, except that a float may move by an ulp: serde_json's default
/// float parsing is not correctly rounded (its `float_roundtrip` feature is
/// off), so `-15101912594050682416` reads as one double and its printed form
/// as the next.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            x == y || (x - y).abs() <= x.abs().max(y.abs()) * 4.0 * f64::EPSILON
        }
        (Value::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b)),
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The agent's terminal output. The first byte says how it is cut into reads
/// (1-16 bytes) and whether partial lines are published between them (as a
/// quiet terminal does). Lines come out as the input's lines, each published
/// once (partials, then the rest), and the plain text of a line has no
/// escape sequence or carriage return left.
pub fn agent_output(data: &[u8]) {
    let Some((&how, input)) = data.split_first() else { return };
    let read_size = usize::from(how % 16) + 1;
    let flush_partials = how & 0x80 != 0;
    let mut splitter = LineSplitter::default();
    let mut pieces = Vec::new();
    for read in input.chunks(read_size) {
        splitter.feed(read, &mut pieces);
        if flush_partials {
            pieces.extend(splitter.flush_partial());
        }
    }
    pieces.extend(splitter.finish());

    // Compiled once: a regex a run would cost more than the rest of it.
    static PATTERNS: LazyLock<(Regex, Regex)> = LazyLock::new(|| {
        let failure = Regex::new(output::DEFAULT_FAILURE_PATTERN).expect("the default pattern compiles");
        (output::completion_marker(), failure)
    });
    let (marker, failure) = PATTERNS.clone();
    let mut watch = OutputWatch::new("Do the work.\nReply <promise>COMPLETE</promise> when done.", marker, failure);
    let mut wholes = Vec::new();
    let mut published = String::new();
    for piece in pieces {
        match piece {
            Piece::Partial(text) => published.push_str(&text),
            Piece::Line { text, whole } | Piece::Cut { text, whole } => {
                published.push_str(&text);
                // A partial may have shown the carriage return that then ended the line.
                if std::str::from_utf8(input).is_ok() && published.strip_suffix('\r') != Some(whole.as_str()) {
                    assert_eq!(published, whole, "a line's pieces are not the line");
                }
                let plain = output::plain(&whole);
                assert!(!plain.contains(['\x1b', '\r']), "{whole:?} -> {plain:?}");
                watch.line(&plain, false);
                wholes.push(whole);
                published.clear();
            }
        }
    }
    if input.len() < output::LONGEST_LINE {
        let mut expected: Vec<String> = input
            .split(|&b| b == b'\n')
            .map(|line| String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned())
            .collect();
        if input.rsplit(|&b| b == b'\n').next().is_some_and(<[u8]>::is_empty) {
            expected.pop();
        }
        assert_eq!(wholes, expected);
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
        for (target, run) in [("prd", prd as fn(&[u8])), ("agent_output", agent_output)] {
            let dir = seeds.join(target);
            let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                run(&std::fs::read(entry.unwrap().path()).unwrap());
            }
        }
    }
}
