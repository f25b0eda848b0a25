//! The command line and the settings it makes: the [`Cli`] (the daemon's
//! flags and every subcommand's, each setting with its env variable), and the
//! TOML file that lists the extensions, validated into a [`Config`].
//!
//! Every check that can fail at start happens here: a bad setting or config
//! file stops the daemon with one line naming it and exit code 2. The file is
//! read again on SIGHUP and `extensions/reload` ([`FileConfig::load`]); a bad
//! file then keeps the running configuration and says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use rpc_core::cli::{CommonCommand, LogArgs};
use rpc_core::config::ConfigError;
use serde::Deserialize;
use serde_json::Value;

/// A headless host for Hermes extensions: runs extension processes (JSON-RPC
/// over stdio, Content-Length framed), holds the HL7 v2 message they edit,
/// and serves a control socket to open messages, run commands and answer
/// dialogs.
///
/// Without a subcommand it runs the daemon (`serve`).
#[derive(Debug, Parser)]
#[command(name = "hermes-host", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// The man pages' EXIT STATUS section (`man hermes-host`), a paragraph per block.
pub const EXIT_STATUS: &str = "0: the host stopped cleanly (SIGTERM or SIGINT: extensions shut down, the socket removed), or a ctl or mcp command succeeded.\n\n1: a failure at run time (the control socket in use), a second signal (stop at once), or a ctl command that failed: the host is not running or could not be reached, the method failed, or a patch was not applied in full (ctl patch).\n\n2: bad configuration or usage, one line naming the setting or the config file's key.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the host and its extensions (the default).
    Serve(ServeArgs),
    /// Talk to a running host over its control socket.
    Ctl(CtlArgs),
    /// A Model Context Protocol server on stdio in front of the running host, for AI agents.
    Mcp(McpArgs),
    #[command(flatten)]
    Common(CommonCommand),
}

/// Largest message (a Content-Length body from an extension, a control line,
/// a message file) by default: 64 MiB, room for HL7 batches of tens of MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Most elements (segments, and the delimiters between fields, repetitions,
/// components and subcomponents) a held message may have, by default: 8 Mi,
/// what 64 MiB of real messages come to (one element in 8 to 10 bytes),
/// and a bound on what a message costs in the tree formats, element by
/// element (docs/hermes-host.md, "Memory").
pub const DEFAULT_MAX_ELEMENTS: usize = 8 * 1024 * 1024;

/// The smallest `--max-message`: a control line or an extension's frame of
/// an ordinary message must fit.
const MIN_MAX_MESSAGE: usize = 64 * 1024;

/// The smallest `--max-elements`.
const MIN_MAX_ELEMENTS: usize = 100;

/// Flags of the daemon. Shown by `hermes-host --help` and `hermes-host serve --help`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// The TOML file listing the extensions [default: <config dir>/hermes-host/config.toml; a
    /// missing default file means no extensions].
    #[arg(long, env = "HERMES_HOST_CONFIG")]
    pub config: Option<PathBuf>,
    /// The control socket [default: $XDG_RUNTIME_DIR/hermes-host.sock, else hermes-host.sock in the data directory (--data-dir)].
    #[arg(long, env = "HERMES_HOST_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Where extension data directories and logs go [default: <data dir>/hermes-host].
    #[arg(long, env = "HERMES_HOST_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// An HL7 file to open at start.
    #[arg(long, env = "HERMES_HOST_OPEN")]
    pub open: Option<PathBuf>,
    /// Largest message in bytes: a frame from an extension, a control request, a message file.
    #[arg(long, env = "HERMES_HOST_MAX_MESSAGE", default_value_t = DEFAULT_MAX_MESSAGE)]
    #[arg(value_parser = rpc_core::config::bytes_at_least::<MIN_MAX_MESSAGE>)]
    pub max_message: usize,
    /// Most elements in the message held (segments, and the delimiters between fields, repetitions,
    /// components, subcomponents); a message, file or patch past it is refused.
    #[arg(long, env = "HERMES_HOST_MAX_ELEMENTS", default_value_t = DEFAULT_MAX_ELEMENTS)]
    #[arg(value_parser = rpc_core::config::count_at_least::<MIN_MAX_ELEMENTS>)]
    pub max_elements: usize,
    /// A control client or an extension whose replies make no progress for this long while it
    /// owes some is disconnected: one that never reads does not keep its slot and budget
    /// (seconds, or `500ms`). Events alone never disconnect a subscriber.
    #[arg(long, env = "HERMES_HOST_WRITE_STALL", default_value = "30", value_parser = rpc_core::config::seconds)]
    pub write_stall: Duration,
}

/// Flags of `hermes-host ctl`.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// The host's control socket [default: $XDG_RUNTIME_DIR/hermes-host.sock, else <data dir>/hermes-host/hermes-host.sock].
    #[arg(long, env = "HERMES_HOST_SOCKET", global = true)]
    pub socket: Option<PathBuf>,
    /// Print results as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum CtlCommand {
    /// Start a new message, not saved to a file yet: empty, or the contents of FILE (`-`: standard input).
    New {
        file: Option<PathBuf>,
        #[arg(long, default_value = "hl7", value_parser = ["hl7", "json", "yaml", "toml"])]
        format: String,
    },
    /// Open an HL7 file.
    Open { file: PathBuf },
    /// Print the message (hl7 segments one per line, or the json/yaml/toml tree).
    Get {
        /// hl7: the message as it is, one segment per line; json, yaml, toml:
        /// its tree (segments, fields by number, components...), as
        /// `message/get` returns it.
        #[arg(long, default_value = "hl7", value_parser = ["hl7", "json", "yaml", "toml"])]
        format: String,
    },
    /// Replace the message with the contents of FILE (`-`: standard input).
    Set {
        file: PathBuf,
        #[arg(long, default_value = "hl7", value_parser = ["hl7", "json", "yaml", "toml"])]
        format: String,
    },
    /// Patch the message, in order: PATH=VALUE sets (PID.5.1=DOE), PATH= clears,
    /// +SEGMENT adds a segment (+NTE), -SEGMENT removes one (-OBX[2]).
    Patch {
        #[arg(required = true, allow_hyphen_values = true)]
        patches: Vec<String>,
    },
    /// Save the message (atomically) to its file, or to FILE.
    Save { file: Option<PathBuf> },
    /// Run an extension command.
    Run { command: String },
    /// Extensions: `ext list`, `ext reload [NAME]`.
    #[command(subcommand)]
    Ext(ExtCommand),
    /// The last lines an extension wrote to stderr.
    Logs {
        /// The extension's name (`ext list` shows them).
        name: String,
        /// How many of its last lines to print.
        #[arg(long, default_value_t = 100)]
        lines: usize,
    },
    /// The extensions' schemas, merged.
    Schema,
    /// Print events as they come (extension_state, log, message_changed; default all).
    Subscribe { events: Vec<String> },
    /// Be the UI: answer the extensions' dialogs at this terminal.
    Ui,
    /// Call any control method with --arg key=value params.
    Call {
        method: String,
        #[arg(long = "arg", value_parser = rpc_core::cli::parse_arg)]
        args: Vec<(String, Value)>,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ExtCommand {
    /// Name, state, pid, restarts and commands of each extension.
    List,
    /// Re-read the config file and restart every extension, or only NAME.
    Reload { name: Option<String> },
}

/// The control socket a client command talks to: `--socket`, else where a
/// host with the default data directory listens ([`default_socket`]).
pub fn client_socket(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        let data = dirs::data_dir().unwrap_or_else(|| PathBuf::from(".")).join("hermes-host");
        default_socket(&data)
    })
}

/// Flags of `hermes-host mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The host's control socket [default: $XDG_RUNTIME_DIR/hermes-host.sock, else <data dir>/hermes-host/hermes-host.sock].
    #[arg(long, env = "HERMES_HOST_SOCKET")]
    pub socket: Option<PathBuf>,
    /// How long one tool call may wait for the host before the agent gets an
    /// error (seconds or a duration such as 2m).
    #[arg(long, default_value = "60", value_parser = rpc_core::config::seconds)]
    pub timeout: Duration,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The config file (a missing default one means no extensions).
    pub config_file: Option<PathBuf>,
    pub socket: PathBuf,
    pub data_dir: PathBuf,
    pub open: Option<PathBuf>,
    pub max_message: usize,
    pub max_elements: usize,
    pub write_stall: Duration,
    /// What the file said at start.
    pub file: FileConfig,
}

impl Config {
    pub fn from_args(args: ServeArgs) -> Result<Config, ConfigError> {
        let data_dir = match args.data_dir {
            Some(dir) => dir,
            None => dirs::data_dir()
                .map(|d| d.join("hermes-host"))
                .ok_or_else(|| ConfigError::new("HERMES_HOST_DATA_DIR", "no data directory known; set it"))?,
        };
        let socket = args.socket.unwrap_or_else(|| default_socket(&data_dir));
        let config_file_required = args.config.is_some();
        let config_file = args.config.or_else(|| dirs::config_dir().map(|d| d.join("hermes-host").join("config.toml")));
        let setting = if config_file_required { "HERMES_HOST_CONFIG" } else { "the default config file" };
        let file = match &config_file {
            Some(path) if config_file_required || path.exists() => {
                FileConfig::load(path).map_err(|e| ConfigError::new(setting, e))?
            }
            _ => FileConfig::default(),
        };
        if let Some(open) = &args.open
            && !open.is_file()
        {
            return Err(ConfigError::new("HERMES_HOST_OPEN", format!("{} is not a file", open.display())));
        }
        Ok(Config {
            config_file,
            socket,
            data_dir,
            open: args.open,
            max_message: args.max_message,
            max_elements: args.max_elements,
            write_stall: args.write_stall,
            file,
        })
    }
}

/// `$XDG_RUNTIME_DIR/hermes-host.sock`, else in the data directory. The
/// client commands use the same rule.
pub fn default_socket(data_dir: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("hermes-host.sock"),
        None => data_dir.join("hermes-host.sock"),
    }
}

/// The TOML file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// How long an extension has to answer `initialize`.
    #[serde(default = "default_initialize_timeout_ms")]
    pub initialize_timeout_ms: u64,
    #[serde(default)]
    pub ui: UiPolicy,
    #[serde(default)]
    pub extensions: Vec<ExtensionEntry>,
    /// Where relative paths in the file start (its directory).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

fn default_initialize_timeout_ms() -> u64 {
    10_000
}

/// What answers `ui/*` requests when no UI client is attached.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiPolicy {
    /// The answer to `ui/showConfirm`.
    #[serde(default)]
    pub headless_confirm: bool,
}

/// One `[[extensions]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtensionEntry {
    pub name: Option<String>,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

/// One extension, ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtensionSpec {
    pub name: String,
    /// Program and arguments.
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub enabled: bool,
    /// The child's working directory: the config file's, so relative paths work.
    pub cwd: Option<PathBuf>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut file: FileConfig = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        file.base_dir = std::path::absolute(path).ok().and_then(|p| p.parent().map(Path::to_owned));
        file.specs().map_err(|e| format!("{}: {e}", path.display()))?;
        if file.initialize_timeout_ms == 0 {
            return Err(format!("{}: initialize_timeout_ms must be above 0", path.display()));
        }
        Ok(file)
    }

    pub fn initialize_timeout(&self) -> Duration {
        Duration::from_millis(self.initialize_timeout_ms)
    }

    /// The extensions in file order, with unique names.
    pub fn specs(&self) -> Result<Vec<ExtensionSpec>, String> {
        let mut specs: Vec<ExtensionSpec> = Vec::new();
        for (i, entry) in self.extensions.iter().enumerate() {
            let at = format!("extensions[{i}]");
            let argv = match (&entry.command, entry.args.is_empty()) {
                (Some(command), true) => shlex::split(command).filter(|words| !words.is_empty()).ok_or_else(|| {
                    format!("{at}.command: {command:?} is not a command (empty or unbalanced quotes)")
                })?,
                (Some(program), false) => std::iter::once(program.clone()).chain(entry.args.iter().cloned()).collect(),
                (None, false) => entry.args.clone(),
                (None, true) => return Err(format!("{at}: needs `command` or `args`")),
            };
            let base = match &entry.name {
                Some(name) if name.trim().is_empty() => return Err(format!("{at}.name: empty")),
                Some(name) => name.clone(),
                None => default_name(&argv),
            };
            if base.contains(['/', '\0']) || base == "." || base == ".." {
                return Err(format!("{at}.name: {base:?} cannot name a directory"));
            }
            let mut name = base.clone();
            let mut n = 2;
            while specs.iter().any(|s| s.name == name) {
                if entry.name.is_some() {
                    return Err(format!("{at}.name: {base:?} is used twice"));
                }
                name = format!("{base}-{n}");
                n += 1;
            }
            specs.push(ExtensionSpec {
                name,
                argv,
                env: entry.env.clone(),
                enabled: entry.enabled,
                cwd: self.base_dir.clone(),
            });
        }
        Ok(specs)
    }
}

/// `python3 tools/validator.py` -> `validator`: the first argument that looks
/// like a script, else the program.
fn default_name(argv: &[String]) -> String {
    let pick = argv.iter().skip(1).find(|a| !a.starts_with('-') && a.contains('.')).unwrap_or(&argv[0]);
    let file = Path::new(pick).file_stem().map(|s| s.to_string_lossy().into_owned());
    file.filter(|s| !s.is_empty()).unwrap_or_else(|| "extension".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<ExtensionSpec>, String> {
        let file: FileConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        file.specs()
    }

    #[test]
    fn commands_are_split_like_a_shell_and_names_default_to_the_script() {
        let specs = parse(
            r#"
            [[extensions]]
            command = "python3 'my ext/validator.py' --fast"
            env = { KEY = "value" }
            [[extensions]]
            name = "raw"
            args = ["/usr/bin/node", "ext.js"]
            enabled = false
            [[extensions]]
            command = "python3 other/validator.py"
            "#,
        )
        .unwrap();
        assert_eq!(specs[0].argv, ["python3", "my ext/validator.py", "--fast"]);
        assert_eq!(specs[0].name, "validator");
        assert_eq!(specs[0].env["KEY"], "value");
        assert_eq!((specs[1].name.as_str(), specs[1].enabled), ("raw", false));
        assert_eq!(specs[1].argv, ["/usr/bin/node", "ext.js"]);
        assert_eq!(specs[2].name, "validator-2");
    }

    #[test]
    fn mistakes_are_named() {
        assert!(parse("[[extensions]]\ncomand = 'x'").unwrap_err().contains("comand"));
        assert!(parse("[[extensions]]\nname = 'x'").unwrap_err().contains("command"));
        assert!(parse("[[extensions]]\ncommand = \"'unbalanced\"").unwrap_err().contains("unbalanced"));
        let twice = "[[extensions]]\nname='a'\ncommand='x'\n[[extensions]]\nname='a'\ncommand='y'";
        assert!(parse(twice).unwrap_err().contains("twice"));
        assert!(parse("[[extensions]]\nname='../x'\ncommand='x'").is_err());
    }
}
