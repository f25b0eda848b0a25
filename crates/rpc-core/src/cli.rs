//! Command-line pieces every daemon shares (feature `cli`): logging flags and
//! setup, parsing that names the env variable of a bad value, `--arg
//! key=value` for client commands, reporting bad configuration, and the
//! `completions SHELL` and `man` subcommands every binary has.
//!
//! Nothing here exits the process: the binary gets an [`ExitCode`] back and
//! returns it from `main`, so destructors still run.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
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

/// Logging flags, flattened into every daemon's command line.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Log filter, in `RUST_LOG` syntax (e.g. `info`, `debug,hyper=warn`).
    #[arg(long, env = "RUST_LOG", default_value = "info", global = true)]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
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
    C::try_parse_from(args).map_err(|error| match bad_value(&error, &C::command()) {
        Some(config) => ParseFailure::BadValue(config),
        None => ParseFailure::Clap(error),
    })
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
    /// (`Cli::command()`): 0 when the output was written, 1 when it could not be.
    pub fn run(&self, mut command: clap::Command) -> ExitCode {
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
                let mut page = Vec::new();
                clap_mangen::Man::new(command)
                    .render(&mut page)
                    .and_then(|()| std::io::stdout().lock().write_all(&page))
            }
            CommonCommand::Man { out_dir: Some(dir) } => {
                std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(command, dir))
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
        Work,
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
        assert_eq!(man.run(WithCommon::command()), ExitCode::SUCCESS);
        let page = std::fs::read_to_string(dir.path().join("man1/demo.1")).unwrap();
        assert!(page.contains(".TH demo 1"), "{page}");
        assert!(dir.path().join("man1/demo-work.1").exists());
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
