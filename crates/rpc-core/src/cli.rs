//! Command-line pieces every daemon shares (feature `cli`): logging flags and
//! setup, parsing that names the env variable of a bad value, `--arg
//! key=value` for client commands, reporting bad configuration, and the
//! `completions SHELL` and `man` subcommands every binary has.
//!
//! Nothing here exits the process: the binary gets an [`ExitCode`] back and
//! returns it from `main`, so destructors still run.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use crate::config::ConfigError;

/// Exit code for bad configuration: every daemon stops at start with one
/// line naming the setting, and this code, for a service manager to tell apart.
pub const EXIT_BAD_CONFIG: u8 = 2;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for journald and log shippers.
    Json,
}

/// Logging flags, flattened into every daemon's command line (under their
/// own heading, after a subcommand's own options).
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Log filter, in `RUST_LOG` syntax (e.g. `info`, `debug,hyper=warn`).
    #[arg(long, env = "RUST_LOG", default_value = "info", global = true, help_heading = "Logging")]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true, help_heading = "Logging")]
    pub log_format: LogFormat,
}

impl LogArgs {
    /// Installs the global subscriber: logs go to stderr through the
    /// [`log_sink`](crate::log_sink) (a bounded queue and a thread, so a log
    /// reader that stalls or goes away costs lines, counted, never the
    /// daemon), stdout stays for output. A second call in one process leaves
    /// the first subscriber.
    pub fn init(&self) -> Result<(), ConfigError> {
        use tracing_subscriber::EnvFilter;
        let mut filter =
            EnvFilter::try_new(&self.log_level).map_err(|e| ConfigError::new("RUST_LOG (--log-level)", e))?;
        // The MCP SDK logs every message of a session at info; only its
        // warnings belong in a daemon's log unless asked for by name.
        if !self.log_level.contains("rmcp") {
            filter = filter.add_directive("rmcp=warn".parse().expect("a valid directive"));
        }
        // Colours only for a person at a terminal, never in journald or files.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let builder =
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(crate::log_sink::writer).with_ansi(ansi);
        let _already_set = match self.log_format {
            LogFormat::Text => builder.with_target(false).try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        Ok(())
    }
}

/// Why the command line did not give a `C`.
#[derive(Debug)]
pub enum ParseFailure {
    /// A value did not parse: reported like any bad configuration, naming
    /// the env variable (`BTCP_PORT (--port): invalid value "99999": ...`).
    BadValue(ConfigError),
    /// Everything clap reports itself: `--help`, `--version`, an unknown
    /// flag, a missing argument.
    Clap(clap::Error),
}

impl ParseFailure {
    /// Prints the failure and returns the exit code: 2 for a bad value or
    /// usage, 0 for `--help` and `--version`.
    pub fn report(&self) -> ExitCode {
        match self {
            ParseFailure::BadValue(error) => bad_configuration(error),
            ParseFailure::Clap(error) => {
                let _ = error.print();
                ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(EXIT_BAD_CONFIG))
            }
        }
    }
}

/// Parses the process's command line (and the env variables of its flags).
pub fn parse<C: clap::Parser>() -> Result<C, ParseFailure> {
    parse_from(std::env::args_os())
}

/// [`parse`] from given arguments, the program name first.
pub fn parse_from<C, I, T>(args: I) -> Result<C, ParseFailure>
where
    C: clap::Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut command = with_data_dir(C::command());
    command.try_get_matches_from_mut(args).and_then(|matches| C::from_arg_matches(&matches)).map_err(|error| {
        match bad_value(&error, &command) {
            Some(config) => ParseFailure::BadValue(config),
            None => ParseFailure::Clap(error.with_cmd(&command)),
        }
    })
}

/// `command` with `<data dir>` in its flags' help spelled out for this user
/// (`/home/me/.local/share`: `$XDG_DATA_HOME`, else `~/.local/share`), so
/// `--help` says where files go. Man pages keep the placeholder.
fn with_data_dir(command: clap::Command) -> clap::Command {
    let Some(dir) = dirs::data_dir() else { return command };
    let resolved = dir.display().to_string();
    let spell = |arg: clap::Arg| match arg.get_help().map(ToString::to_string) {
        Some(help) if help.contains("<data dir>") => {
            let help = help.replace("<data dir>", &resolved);
            arg.help(help)
        }
        _ => arg,
    };
    command.mut_args(spell).mut_subcommands(with_data_dir)
}

/// A clap invalid-value error as a [`ConfigError`] naming the flag's env
/// variable: the value often came from the environment (`BTCP_PORT=99999`),
/// where clap's `--port <PORT>` would send the reader looking in vain.
fn bad_value(error: &clap::Error, command: &clap::Command) -> Option<ConfigError> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(error.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return None;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(value)) => value.clone(),
        _ => String::new(),
    };
    // `--port <PORT>` -> `port`, then the argument's env variable, if any.
    let flag = arg.split_whitespace().next().unwrap_or(arg);
    let setting = match flag.strip_prefix("--").and_then(|long| env_of(command, long)) {
        Some(env) => format!("{env} ({flag})"),
        None => flag.to_owned(),
    };
    // The value parser's own words when there are some; else clap's, after
    // its "invalid value '...' for '...': " prefix.
    let why = match std::error::Error::source(error) {
        Some(source) => source.to_string(),
        None => {
            let rendered = error.render().to_string();
            let first = rendered.lines().next().unwrap_or_default();
            first.split_once("': ").map_or("invalid value", |(_, why)| why).to_owned()
        }
    };
    // A closed set of values: which ones it allows, as clap would list them.
    let why = match error.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(values)) if !values.is_empty() => format!("not one of {}", values.join(", ")),
        _ => why,
    };
    Some(ConfigError::new(setting, format!("invalid value {value:?}: {why}")))
}

/// The env variable of the flag `--long`, in `command` or any subcommand.
fn env_of(command: &clap::Command, long: &str) -> Option<String> {
    let own = command.get_arguments().find(|a| a.get_long() == Some(long)).and_then(|a| a.get_env());
    match own {
        Some(env) => Some(env.to_string_lossy().into_owned()),
        None => command.get_subcommands().find_map(|sub| env_of(sub, long)),
    }
}

/// Reports bad configuration as one line on stderr, `PROGRAM: bad
/// configuration: SETTING: PROBLEM`, and returns exit code 2 for `main`.
pub fn bad_configuration(error: &ConfigError) -> ExitCode {
    crate::log_sink::report(format_args!("{}: {error}", program_name()));
    ExitCode::from(EXIT_BAD_CONFIG)
}

fn program_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|p| std::path::Path::new(&p).file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// The subcommands every binary has besides its own, flattened into its
/// command enum (`#[command(flatten)] Common(CommonCommand)`): they describe
/// the command line itself, so they are generated from it rather than written.
#[derive(Debug, clap::Subcommand)]
pub enum CommonCommand {
    /// Print a shell completion script to standard output (bash: `source
    /// <(PROGRAM completions bash)`).
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write it and one page per subcommand
    /// (`PROGRAM-SUBCOMMAND.1`) into a directory.
    #[command(hide = true)]
    Man {
        /// Write `PROGRAM.1` and the subcommands' pages here instead.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

impl CommonCommand {
    /// Runs it for the binary whose command line is `command`
    /// (`Cli::command()`); `exit_status` is the man pages' EXIT STATUS
    /// section, one paragraph per blank-line-separated block. 0 when the
    /// output was written, 1 when it could not be.
    pub fn run(&self, mut command: clap::Command, exit_status: &str) -> ExitCode {
        let program = command.get_name().to_owned();
        let written = match self {
            CommonCommand::Completions { shell } => {
                // Into a buffer first: clap_complete panics on a failed write
                // (a closed pipe), and a closed pipe is not worth a panic.
                let mut script = Vec::new();
                clap_complete::generate(*shell, &mut command, program.clone(), &mut script);
                std::io::stdout().lock().write_all(&script)
            }
            CommonCommand::Man { out_dir: None } => {
                man_page(command, exit_status).and_then(|page| std::io::stdout().lock().write_all(&page))
            }
            CommonCommand::Man { out_dir: Some(dir) } => {
                std::fs::create_dir_all(dir).and_then(|()| man_pages(command, exit_status, dir))
            }
        };
        match written {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                crate::log_sink::report(format_args!("{program}: {e}"));
                ExitCode::FAILURE
            }
        }
    }
}

/// `command`'s man page and one per visible subcommand (`PROGRAM-SUB.1`),
/// written into `dir`.
fn man_pages(command: clap::Command, exit_status: &str, dir: &Path) -> std::io::Result<()> {
    fn write(command: clap::Command, exit_status: &str, dir: &Path) -> std::io::Result<()> {
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            write(sub, exit_status, dir)?;
        }
        let file = clap_mangen::Man::new(command.clone()).get_filename();
        std::fs::write(dir.join(file), man_page(command, exit_status)?)
    }
    let mut command = command.disable_help_subcommand(true);
    // Gives each subcommand its full name (`ralph-server run`).
    command.build();
    write(command, exit_status, dir)
}

/// One man page: clap_mangen's sections, with ENVIRONMENT (every variable a
/// flag reads, from the flags' help) and EXIT STATUS before the extra text.
fn man_page(command: clap::Command, exit_status: &str) -> std::io::Result<Vec<u8>> {
    let mut page = Vec::new();
    let has_options = command.get_arguments().any(|a| !a.is_hide_set());
    let has_subcommands = command.get_subcommands().any(|s| !s.is_hide_set());
    let has_extra = command.get_after_long_help().is_some() || command.get_after_help().is_some();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    if has_options {
        man.render_options_section(&mut page)?;
    }
    if has_subcommands {
        man.render_subcommands_section(&mut page)?;
    }
    page.extend_from_slice(environment_section(&command).as_bytes());
    page.extend_from_slice(b".SH \"EXIT STATUS\"\n");
    for paragraph in exit_status.split("\n\n").filter(|p| !p.trim().is_empty()) {
        page.extend_from_slice(format!(".PP\n{}\n", roff_text(paragraph.trim())).as_bytes());
    }
    if has_extra {
        man.render_extra_section(&mut page)?;
    }
    if command.get_version().is_some() {
        man.render_version_section(&mut page)?;
    }
    Ok(page)
}

/// The ENVIRONMENT section: each variable a flag of `command` reads, with
/// the flag, its help and its default (empty when none does).
fn environment_section(command: &clap::Command) -> String {
    let mut section = String::new();
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(env) = arg.get_env() else { continue };
        let help = arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
        let flag = arg.get_long().map(|l| format!(" (--{l})")).unwrap_or_default();
        let defaults: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let default = if defaults.is_empty() { String::new() } else { format!(" [default: {}]", defaults.join(", ")) };
        section.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_text(&env.to_string_lossy()),
            roff_text(&format!("{}{flag}{default}", help.trim()))
        ));
    }
    let mentions_data_dir =
        command.get_arguments().any(|a| a.get_help().is_some_and(|h| h.to_string().contains("<data dir>")));
    if mentions_data_dir {
        section.push_str(".TP\n\\fBXDG_DATA_HOME\\fR\nThe <data dir> of the options above; else ~/.local/share (on macOS, ~/Library/Application Support).\n");
    }
    if section.is_empty() { section } else { format!(".SH ENVIRONMENT\n{section}") }
}

/// Text as roff reads it literally: backslashes escaped, and a line that
/// would start with a control character (`.` or `'`) guarded.
fn roff_text(text: &str) -> String {
    text.replace('\\', "\\e")
        .lines()
        .map(|line| if line.starts_with(['.', '\'']) { format!("\\&{line}") } else { line.to_owned() })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a daemon from its settings: a bad one is one line and exit code 2;
/// else `serve` on a runtime of `threads`, and the exit code of how it ended
/// (see [`daemon::run_to_exit`](crate::daemon::run_to_exit)). Every daemon's
/// `serve` subcommand starts this one way.
pub fn run_daemon<C, T, E, Fut>(
    name: &str,
    threads: crate::daemon::Threads,
    settings: Result<C, ConfigError>,
    serve: impl FnOnce(C) -> Fut,
) -> ExitCode
where
    Fut: Future<Output = Result<T, E>>,
    T: Into<ExitCode>,
    E: crate::daemon::Failure,
{
    match settings {
        Ok(config) => crate::daemon::run_to_exit(name, threads, serve(config)),
        Err(e) => bad_configuration(&e),
    }
}

/// Runs a client command (`ctl`, `status`, `call`, `mcp`...) on a small
/// runtime of its own: what it returns is the exit code; an error is one line
/// on stderr, `PROGRAM: ERROR`, and exit code 1. Every daemon's client
/// commands start this one way.
pub fn run_client<E: std::fmt::Display>(command: impl Future<Output = Result<ExitCode, E>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            crate::log_sink::report(format_args!("{}: cannot start the async runtime: {e}", program_name()));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(code) => code,
        Err(e) => {
            crate::log_sink::report(format_args!("{}: {e}", program_name()));
            ExitCode::FAILURE
        }
    }
}

/// Parses `key=value` for `--arg`: the value is JSON when it parses as JSON
/// (`n=3`, `flag=true`, `list=[1,2]`), a plain string otherwise (`name=Zoë`).
pub fn parse_arg(text: &str) -> Result<(String, Value), String> {
    let (key, value) = text.split_once('=').ok_or_else(|| format!("expected key=value, got {text:?}"))?;
    if key.is_empty() {
        return Err(format!("empty key in {text:?}"));
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
    Ok((key.to_owned(), value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, Unit};
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn arg_values_are_json_when_they_parse_and_strings_otherwise() {
        assert_eq!(parse_arg("n=3").unwrap(), ("n".into(), json!(3)));
        assert_eq!(parse_arg("code=1+1").unwrap(), ("code".into(), json!("1+1")));
        assert_eq!(parse_arg("s=\"x\"").unwrap(), ("s".into(), json!("x")));
        assert_eq!(parse_arg("eq=a=b").unwrap(), ("eq".into(), json!("a=b")));
        assert!(parse_arg("novalue").is_err());
        assert!(parse_arg("=1").is_err());
    }

    fn seconds(text: &str) -> Result<Duration, config::ValueError> {
        config::duration(text, Unit::Seconds).and_then(config::positive)
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[arg(long, env = "RPC_CORE_TEST_PORT", default_value_t = 1, global = true)]
        port: u16,
        #[command(subcommand)]
        command: Option<Command>,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Command {
        Serve {
            #[arg(long, env = "RPC_CORE_TEST_TIMEOUT", value_parser = seconds)]
            timeout: Option<Duration>,
            #[arg(long)]
            plain: Option<u16>,
            #[arg(long, env = "RPC_CORE_TEST_MODE", value_parser = ["fast", "slow"])]
            mode: Option<String>,
        },
    }

    fn bad_value_of(args: &[&str]) -> ConfigError {
        match parse_from::<Cli, _, _>(args) {
            Err(ParseFailure::BadValue(error)) => error,
            other => panic!("expected a bad value, got {other:?}"),
        }
    }

    #[test]
    fn a_bad_value_names_the_env_variable_and_the_flag() {
        let error = bad_value_of(&["d", "--port", "99999"]);
        assert_eq!(error.setting, "RPC_CORE_TEST_PORT (--port)");
        assert!(error.problem.starts_with("invalid value \"99999\": "), "{error}");
        assert!(error.problem.contains("65535"), "{error}");
        // A flag of a subcommand, through its value parser's own words.
        let error = bad_value_of(&["d", "serve", "--timeout", "0"]);
        assert_eq!(error.setting, "RPC_CORE_TEST_TIMEOUT (--timeout)");
        assert_eq!(error.problem, "invalid value \"0\": must be longer than zero");
        // No env variable: the flag alone.
        let error = bad_value_of(&["d", "serve", "--plain", "x"]);
        assert_eq!(error.setting, "--plain");
        // A closed set: the values it allows.
        let error = bad_value_of(&["d", "serve", "--mode", "quick"]);
        assert_eq!(
            error.to_string(),
            "bad configuration: RPC_CORE_TEST_MODE (--mode): invalid value \"quick\": not one of fast, slow"
        );
    }

    #[test]
    fn help_and_usage_errors_stay_clap_s() {
        assert!(matches!(parse_from::<Cli, _, _>(["d", "--help"]), Err(ParseFailure::Clap(_))));
        assert!(matches!(parse_from::<Cli, _, _>(["d", "--nope"]), Err(ParseFailure::Clap(_))));
        assert!(parse_from::<Cli, _, _>(["d", "serve", "--timeout", "1m"]).is_ok());
    }

    #[derive(Debug, clap::Parser)]
    #[command(name = "demo", version)]
    struct WithCommon {
        #[command(subcommand)]
        command: Common,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Common {
        /// Does the work.
        Work {
            /// How fast.
            #[arg(long, env = "DEMO_SPEED", default_value = "3")]
            speed: u8,
        },
        #[command(flatten)]
        Common(CommonCommand),
    }

    #[test]
    fn completions_and_man_are_subcommands_of_the_binary() {
        use clap::{CommandFactory, Parser};
        let cli = WithCommon::try_parse_from(["demo", "completions", "fish"]).unwrap();
        assert!(matches!(cli.command, Common::Common(CommonCommand::Completions { .. })));
        assert!(WithCommon::try_parse_from(["demo", "completions", "tcsh"]).is_err());
        let cli = WithCommon::try_parse_from(["demo", "man"]).unwrap();
        assert!(matches!(cli.command, Common::Common(CommonCommand::Man { out_dir: None })));
        // `man` is for packagers and `just man`, not for the help listing.
        let help = WithCommon::command().render_help().to_string();
        assert!(help.contains("completions") && !help.contains("man "), "{help}");
    }

    #[test]
    fn man_pages_are_written_for_the_binary_and_each_subcommand() {
        use clap::CommandFactory;
        let dir = tempfile::tempdir().unwrap();
        let man = CommonCommand::Man { out_dir: Some(dir.path().join("man1")) };
        assert_eq!(man.run(WithCommon::command(), "0 done.\n\n1 not.\n.dot"), ExitCode::SUCCESS);
        let page = std::fs::read_to_string(dir.path().join("man1/demo.1")).unwrap();
        assert!(page.contains(".TH demo 1"), "{page}");
        assert!(page.contains(".SH \"EXIT STATUS\"\n.PP\n0 done.\n.PP\n1 not.\n\\&.dot\n"), "{page}");
        let work = std::fs::read_to_string(dir.path().join("man1/demo-work.1")).unwrap();
        assert!(work.contains(".SH ENVIRONMENT\n.TP\n\\fBDEMO_SPEED\\fR\nHow fast (--speed) [default: 3]\n"), "{work}");
        assert!(dir.path().join("man1/demo-completions.1").exists());
        assert!(!dir.path().join("man1/demo-man.1").exists(), "hidden commands get no page");
    }

    #[test]
    fn a_bad_log_filter_is_bad_configuration() {
        let args = LogArgs { log_level: "=[".into(), log_format: LogFormat::Text };
        let error = args.init().unwrap_err();
        assert_eq!(error.setting, "RUST_LOG (--log-level)");
    }
}
