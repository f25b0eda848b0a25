//! One daemon built alone resolves the same features as the four built
//! together (`scripts/run-all`, `scripts/install`), so `cargo run --release -p
//! DAEMON` after run-all rebuilds nothing. `crates/workspace-hack` makes it
//! so; this test says which crate to add there when a dependency change
//! breaks it.

use std::collections::BTreeSet;
use std::process::Command;

use super::{DAEMONS, repo};

/// Every package in the build of `packages`, with its features: one
/// `name version [features]` line each (a crate built twice with different
/// features gives two lines).
fn resolved(packages: &[&str]) -> BTreeSet<String> {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.current_dir(repo()).args(["tree", "--offline", "--edges", "normal,build", "--prefix", "none", "--no-dedupe"]);
    cargo.args(["--format", "{p} [{f}]"]);
    for package in packages {
        cargo.args(["--package", package]);
    }
    let out = cargo.output().expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree {packages:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(without_path).collect()
}

/// `mcp-front v0.1.0 (/work/crates/mcp-front) [http]` → `mcp-front v0.1.0 [http]`:
/// a workspace member's path differs between checkouts, not its features.
fn without_path(line: &str) -> String {
    match (line.find(" ("), line.rfind(") [")) {
        (Some(start), Some(end)) => format!("{}{}", &line[..start], &line[end + 1..]),
        _ => line.to_owned(),
    }
}

#[test]
fn one_daemon_alone_builds_what_the_four_together_build() {
    let together = resolved(DAEMONS);
    for daemon in DAEMONS {
        let alone = resolved(&[daemon]);
        let different: Vec<&String> = alone.difference(&together).collect();
        assert!(
            different.is_empty(),
            "`cargo build -p {daemon}` resolves features the four together do not, so one rebuilds what the other \
             built; add the features of the four together to crates/workspace-hack/Cargo.toml:\n  alone: {different:?}\n  \
             together: {:?}",
            together
                .iter()
                .filter(|t| different.iter().any(|d| d.split(' ').take(2).eq(t.split(' ').take(2))))
                .collect::<Vec<_>>()
        );
    }
}
