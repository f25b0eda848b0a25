//! rpc-bench follows the conventions of every binary in the workspace:
//! `--version`, `completions SHELL`, a man page generated from its command line.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rpc-bench");

fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(out.status.success(), "rpc-bench {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn version_completions_and_man_page() {
    assert_eq!(stdout_of(&["--version"]).trim(), format!("rpc-bench {}", env!("CARGO_PKG_VERSION")));
    assert!(stdout_of(&["completions", "bash"]).contains("complete -F _rpc__bench"));
    assert!(stdout_of(&["completions", "zsh"]).starts_with("#compdef rpc-bench"));
    assert!(stdout_of(&["completions", "fish"]).contains("complete -c rpc-bench"));
    let page = stdout_of(&["man"]);
    assert!(page.contains(".TH rpc-bench 1") && page.contains("suite"), "{page}");
}
