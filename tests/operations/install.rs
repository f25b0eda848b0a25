//! `scripts/install` (what `just install` runs) into a temporary home and
//! prefix: the daemons are installed where the units and plists say they are,
//! the installed systemd user units pass `systemd-analyze verify`, an env file
//! of yours is kept, and `--uninstall` takes it all away again.
//!
//! The binaries come from this test's build (`--from`). Without it, install
//! makes the release build run-all makes (the same command, so a finished
//! one is used as it is): checked with a `cargo` that fails, which also shows
//! that install stops at the first failure.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use integration_tests::{bin_path, require_tool};

use crate::{DAEMONS, repo};

/// A home and a prefix of their own, removed when dropped.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox { dir: tempfile::tempdir().unwrap() }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn prefix(&self) -> PathBuf {
        self.dir.path().join("prefix")
    }

    /// Runs `scripts/install ARGS` with this home, where no user manager can
    /// be reached (so nothing on this machine is reloaded or stopped).
    fn install(&self, args: &[&str]) -> Output {
        let from = bin_path("supex-bridge").parent().unwrap().to_owned();
        self.script("install").arg("--from").arg(&from).args(args).output().unwrap()
    }

    /// `scripts/NAME --prefix PREFIX` (for install) with this home.
    fn script(&self, name: &str) -> Command {
        std::fs::create_dir_all(self.home()).unwrap();
        let mut command = Command::new(repo().join("scripts").join(name));
        if name == "install" {
            command.arg("--prefix").arg(self.prefix());
        }
        command
            .env("HOME", self.home())
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("DBUS_SESSION_BUS_ADDRESS");
        command
    }

    /// Everything installed under the home and the prefix, as relative paths.
    fn installed(&self) -> Vec<String> {
        let mut found = Vec::new();
        for root in [self.home(), self.prefix()] {
            let mut dirs = vec![root.clone()];
            while let Some(dir) = dirs.pop() {
                for entry in std::fs::read_dir(&dir).into_iter().flatten().map(Result::unwrap) {
                    if entry.file_type().unwrap().is_dir() {
                        dirs.push(entry.path());
                    } else {
                        found.push(entry.path().strip_prefix(self.dir.path()).unwrap().display().to_string());
                    }
                }
            }
        }
        found.sort();
        found
    }

    fn config(&self) -> PathBuf {
        self.home().join(".config")
    }

    fn env_file(&self, daemon: &str) -> PathBuf {
        let dir = if daemon == "ralph-server" { "ralph" } else { daemon };
        self.config().join(dir).join(format!("{daemon}.env"))
    }

    fn units(&self) -> PathBuf {
        self.config().join("systemd/user")
    }

    fn man_page(&self, daemon: &str) -> PathBuf {
        self.prefix().join(format!("share/man/man1/{daemon}.1"))
    }

    fn bash_completion(&self, daemon: &str) -> PathBuf {
        self.home().join(".local/share/bash-completion/completions").join(daemon)
    }

    /// A unit's path with its specifiers for a user manager resolved: %h the
    /// home, %E the configuration directory.
    fn resolve(&self, text: &str) -> PathBuf {
        let home = self.home().display().to_string();
        let config = self.config().display().to_string();
        PathBuf::from(text.replace("%h", &home).replace("%E", &config))
    }
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

fn shipped_units() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("config/systemd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `KEY=value` lines of a unit.
fn directives<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines().filter_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix('='))).collect()
}

fn executable(path: &Path) -> bool {
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[test]
fn install_puts_binaries_where_the_user_units_run_them_and_uninstall_removes_them() {
    let sandbox = Sandbox::new();
    // An env file of yours is never written over.
    let mine = sandbox.env_file("btcp-broker");
    std::fs::create_dir_all(mine.parent().unwrap()).unwrap();
    std::fs::write(&mine, "BTCP_PORT=9999\n").unwrap();

    let out = sandbox.install(&["--service-manager", "systemd"]);
    assert!(out.status.success(), "install failed:\n{}", text(&out));
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "BTCP_PORT=9999\n", "your env file was replaced");
    for daemon in DAEMONS {
        let binary = sandbox.prefix().join("bin").join(daemon);
        assert!(executable(&binary), "{} is not installed", binary.display());
        let page = std::fs::read_to_string(sandbox.man_page(daemon)).unwrap_or_default();
        assert!(page.contains(&format!(".TH {daemon} 1")), "{daemon}'s man page:\n{page}");
        let completion = std::fs::read_to_string(sandbox.bash_completion(daemon)).unwrap_or_default();
        assert!(completion.contains("complete -F"), "{daemon}'s bash completion:\n{completion}");
        let env = sandbox.env_file(daemon);
        assert!(env.exists(), "no {}", env.display());
        if env != mine {
            let mode = env.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{} holds tokens: only you may read it", env.display());
        }
    }

    // Every shipped unit, installed as a user unit that runs the installed
    // binary and reads the installed env file.
    for name in shipped_units() {
        let unit = std::fs::read_to_string(sandbox.units().join(&name))
            .unwrap_or_else(|e| panic!("{name} is not installed: {e}"));
        for system_only in ["/usr/local/bin", "DynamicUser=", "CapabilityBoundingSet=", "multi-user.target"] {
            assert!(!unit.contains(system_only), "installed {name} still has {system_only}:\n{unit}");
        }
        for exec in directives(&unit, "ExecStart") {
            let binary = sandbox.resolve(exec.split_whitespace().next().unwrap());
            assert!(binary.starts_with(sandbox.prefix().join("bin")), "{name} runs {}", binary.display());
            assert!(executable(&binary), "{name} runs {}, which is not there", binary.display());
        }
        for file in directives(&unit, "EnvironmentFile") {
            let path = sandbox.resolve(file.trim_start_matches('-'));
            assert!(path.exists(), "{name} reads {}, which install did not write", path.display());
        }
    }

    if require_tool("systemd-analyze") {
        let runtime = sandbox.dir.path().join("run");
        std::fs::create_dir_all(&runtime).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A template (ralph@.service) is verified through an instance name.
        let units: Vec<String> =
            shipped_units().iter().map(|u| format!("./{}", u.replace("@.", "@example."))).collect();
        let out = Command::new("systemd-analyze")
            .args(["--user", "verify", "--man=no"])
            .args(&units)
            .current_dir(sandbox.units())
            .env("HOME", sandbox.home())
            .env("XDG_RUNTIME_DIR", &runtime)
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .unwrap();
        let complaints = text(&out);
        // systemd-analyze exits 0 on problems it only warns about: any line is one.
        assert!(out.status.success() && complaints.trim().is_empty(), "systemd-analyze --user verify:\n{complaints}");
    }

    // Again: the same result, your env file still yours.
    let out = sandbox.install(&["--service-manager", "systemd"]);
    assert!(out.status.success(), "a second install failed:\n{}", text(&out));
    assert!(text(&out).contains("kept"), "{}", text(&out));

    let out = sandbox.install(&["--service-manager", "systemd", "--uninstall"]);
    assert!(out.status.success(), "uninstall failed:\n{}", text(&out));
    for daemon in DAEMONS {
        assert!(!sandbox.prefix().join("bin").join(daemon).exists(), "{daemon} is still installed");
        assert!(!sandbox.man_page(daemon).exists() && !sandbox.bash_completion(daemon).exists(), "{daemon}'s docs");
        if *daemon != "btcp-broker" {
            assert!(!sandbox.env_file(daemon).exists(), "{daemon}'s unchanged env file is left");
        }
    }
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "BTCP_PORT=9999\n", "uninstall removed your settings");
    for name in shipped_units() {
        assert!(!sandbox.units().join(&name).exists(), "{name} is still installed");
    }
    let man_left: Vec<_> = std::fs::read_dir(sandbox.prefix().join("share/man/man1")).unwrap().collect();
    assert!(man_left.is_empty(), "man pages left: {man_left:?}");
}

#[test]
fn install_for_launchd_writes_plists_that_run_the_installed_binaries() {
    let sandbox = Sandbox::new();
    let out = sandbox.install(&["--service-manager", "launchd"]);
    assert!(out.status.success(), "install failed:\n{}", text(&out));
    let agents = sandbox.home().join("Library/LaunchAgents");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(repo().join("config/launchd")).unwrap() {
        let name = entry.unwrap().file_name();
        let installed = agents.join(&name);
        let value = plist::Value::from_file(&installed).unwrap_or_else(|e| panic!("{}: {e}", installed.display()));
        let dict = value.as_dictionary().unwrap();
        let program = PathBuf::from(dict["ProgramArguments"].as_array().unwrap()[0].as_string().unwrap());
        assert!(program.starts_with(sandbox.prefix().join("bin")) && executable(&program), "{name:?} runs {program:?}");
        let text = std::fs::read_to_string(&installed).unwrap();
        assert!(!text.contains("/Users/me/"), "{name:?} keeps the placeholder home");
        seen.push(program.file_name().unwrap().to_string_lossy().into_owned());
    }
    seen.sort();
    let mut expected: Vec<String> = DAEMONS.iter().map(|d| d.to_string()).collect();
    expected.sort();
    assert_eq!(seen, expected);
    assert!(!sandbox.units().exists(), "systemd units installed for launchd");

    let out = sandbox.install(&["--service-manager", "launchd", "--uninstall"]);
    assert!(out.status.success(), "uninstall failed:\n{}", text(&out));
    assert_eq!(std::fs::read_dir(&agents).unwrap().count(), 0, "plists left behind");
}

#[test]
fn install_refuses_bad_arguments_with_exit_code_2() {
    let sandbox = Sandbox::new();
    for args in [&["--service-manager", "upstart"][..], &["--nonsense"], &["--prefix", "/tmp/with space"]] {
        let out = sandbox.install(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}:\n{}", text(&out));
        assert!(text(&out).starts_with("install: "), "{args:?}: {}", text(&out));
    }
    assert!(!sandbox.prefix().join("bin").exists(), "installed despite bad arguments");
}

#[test]
fn a_step_that_fails_stops_the_install_which_says_what_it_had_done() {
    let sandbox = Sandbox::new();
    // Binaries for two of the four: the third cannot be installed.
    let from = sandbox.dir.path().join("from");
    std::fs::create_dir_all(&from).unwrap();
    for daemon in &DAEMONS[..2] {
        std::fs::copy(bin_path(daemon), from.join(daemon)).unwrap();
    }
    let out = sandbox.script("install").arg("--from").arg(&from).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("install: failed: install -m 0755 {}", from.join(DAEMONS[2]).display())), "{said}");
    let report = said.split("install: stopped; what was done before it:").nth(1).expect(&said);
    for daemon in &DAEMONS[..2] {
        assert!(
            report.contains(&format!("installed {}", sandbox.prefix().join("bin").join(daemon).display())),
            "{said}"
        );
    }
    assert!(!said.contains("man pages"), "nothing past the failure is done or claimed: {said}");
    let installed = sandbox.installed();
    assert_eq!(installed, ["prefix/bin/btcp-broker", "prefix/bin/supex-bridge"], "{said}");
}

/// A `cargo` that says what it was asked and fails, first on PATH.
fn failing_cargo(dir: &Path) -> std::ffi::OsString {
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, format!("#!/bin/sh\necho \"$*\" >> {}/cargo-args\nexit 101\n", dir.display())).unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = bin.into_os_string();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

#[test]
fn without_from_install_builds_as_run_all_does_and_stops_when_the_build_fails() {
    let sandbox = Sandbox::new();
    let path = failing_cargo(sandbox.dir.path());
    let out = sandbox.script("install").env("PATH", &path).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("install: stopped; nothing was installed"), "{said}");
    assert!(sandbox.installed().is_empty(), "installed after a failed build: {:?}", sandbox.installed());
    // run-all's build, with the same fake cargo: the same packages and
    // profile, so that a finished run-all build is used as it is.
    let out = sandbox.script("run-all").env("PATH", &path).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let asked = std::fs::read_to_string(sandbox.dir.path().join("cargo-args")).unwrap();
    let builds: Vec<&str> = asked.lines().filter(|l| l.starts_with("build")).collect();
    assert_eq!(builds.len(), 2, "{asked}");
    let packages = DAEMONS.iter().map(|d| format!("-p {d}")).collect::<Vec<_>>().join(" ");
    assert_eq!(builds[0], format!("build --release --locked {packages}"), "install's build");
    assert_eq!(builds[1], format!("build --release --locked {packages}"), "run-all's build");
}
