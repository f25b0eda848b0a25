//! Command-line pieces every daemon shares: logging flags and setup, `--arg
//! key=value` parsing for client commands, and the bad-configuration exit.

use std::fmt;

use serde_json::Value;

/// Exit code for bad configuration (operations.md).
pub const EXIT_BAD_CONFIG: i32 = 2;

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
    /// Installs the global subscriber: logs go to stderr, stdout stays for output.
    pub fn init(&self) {
        use tracing_subscriber::EnvFilter;
        let filter = EnvFilter::try_new(&self.log_level).unwrap_or_else(|e| {
            config_error("--log-level", format!("{e}"));
        });
        // Colours only for a person at a terminal, never in journald or files.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
        match self.log_format {
            LogFormat::Text => builder.with_target(false).init(),
            LogFormat::Json => builder.json().flatten_event(true).init(),
        }
    }
}

/// Stops the daemon at start-up with one clear line naming the setting (exit 2).
pub fn config_error(setting: &str, problem: impl fmt::Display) -> ! {
    let program = std::env::args()
        .next()
        .and_then(|p| std::path::Path::new(&p).file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    eprintln!("{program}: bad configuration: {setting}: {problem}");
    std::process::exit(EXIT_BAD_CONFIG)
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
    use serde_json::json;

    #[test]
    fn arg_values_are_json_when_they_parse_and_strings_otherwise() {
        assert_eq!(parse_arg("n=3").unwrap(), ("n".into(), json!(3)));
        assert_eq!(parse_arg("code=1+1").unwrap(), ("code".into(), json!("1+1")));
        assert_eq!(parse_arg("s=\"x\"").unwrap(), ("s".into(), json!("x")));
        assert_eq!(parse_arg("eq=a=b").unwrap(), ("eq".into(), json!("a=b")));
        assert!(parse_arg("novalue").is_err());
        assert!(parse_arg("=1").is_err());
    }
}
