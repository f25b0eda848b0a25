//! Operations, checked: service files parse, every setting a daemon reads is
//! in its example env file, the demo page the README's main job points at
//! (`demo_page`; the main job itself: tests/run_all), the install (`install`),
//! socket activation as shipped (`service`), what every binary answers
//! besides its own commands (`conventions`), one daemon built alone as the
//! four together (`builds`), and the shape of the tree
//! (`layout`: no import circles, no overlong files).

mod builds;
mod conventions;
mod demo_page;
mod install;
mod layout;
mod service;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::{bin_path, require_tool, run};

/// The daemons that are implemented and ship service files.
const DAEMONS: &[&str] = &["supex-bridge", "btcp-broker", "hermes-host", "ralph-server"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// A daemon's `--help` and the help of each of its subcommands, run with
/// extra `env`.
fn helps(daemon: &str, env: &[(&str, &str)]) -> Vec<String> {
    let help = |args: &[&str]| {
        let (status, out, _) = run(daemon, args, env);
        assert!(status.success(), "{daemon} {args:?} failed");
        out
    };
    let top = help(&["--help"]);
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
    std::iter::once(top).chain(subcommands.iter().map(|sub| help(&[sub, "--help"]))).collect()
}

/// The environment variables named by a daemon's `--help` and by the help of
/// each of its subcommands, with the default the help shows (if any).
fn env_vars_in_help(daemon: &str) -> BTreeMap<String, Option<String>> {
    let mut vars = BTreeMap::new();
    for text in helps(daemon, &[]) {
        for piece in text.split("[env: ").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            // clap prints `[default: X]` right after the env name, before the next option.
            let default = piece
                .split("\n\n")
                .next()
                .and_then(|block| block.split("[default: ").nth(1))
                .and_then(|rest| rest.lines().next())
                .map(|line| {
                    // Up to the `]` that closes it: the line's last, or the one
                    // before a following `[possible values: ...]`.
                    let end = line.find("] [").unwrap_or(line.len() - usize::from(line.ends_with(']')));
                    unquote(&line[..end])
                });
            vars.entry(name).or_insert(default);
        }
    }
    vars
}

/// A default as clap shows it: quoted, with `\\` and `\"` escaped, when it
/// holds spaces or quotes; as it is otherwise.
fn unquote(shown: &str) -> String {
    match shown.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) => inner.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => shown.to_owned(),
    }
}

/// Variables in an env file, set or commented out (`#NAME=default`), with
/// the value written there.
fn vars_in_env_file(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| l.trim_start_matches('#').trim())
        .filter_map(|l| l.split_once('='))
        .filter(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect()
}

#[test]
fn every_setting_a_daemon_reads_is_in_its_env_file_with_its_default() {
    for daemon in DAEMONS {
        let in_help = env_vars_in_help(daemon);
        assert!(in_help.len() >= 3, "{daemon}: --help names only {in_help:?}");
        let file = repo().join(format!("config/env/{daemon}.env"));
        let in_file = vars_in_env_file(&file);
        let missing: Vec<_> = in_help.keys().filter(|v| !in_file.contains_key(*v)).collect();
        assert!(missing.is_empty(), "{daemon}: {} lacks {missing:?}", file.display());
        let unknown: Vec<_> = in_file.keys().filter(|v| !in_help.contains_key(*v)).collect();
        assert!(unknown.is_empty(), "{daemon}: {} lists {unknown:?}, which --help does not know", file.display());
        for (name, default) in &in_help {
            if let Some(default) = default {
                assert_eq!(&in_file[name], default, "{daemon}: {name}'s default in {}", file.display());
            }
        }
    }
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    if !require_tool("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut units = Vec::new();
    for entry in std::fs::read_dir(repo().join("config/systemd")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // verify checks that ExecStart exists: point it at the binaries just built.
        let mut text = std::fs::read_to_string(&path).unwrap();
        for daemon in ["supex-bridge", "btcp-broker", "hermes-host", "ralph-server"] {
            let installed = format!("/usr/local/bin/{daemon}");
            if text.contains(&installed) {
                text = text.replace(&installed, &bin_path(daemon).display().to_string());
            }
        }
        std::fs::write(dir.path().join(&name), text).unwrap();
        // A template (ralph@.service) is verified through an instance name.
        units.push(if name.contains("@.") { name.replace("@.", "@example.") } else { name });
    }
    assert!(units.iter().any(|u| u.starts_with("supex-bridge")) && units.iter().any(|u| u.starts_with("btcp-broker")));
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .args(units.iter().map(|u| format!("./{u}")))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let complaints = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    // systemd-analyze exits 0 on "ignoring" problems: any line about our files is one.
    let ours: Vec<&str> = complaints
        .lines()
        .filter(|l| l.contains(&dir.path().display().to_string()) || l.contains(".service") || l.contains(".socket"))
        .collect();
    assert!(out.status.success() && ours.is_empty(), "systemd-analyze verify:\n{complaints}");
}

#[test]
fn launchd_plists_have_what_launchd_needs() {
    for daemon in DAEMONS {
        let path = std::fs::read_dir(repo().join("config/launchd"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().contains(daemon))
            .unwrap_or_else(|| panic!("no plist for {daemon} in config/launchd"));
        let value = plist::Value::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let dict = value.as_dictionary().expect("a plist dictionary");
        for key in ["Label", "ProgramArguments", "KeepAlive", "EnvironmentVariables", "StandardErrorPath"] {
            assert!(dict.contains_key(key), "{}: no {key}", path.display());
        }
        let args = dict["ProgramArguments"].as_array().unwrap();
        assert!(args[0].as_string().unwrap().ends_with(daemon), "{}: runs {:?}", path.display(), args[0]);
        // The daemon's own command, said or implied: `serve`, or `run TASK_DIR` for a Ralph loop.
        let command = if *daemon == "ralph-server" { "run" } else { "serve" };
        assert!(args.len() == 1 || args[1].as_string() == Some(command), "{}: {args:?}", path.display());
        // Every variable it sets is one the daemon knows.
        let known = env_vars_in_help(daemon);
        for name in dict["EnvironmentVariables"].as_dictionary().unwrap().keys() {
            assert!(known.contains_key(name), "{}: sets {name}, unknown to {daemon}", path.display());
        }
    }
}

#[test]
fn every_daemon_binary_answers_help() {
    for daemon in ["supex-bridge", "btcp-broker", "hermes-host", "ralph-server"] {
        let (status, out, _) = run(daemon, &["--help"], &[]);
        assert!(status.success() && out.contains("Usage:"), "{daemon} --help");
    }
}

/// The README's `nc` example shows `read_file` of Cargo.toml with its size:
/// the size it has.
#[test]
fn the_readme_shows_the_size_cargo_toml_has() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let shown = readme
        .split(r#""path":"/home/me/rpc-daemons/Cargo.toml","content":"[workspace]","size":"#)
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .expect("the README's read_file example");
    let size = std::fs::metadata(repo().join("Cargo.toml")).unwrap().len();
    assert_eq!(shown, size.to_string(), "README.md's nc example: update the size to Cargo.toml's");
}
