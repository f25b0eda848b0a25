//! What every daemon binary answers besides its own commands: `--version`,
//! `completions SHELL`, its man page (`man`), and a `--help` that gives the
//! unit of every duration and size. (rpc-bench: crates/rpc-bench/tests/cli.rs.)

use integration_tests::run;

use crate::DAEMONS;

#[test]
fn every_daemon_prints_its_version() {
    for daemon in DAEMONS {
        let (status, out, _) = run(daemon, &["--version"], &[]);
        assert!(status.success(), "{daemon} --version");
        assert_eq!(out.trim(), format!("{daemon} {}", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn every_daemon_prints_completions_for_bash_zsh_and_fish() {
    for daemon in DAEMONS {
        let script = |shell: &str| {
            let (status, out, err) = run(daemon, &["completions", shell], &[]);
            assert!(status.success(), "{daemon} completions {shell}: {err}");
            out
        };
        let bash = script("bash");
        assert!(bash.contains(&format!("complete -F _{}", daemon.replace('-', "__"))), "{daemon} bash:\n{bash}");
        assert!(script("zsh").starts_with(&format!("#compdef {daemon}")), "{daemon} zsh");
        assert!(script("fish").contains(&format!("complete -c {daemon}")), "{daemon} fish");
        // The completions know the daemon's own subcommands.
        let first_subcommand = if *daemon == "ralph-server" { "status" } else { "serve" };
        assert!(bash.contains(first_subcommand), "{daemon}'s bash completion lacks {first_subcommand}");
        let (status, _, err) = run(daemon, &["completions", "tcsh"], &[]);
        assert_eq!(status.code(), Some(2), "{daemon} completions tcsh: {err}");
    }
}

#[test]
fn every_daemon_prints_a_man_page_generated_from_its_command_line() {
    for daemon in DAEMONS {
        let (status, page, err) = run(daemon, &["man"], &[]);
        assert!(status.success(), "{daemon} man: {err}");
        assert!(page.contains(&format!(".TH {daemon} 1")), "{daemon}'s page has no title:\n{page}");
        assert!(page.contains(".SH NAME") && page.contains(".SH OPTIONS"), "{daemon}'s page:\n{page}");
        assert!(page.contains("RUST_LOG"), "{daemon}'s page does not name its env variables");
        let dir = tempfile::tempdir().unwrap();
        let (status, _, err) = run(daemon, &["man", "--out-dir", dir.path().to_str().unwrap()], &[]);
        assert!(status.success(), "{daemon} man --out-dir: {err}");
        let pages = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(pages >= 3, "{daemon}: {pages} pages, expected one per subcommand too");
        // `man` is for packagers and `just man`: not in the help listing.
        let (_, help, _) = run(daemon, &["--help"], &[]);
        assert!(!help.lines().any(|l| l.trim_start().starts_with("man ")), "{daemon} --help lists man");
    }
}

/// Options whose value is a duration or a size: their help names the unit.
#[test]
fn help_gives_the_unit_of_every_duration_and_size() {
    let duration = ["timeout", "ttl", "keepalive", "grace", "delay", "interval"];
    let size = ["max-message", "budget", "backlog-bytes"];
    for daemon in DAEMONS {
        let (_, top, _) = run(daemon, &["--help"], &[]);
        let subcommands: Vec<String> = top
            .split("Commands:")
            .nth(1)
            .unwrap_or("")
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|name| *name != "help")
            .map(str::to_owned)
            .collect();
        let helps = std::iter::once(top).chain(subcommands.iter().map(|s| run(daemon, &[s, "--help"], &[]).1));
        for help in helps {
            // An option's block: from its `--name` line to the next blank-separated option.
            for block in help.split("\n      --").skip(1) {
                let name: String = block.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                let text = block.split("\n\n").next().unwrap_or(block).to_lowercase();
                let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphanumeric()).collect();
                let says = |units: &[&str]| words.iter().any(|w| units.contains(w));
                if duration.iter().any(|d| name.contains(d)) {
                    let units = ["seconds", "second", "ms", "milliseconds", "minutes"];
                    assert!(says(&units), "{daemon} --{name}: no unit in its help:\n{text}");
                }
                if size.iter().any(|s| name.contains(s)) {
                    assert!(says(&["bytes"]), "{daemon} --{name}: no unit in its help:\n{text}");
                }
            }
        }
    }
}
