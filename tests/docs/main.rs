//! The repository stands alone: no file in it points at a file outside it,
//! every relative link of the README and the docs pages leads somewhere, and
//! each daemon's docs page documents every setting its `--help` lists.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::bin_path;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Names of the project's own planning documents, which live outside the
/// repository. Built from pieces so that this file does not match itself.
fn outside_references() -> Vec<String> {
    let md = ".md";
    vec![
        format!("performance{md}"),
        format!("rpc-core{md}"),
        format!("operations{md}"),
        ["shared", "specs"].join("/"),
        ["..", "shared", ""].join("/"),
        ["", "work", "shared"].join("/"),
        // The protocol documents' folder, not the fuzz targets' fuzz/seeds/.
        ["..", "seeds", ""].join("/"),
        ["shared", "seeds"].join("/"),
    ]
}

/// Every text file of the repository, minus build output and dependencies.
fn repository_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let skipped = [".git", "target", "node_modules", "corpus", "artifacts"];
            if !skipped.contains(&name.as_str()) && !name.starts_with("target") {
                repository_files(&path, files);
            }
        } else if entry.metadata().is_ok_and(|m| m.len() < 2 * 1024 * 1024) {
            files.push(path);
        }
    }
}

#[test]
fn no_file_points_outside_the_repository() {
    let mut files = Vec::new();
    repository_files(&root(), &mut files);
    assert!(files.len() > 50, "the walk found only {} files under {}", files.len(), root().display());
    let patterns = outside_references();
    let mut found = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            for pattern in &patterns {
                if line.contains(pattern.as_str()) {
                    found.push(format!("{}:{}: {pattern}", file.strip_prefix(root()).unwrap().display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "references to files outside the repository:\n{}", found.join("\n"));
}

#[test]
fn every_relative_link_of_the_readme_and_the_docs_resolves() {
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "md") {
            pages.push(entry.path());
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (_, rest) in text.match_indices("](").map(|(i, _)| ((), &text[i + 2..])) {
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap();
            if !page.parent().unwrap().join(path).exists() {
                broken.push(format!("{}: {target}", page.strip_prefix(root()).unwrap().display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

/// The env variables `BIN serve --help` lists.
fn settings_of(bin: &str) -> Vec<String> {
    let out = Command::new(bin_path(bin)).args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success(), "{bin} serve --help failed");
    let help = String::from_utf8(out.stdout).unwrap();
    let patterns = outside_references();
    assert!(!patterns.iter().any(|p| help.contains(p.as_str())), "{bin} --help points outside the repository");
    help.split("[env: ")
        .skip(1)
        .map(|rest| rest.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect())
        .collect()
}

#[test]
fn each_docs_page_documents_every_setting_of_its_daemon() {
    for bin in ["supex-bridge", "btcp-broker"] {
        let page = std::fs::read_to_string(root().join("docs").join(format!("{bin}.md"))).unwrap();
        let settings = settings_of(bin);
        assert!(settings.len() > 10, "{bin}: {settings:?}");
        for setting in settings {
            assert!(page.contains(&format!("`{setting}`")), "docs/{bin}.md does not document {setting}");
        }
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        assert!(readme.contains(&format!("](docs/{bin}.md)")), "the README does not link docs/{bin}.md");
    }
}
