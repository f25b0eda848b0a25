//! What every daemon binary answers besides its own commands: `--version`,
//! `completions SHELL`, its man page (`man`), and a `--help` that gives the
//! unit of every duration and size. (rpc-bench: crates/rpc-bench/tests/cli.rs.)

use integration_tests::run;

use crate::{DAEMONS, helps};

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
        for help in helps(daemon, &[]) {
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

/// One kind of setting, one rule, in every daemon (`rpc_core::config`): the
/// same spelling means the same thing, and a bad one is refused in the same
/// words. Each row is a daemon's command, a setting of the kind, and another
/// setting made bad on purpose, one checked after the command line is parsed:
/// when the value under test is accepted, the daemon stops at the other one
/// (exit 2 naming it), so a value is seen to be accepted without starting
/// anything.
#[test]
fn the_same_spelling_means_the_same_thing_in_every_daemon() {
    struct Setting {
        daemon: &'static str,
        args: &'static [&'static str],
        var: &'static str,
        /// A setting made bad, checked after parsing: it stops the daemon
        /// once `var` parsed.
        other: (&'static str, &'static str),
    }
    let row = |daemon, args, var, other| Setting { daemon, args, var, other };
    let ralph: &[&str] = &["run", "/nonexistent/task"];
    let supex_other = ("SUPEX_PROJECT_ROOT", "/nonexistent/project");
    let btcp_other = ("BTCP_HOST", "0.0.0.0");
    let hermes_other = ("HERMES_HOST_OPEN", "/nonexistent/message.hl7");
    let ralph_other = ("TASK_DIR", "");
    let timeouts = [
        row("supex-bridge", &["serve"][..], "SUPEX_EVAL_TIMEOUT", supex_other),
        row("btcp-broker", &["serve"], "BTCP_KEEPALIVE", btcp_other),
        row("hermes-host", &["serve"], "HERMES_HOST_WRITE_STALL", hermes_other),
        row("ralph-server", ralph, "RALPH_WRITE_STALL", ralph_other),
    ];
    let may_be_zero = [
        row("btcp-broker", &["serve"][..], "BTCP_SHUTDOWN_GRACE", btcp_other),
        row("ralph-server", ralph, "RALPH_RETRY_DELAY", ralph_other),
    ];
    let switches = [
        row("supex-bridge", &["serve"][..], "SUPEX_ALLOW_REMOTE", supex_other),
        row("btcp-broker", &["serve"], "BTCP_SSE_SESSION_FALLBACK", btcp_other),
    ];
    let sizes = [
        row("supex-bridge", &["serve"][..], "SUPEX_WRITE_BUDGET", supex_other),
        row("btcp-broker", &["serve"], "BTCP_WRITE_BUDGET", btcp_other),
        row("hermes-host", &["serve"], "HERMES_HOST_MAX_MESSAGE", hermes_other),
    ];
    let counts = [
        row("supex-bridge", &["serve"][..], "SUPEX_MAX_CONNECTIONS", supex_other),
        row("btcp-broker", &["serve"], "BTCP_MAX_CONNECTIONS", btcp_other),
        row("ralph-server", ralph, "RALPH_MAX_ITERATIONS", ralph_other),
    ];
    // What the daemon says about `value` for `setting`: `Ok(())` when it
    // stopped at the other setting (so it took this one), else the problem.
    let verdict = |s: &Setting, value: &str| -> Result<(), String> {
        let env: Vec<(&str, &str)> = [(s.var, value), s.other].into_iter().filter(|(k, _)| *k != "TASK_DIR").collect();
        let (status, _, err) = run(s.daemon, s.args, &env);
        assert_eq!(status.code(), Some(2), "{} {}={value:?}: {err}", s.daemon, s.var);
        if err.contains(s.other.0) && !err.contains(s.var) {
            return Ok(());
        }
        assert!(err.contains(s.var), "{} {}={value:?} stopped at neither setting: {err}", s.daemon, s.var);
        Err(err.split_once("invalid value").map_or(err.clone(), |(_, why)| why.trim().to_owned()))
    };
    let same_everywhere = |rows: &[Setting], value: &str, expected: Result<(), &str>| {
        for s in rows {
            match (verdict(s, value), expected) {
                (Ok(()), Ok(())) => {}
                (Err(said), Err(words)) => assert!(said.contains(words), "{} {}={value:?}: {said}", s.daemon, s.var),
                (got, _) => panic!("{} {}={value:?}: expected {expected:?}, got {got:?}", s.daemon, s.var),
            }
        }
    };
    same_everywhere(&timeouts, "1m30s", Ok(()));
    same_everywhere(&timeouts, "2.5", Ok(()));
    same_everywhere(&timeouts, "0", Err("must be longer than zero"));
    same_everywhere(&timeouts, "soon", Err("nor a duration like 1m30s"));
    same_everywhere(&may_be_zero, "0", Ok(()));
    same_everywhere(&may_be_zero, "-1", Err("negative"));
    for on_or_off in ["", "yes", "OFF", "1", "false"] {
        same_everywhere(&switches, on_or_off, Ok(()));
    }
    same_everywhere(&switches, "maybe", Err("true or false"));
    same_everywhere(&sizes, "1048576", Ok(()));
    same_everywhere(&sizes, "8M", Err("not a whole number"));
    same_everywhere(&sizes, "1000", Err("must be at least"));
    same_everywhere(&counts, "7", Ok(()));
    same_everywhere(&counts, "0", Err("must be at least 1"));
}

#[test]
fn help_spells_out_the_data_directory() {
    let data = "/srv/some-data-home";
    for daemon in DAEMONS {
        for help in helps(daemon, &[("XDG_DATA_HOME", data)]) {
            assert!(!help.contains("<data dir>"), "{daemon} leaves <data dir> unsaid:\n{help}");
        }
    }
    let (_, help, _) = run("hermes-host", &["ctl", "--help"], &[("XDG_DATA_HOME", data), ("XDG_RUNTIME_DIR", "")]);
    assert!(help.contains(&format!("{data}/hermes-host/hermes-host.sock")), "{help}");
    let (_, page, _) = run("ralph-server", &["man"], &[]);
    assert!(page.contains("XDG_DATA_HOME") && page.contains(".SH \"EXIT STATUS\""), "{page}");
}
