//! The tree reads as its architecture, and stays that way: no source file of
//! a crate imports a file that imports it back (state at the bottom, methods
//! above it, wiring on top), and no file grows past what a reader takes in
//! (700 lines in the engine, 500 in a daemon).
//!
//! Imports are read from the text: `use` items and inline paths that start
//! with `crate::`, `super::` or `self::`, resolved to the file of the longest
//! module path they name (a parent naming its own children, `mod x; use
//! x::Y;`, is the module tree itself, not an import). A module's `mod.rs` (or
//! `lib.rs`) that re-exports its children is imported by whoever names an
//! item through it, so siblings import each other directly, never through
//! their parent. Inline test modules are left out: `use super::*` in a test
//! reads its own file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every crate's `src/` under `bins/` and `crates/`.
fn crates() -> Vec<PathBuf> {
    let mut found = Vec::new();
    for group in ["bins", "crates"] {
        for entry in std::fs::read_dir(workspace().join(group)).unwrap().flatten() {
            let src = entry.path().join("src");
            if src.is_dir() {
                found.push(src);
            }
        }
    }
    found.sort();
    found
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The module path of a file under `src` (`peer/mod.rs` and `peer.rs` are
/// `["peer"]`; `lib.rs` and `main.rs` the root, `[]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
}

/// The text without comments, string and character literals (which may hold
/// anything that looks like a path).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i = text[i + 2..].find("*/").map_or(b.len(), |end| i + 2 + end + 2);
        } else if b[i] == b'r' && (i == 0 || !is_ident(b[i - 1])) && raw_string_hashes(&b[i + 1..]).is_some() {
            let hashes = raw_string_hashes(&b[i + 1..]).unwrap();
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            i = text[start..].find(&close).map_or(b.len(), |end| start + end + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && char_literal_len(&b[i..]).is_some() {
            i += char_literal_len(&b[i..]).unwrap();
            out.push_str("' '");
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `#*"` after an `r`: the number of hashes.
fn raw_string_hashes(b: &[u8]) -> Option<usize> {
    let hashes = b.iter().take_while(|&&c| c == b'#').count();
    (b.get(hashes) == Some(&b'"')).then_some(hashes)
}

/// `'x'`, `'\n'`, `'\''`, `'\u{..}'`, `'é'`; not a lifetime (`'a`).
fn char_literal_len(b: &[u8]) -> Option<usize> {
    if b.get(1) == Some(&b'\\') {
        let end = b[2..].iter().position(|&c| c == b'\'')?;
        return (end < 10).then_some(end + 3);
    }
    let width = std::str::from_utf8(&b[1..b.len().min(5)])
        .ok()
        .or_else(|| std::str::from_utf8(&b[1..2]).ok())?
        .chars()
        .next()?
        .len_utf8();
    (b.get(1 + width) == Some(&b'\'')).then_some(width + 2)
}

/// The code without its inline `mod tests { ... }` (a test module reads its
/// own file's items with `use super::*`: that is not one file importing another).
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    while let Some(start) = out.find("mod tests {") {
        let open = start + "mod tests ".len();
        let mut depth = 0;
        let mut end = out.len();
        for (i, ch) in out[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(start..end, "");
    }
    out
}

/// Every path in `code` that starts with `crate::`, `super::` or `self::`,
/// braces expanded (`crate::a::{b, c::d}` gives `a::b` and `a::c::d`), as
/// absolute module paths seen from `module`.
fn imported_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let at_word = i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b':');
        let start = ["crate::", "super::", "self::"].iter().find(|p| code[i..].starts_with(**p));
        match start {
            Some(_) if at_word => {
                let end = path_end(code, i);
                for segments in expand(&code[i..end]) {
                    paths.push(absolute(&segments, module));
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    paths
}

/// Where a path starting at `i` ends: identifiers, `::`, and balanced braces.
fn path_end(code: &str, i: usize) -> usize {
    let b = code.as_bytes();
    let mut j = i;
    let mut depth = 0;
    while j < b.len() {
        match b[j] {
            b'{' => depth += 1,
            b'}' if depth > 0 => depth -= 1,
            b'}' => break,
            c if is_ident(c) || c == b':' => {}
            b',' | b' ' | b'\n' | b'*' if depth > 0 => {}
            _ if depth > 0 => {}
            _ => break,
        }
        j += 1;
    }
    j
}

/// `a::{b, c::{d, e}}` → `[a, b]`, `[a, c, d]`, `[a, c, e]`.
fn expand(path: &str) -> Vec<Vec<String>> {
    let path = path.trim();
    let Some(open) = path.find('{') else {
        return vec![path.split("::").filter(|s| !s.is_empty()).map(|s| s.trim().to_owned()).collect()];
    };
    let head: Vec<String> =
        path[..open].split("::").filter(|s| !s.trim().is_empty()).map(|s| s.trim().to_owned()).collect();
    let body = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
    let mut parts = Vec::new();
    let (mut depth, mut current) = (0, String::new());
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    parts.push(current);
    let mut out = Vec::new();
    for part in parts.iter().filter(|p| !p.trim().is_empty()) {
        for tail in expand(part) {
            out.push(head.iter().cloned().chain(tail).collect());
        }
    }
    out
}

fn absolute(segments: &[String], module: &[String]) -> Vec<String> {
    let mut base: Vec<String> = Vec::new();
    let mut rest = segments;
    match segments.first().map(String::as_str) {
        Some("crate") => rest = &segments[1..],
        Some("self") => {
            base = module.to_vec();
            rest = &segments[1..];
        }
        Some("super") => {
            base = module.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => {}
    }
    // `self` inside braces (`a::{self, b}`) names `a` itself.
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    base
}

/// The file of the longest module path `path` starts with.
fn resolve<'a>(path: &[String], files: &'a BTreeMap<Vec<String>, PathBuf>) -> Option<&'a PathBuf> {
    (0..=path.len()).rev().find_map(|n| files.get(&path[..n]))
}

/// Each crate's files that import each other in a circle.
fn circles() -> Vec<String> {
    let mut found = Vec::new();
    for src in crates() {
        let mut all = Vec::new();
        rust_files(&src, &mut all);
        let has_lib = src.join("lib.rs").exists();
        let mut files: BTreeMap<Vec<String>, PathBuf> = BTreeMap::new();
        for file in &all {
            // With a lib.rs, main.rs is another crate that only uses the library.
            if has_lib && file.ends_with("main.rs") && file.parent() == Some(src.as_path()) {
                continue;
            }
            files.insert(module_of(&src, file), file.clone());
        }
        let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for (module, file) in &files {
            let code = without_test_modules(&code_only(&std::fs::read_to_string(file).unwrap()));
            let targets = edges.entry(file.clone()).or_default();
            for path in imported_paths(&code, module) {
                if let Some(target) = resolve(&path, &files).filter(|t| *t != file) {
                    targets.insert(target.clone());
                }
            }
        }
        for component in strongly_connected(&edges) {
            let names: Vec<String> =
                component.iter().map(|f| f.strip_prefix(&src).unwrap().display().to_string()).collect();
            let krate = src.parent().unwrap().strip_prefix(workspace()).unwrap().display().to_string();
            found.push(format!("{krate}: {}", names.join(" <-> ")));
        }
    }
    found
}

/// Tarjan's strongly connected components with more than one file.
fn strongly_connected(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let Some((w, _)) = s.edges.get_key_value(w) else { continue };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.found
}

#[test]
fn no_source_file_imports_a_file_that_imports_it_back() {
    let circles = circles();
    assert!(circles.is_empty(), "files that import each other in a circle:\n{}", circles.join("\n"));
}

#[test]
fn no_source_file_is_longer_than_a_reader_takes_in() {
    let mut over = Vec::new();
    for src in crates() {
        let limit = if src.starts_with(workspace().join("bins")) {
            500
        } else if src.ends_with("rpc-core/src") {
            700
        } else {
            continue;
        };
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let lines = std::fs::read_to_string(&file).unwrap().lines().count();
            if lines > limit {
                over.push(format!(
                    "{} ({lines} lines, limit {limit})",
                    file.strip_prefix(workspace()).unwrap().display()
                ));
            }
        }
    }
    assert!(over.is_empty(), "files past the limit:\n{}", over.join("\n"));
}

#[test]
fn the_import_reader_reads_use_items_and_inline_paths_and_skips_comments_and_strings() {
    let module = vec!["a".to_owned()];
    let paths = imported_paths(
        &code_only("use crate::b::{C, d::{E, self}};\n// crate::x::y\nlet s = \"crate::z\"; super::f();"),
        &module,
    );
    assert_eq!(paths, [vec!["b", "C"], vec!["b", "d", "E"], vec!["b", "d"], vec!["f"]]);
    let code = without_test_modules(
        "fn a() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { {} }\n}\nfn b() {}",
    );
    assert_eq!(code, "fn a() {}\n#[cfg(test)]\n\nfn b() {}");
}
