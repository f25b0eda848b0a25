//! The command line of `supex-bridge` (every subcommand and its flags, each
//! setting with its env variable) and the validated [`Config`] the daemon
//! runs with.
//!
//! Every check that can fail happens here, before anything listens: a bad
//! setting stops the daemon with one line naming it and exit code 2. The
//! rules shared with the other daemons (durations, switches, sizes, bind
//! address, "beyond loopback needs a token") are rpc-core's; SUPEX_ALLOW_REMOTE
//! is this daemon's own rule on top.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use rpc_core::cli::{CommonCommand, LogArgs};
use rpc_core::config::{self, ConfigError};

use crate::paths::{AllowedRoots, PathPolicy};

/// A Supex-style bridge (JSON-RPC over TCP) and REPL in front of a live Ruby runtime.
///
/// Without a subcommand it runs the daemon (`serve`).
#[derive(Debug, Parser)]
#[command(name = "supex-bridge", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// The man pages' EXIT STATUS section (`man supex-bridge`), a paragraph per block.
pub const EXIT_STATUS: &str = "0: the bridge stopped cleanly (SIGTERM or SIGINT: evaluations drained, Ruby stopped), or a client command (call, repl, ping, mcp) succeeded.\n\n1: a failure at run time (a port in use, a listener that failed), a second signal (stop at once), or a client command that failed: the bridge could not be reached, refused hello, or the tool reported an error (call prints it).\n\n2: bad configuration or usage, one line naming the setting (SUPEX_PORT (--port): ...).\n\n3: ping: the bridge answers but its Ruby runtime is unavailable.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the bridge and REPL servers with their Ruby runtime (the default).
    Serve(ServeArgs),
    /// Call one bridge tool and print its result as JSON.
    Call(CallArgs),
    /// An interactive Ruby console on the REPL server.
    Repl(ReplArgs),
    /// Health check: exit 0 when the bridge answers and runs Ruby, 3 when it answers without Ruby, 1 when nothing answers.
    Ping(PingArgs),
    /// A Model Context Protocol server on stdio for AI agents: the bridge's tools,
    /// reached through the running bridge (same settings as `call`).
    Mcp(McpArgs),
    #[command(flatten)]
    Common(CommonCommand),
}

/// Flags of the daemon. Shown by `supex-bridge --help` and `supex-bridge serve --help`.
#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    /// Address the bridge listens on.
    #[arg(long, env = "SUPEX_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port of the bridge (JSON-RPC over NDJSON).
    #[arg(long, env = "SUPEX_PORT", default_value_t = 9876)]
    pub port: u16,
    /// Address the REPL server listens on.
    #[arg(long, env = "SUPEX_REPL_HOST", default_value = "127.0.0.1")]
    pub repl_host: String,
    /// Port of the REPL server.
    #[arg(long, env = "SUPEX_REPL_PORT", default_value_t = 4433)]
    pub repl_port: u16,
    /// Do not run the REPL server.
    #[arg(long, env = "SUPEX_REPL_DISABLED", value_parser = config::switch)]
    pub repl_disabled: bool,
    /// Token every client must give in `hello` (both servers). Unset: no token.
    #[arg(long, env = "SUPEX_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// Allow a non-loopback bind address (a token is required as well).
    #[arg(long, env = "SUPEX_ALLOW_REMOTE", value_parser = config::switch)]
    pub allow_remote: bool,
    /// Colon-separated directories file-taking tools may touch; `*` disables the check.
    /// When set, a client's `hello` workspace must lie inside them (else -32002); unset,
    /// a workspace becomes an extra root for that connection.
    #[arg(long, env = "SUPEX_ALLOWED_ROOTS")]
    pub allowed_roots: Option<String>,
    /// Project directory: always allowed, and the base of relative paths [default: current directory].
    #[arg(long, env = "SUPEX_PROJECT_ROOT")]
    pub project_root: Option<PathBuf>,
    /// Ruby interpreter to run (split like a shell would: `bundle exec ruby` works).
    #[arg(long, env = "SUPEX_RUBY", default_value = "ruby")]
    pub ruby: String,
    /// Longest one evaluation may run, in seconds (or `1m30s`); then the runtime is restarted.
    #[arg(long, env = "SUPEX_EVAL_TIMEOUT", default_value = "30", value_parser = config::seconds)]
    pub eval_timeout: Duration,
    /// Largest request line accepted, in bytes.
    #[arg(long, env = "SUPEX_MAX_MESSAGE", default_value_t = 10_485_760, value_parser = config::bytes_at_least::<1024>)]
    pub max_message: usize,
    /// Most connections served at once, per server.
    #[arg(long, env = "SUPEX_MAX_CONNECTIONS", default_value_t = 64, value_parser = config::count_at_least::<1>)]
    pub max_connections: usize,
    /// A connection that has not said `hello` within this time is closed (seconds, or `500ms`).
    /// Connections without a hello may also take only half of SUPEX_MAX_CONNECTIONS: past that
    /// the oldest of them is closed to admit a new one.
    #[arg(long, env = "SUPEX_HELLO_TIMEOUT", default_value = "10", value_parser = config::seconds)]
    pub hello_timeout: Duration,
    /// Bytes of replies one connection may have waiting to be written; past it the
    /// connection's next requests wait (a client that never reads holds no more).
    #[arg(long, env = "SUPEX_WRITE_BUDGET", default_value_t = rpc_core::peer::DEFAULT_WRITE_BUDGET,
          value_parser = config::bytes_at_least::<1024>)]
    pub write_budget: usize,
    /// Bytes of requests and notifications one connection may have waiting to run;
    /// past it requests are answered `overloaded` and notifications (and id-less
    /// legacy calls, which wait with them) dropped.
    #[arg(long, env = "SUPEX_BACKLOG_BYTES", default_value_t = rpc_core::peer::DEFAULT_BACKLOG_BYTES,
          value_parser = config::bytes_at_least::<1024>)]
    pub backlog_bytes: usize,
    /// A connection whose replies make no progress for this long while it owes some is
    /// closed: a client that never reads does not hold its slot and budget (seconds, or `500ms`).
    #[arg(long, env = "SUPEX_WRITE_STALL", default_value = "30", value_parser = config::seconds)]
    pub write_stall: Duration,
    /// Directory of the runtime console log [default: <data dir>/supex-bridge/logs].
    #[arg(long, env = "SUPEX_LOG_DIR")]
    pub log_dir: Option<PathBuf>,
}

/// Flags of `supex-bridge call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// The tool, e.g. `eval_ruby` (or a method such as `tools/list`).
    pub tool: String,
    /// One argument as key=value; the value is JSON when it parses as JSON, except
    /// where the tool's schema wants a string. Repeatable.
    #[arg(long = "arg", value_name = "KEY=VALUE")]
    pub args: Vec<String>,
    /// All arguments as one JSON object; `--arg`s are applied on top.
    #[arg(long, value_name = "JSON")]
    pub json: Option<String>,
    #[command(flatten)]
    pub bridge: BridgeArgs,
    /// Workspace for this call: an extra allowed root and the base of relative paths.
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// How long to wait for the result (seconds or a duration such as 2m).
    #[arg(long, default_value = "300", value_parser = config::seconds)]
    pub timeout: Duration,
}

/// Where a client finds the bridge, and its token.
#[derive(Debug, Args)]
pub struct BridgeArgs {
    /// Host of the bridge.
    #[arg(long, env = "SUPEX_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port of the bridge.
    #[arg(long, env = "SUPEX_PORT", default_value_t = 9876)]
    pub port: u16,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// A client's token, as every daemon's clients spell it (`--token`, the
/// old spelling, is kept as an alias).
#[derive(Debug, Args)]
pub struct AuthArgs {
    /// The token the bridge asks for in `hello` (its SUPEX_AUTH_TOKEN).
    #[arg(long = "auth-token", alias = "token", env = "SUPEX_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
}

/// Flags of `supex-bridge repl`.
#[derive(Debug, Args)]
pub struct ReplArgs {
    /// Host of the REPL server.
    #[arg(long, env = "SUPEX_REPL_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port of the REPL server.
    #[arg(long, env = "SUPEX_REPL_PORT", default_value_t = 4433)]
    pub port: u16,
    #[command(flatten)]
    pub auth: AuthArgs,
    /// History file [default: <data dir>/supex-bridge/repl_history].
    #[arg(long, env = "SUPEX_REPL_HISTORY")]
    pub history: Option<PathBuf>,
}

/// Flags of `supex-bridge ping`.
#[derive(Debug, Args)]
pub struct PingArgs {
    /// Host of the bridge.
    #[arg(long, env = "SUPEX_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port of the bridge.
    #[arg(long, env = "SUPEX_PORT", default_value_t = 9876)]
    pub port: u16,
    /// Ping the REPL server instead of the bridge.
    #[arg(long)]
    pub repl: bool,
    /// Host of the REPL server (with --repl).
    #[arg(long, env = "SUPEX_REPL_HOST", default_value = "127.0.0.1")]
    pub repl_host: String,
    /// Port of the REPL server (with --repl).
    #[arg(long, env = "SUPEX_REPL_PORT", default_value_t = 4433)]
    pub repl_port: u16,
    /// How long to wait for the answer, in seconds (or a duration such as 500ms).
    #[arg(long, default_value = "5", value_parser = config::seconds)]
    pub timeout: Duration,
}

/// Flags of `supex-bridge mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub bridge: BridgeArgs,
    /// Workspace for the agent: an extra allowed root (only when the bridge has
    /// no SUPEX_ALLOWED_ROOTS, or inside them) and the base of relative paths.
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// How long one tool call may take before the agent gets an error
    /// (seconds or a duration such as 2m).
    #[arg(long, default_value = "300", value_parser = config::seconds)]
    pub timeout: Duration,
}

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    pub bridge_addr: SocketAddr,
    pub repl_addr: Option<SocketAddr>,
    pub auth_token: Option<String>,
    pub policy: PathPolicy,
    /// The interpreter command, already split into program and arguments.
    pub ruby: Vec<String>,
    pub eval_timeout: Duration,
    pub max_message: usize,
    pub max_connections: usize,
    pub hello_timeout: Duration,
    pub write_budget: usize,
    pub backlog_bytes: usize,
    pub write_stall: Duration,
    pub log_dir: Option<PathBuf>,
}

impl Config {
    /// Validates the flags; the first problem names its setting.
    pub fn from_args(args: ServeArgs) -> Result<Config, ConfigError> {
        let auth_token = args.auth_token.filter(|t| !t.is_empty());
        let bridge_addr = config::bind_address("SUPEX_HOST", &args.host, args.port)?;
        check_exposure("SUPEX_HOST", bridge_addr, args.allow_remote, auth_token.as_deref())?;
        let repl_addr = if args.repl_disabled {
            None
        } else {
            let addr = config::bind_address("SUPEX_REPL_HOST", &args.repl_host, args.repl_port)?;
            check_exposure("SUPEX_REPL_HOST", addr, args.allow_remote, auth_token.as_deref())?;
            Some(addr)
        };
        if let Some(repl) = repl_addr
            && repl == bridge_addr
            && args.port != 0
        {
            return Err(ConfigError::new(
                "SUPEX_REPL_PORT",
                format!("the REPL and the bridge cannot both listen on {repl}"),
            ));
        }
        let ruby = shlex::split(&args.ruby).filter(|words| !words.is_empty()).ok_or_else(|| {
            ConfigError::new("SUPEX_RUBY", format!("{:?} is not a command (empty or unbalanced quotes)", args.ruby))
        })?;
        let policy = path_policy(args.allowed_roots.as_deref(), args.project_root.as_deref())?;
        let log_dir = args.log_dir.or_else(|| dirs::data_dir().map(|d| d.join("supex-bridge").join("logs")));
        Ok(Config {
            bridge_addr,
            repl_addr,
            auth_token,
            policy,
            ruby,
            eval_timeout: args.eval_timeout,
            max_message: args.max_message,
            max_connections: args.max_connections,
            hello_timeout: args.hello_timeout,
            write_budget: args.write_budget,
            backlog_bytes: args.backlog_bytes,
            write_stall: args.write_stall,
            log_dir,
        })
    }
}

/// A non-loopback address would hand arbitrary Ruby evaluation to the network:
/// on top of the token every daemon requires there, it takes an explicit opt-in.
fn check_exposure(setting: &str, addr: SocketAddr, allow_remote: bool, token: Option<&str>) -> Result<(), ConfigError> {
    let ip = addr.ip();
    if !ip.is_loopback() && !allow_remote {
        return Err(ConfigError::new(
            setting,
            format!(
                "{ip} is not a loopback address; anyone who can reach it could run Ruby code here. \
                 Set SUPEX_ALLOW_REMOTE=1 and SUPEX_AUTH_TOKEN to allow it"
            ),
        ));
    }
    config::check_exposure(setting, ip, "SUPEX_AUTH_TOKEN", token)
}

fn path_policy(allowed: Option<&str>, project_root: Option<&Path>) -> Result<PathPolicy, ConfigError> {
    let project_setting =
        if project_root.is_some() { "SUPEX_PROJECT_ROOT" } else { "SUPEX_PROJECT_ROOT (unset: the current directory)" };
    let project = match project_root {
        Some(dir) => dir.to_owned(),
        None => std::env::current_dir()
            .map_err(|e| ConfigError::new(project_setting, format!("cannot read the current directory: {e}")))?,
    };
    let project = std::fs::canonicalize(&project)
        .map_err(|e| ConfigError::new(project_setting, format!("{}: {e}", project.display())))?;
    if !project.is_dir() {
        return Err(ConfigError::new(project_setting, format!("{} is not a directory", project.display())));
    }
    let roots = match allowed.map(str::trim) {
        Some("*") => {
            tracing::warn!("SUPEX_ALLOWED_ROOTS='*': file tools may read and write anywhere this user can");
            AllowedRoots::Anywhere
        }
        None | Some("") => AllowedRoots::Only(Vec::new()),
        Some(list) => AllowedRoots::Only(
            list.split(':')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    std::fs::canonicalize(p).ok().filter(|c| c.is_dir()).ok_or_else(|| {
                        ConfigError::new("SUPEX_ALLOWED_ROOTS", format!("{p} is not an existing directory"))
                    })
                })
                .collect::<Result<_, _>>()?,
        ),
    };
    // A service started with cwd `/` must not open the whole disk by accident.
    if project == Path::new("/") && !matches!(roots, AllowedRoots::Anywhere) {
        return Err(ConfigError::new(
            project_setting,
            "the project root is /, which would let file tools touch the whole disk; \
             set SUPEX_PROJECT_ROOT to the project directory (or SUPEX_ALLOWED_ROOTS='*' to really allow everything)",
        ));
    }
    Ok(PathPolicy::new(roots, project))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_take_auth_token_as_every_daemon_spells_it_and_token_still() {
        use clap::Parser;
        for (flag, sub) in
            [("--auth-token", "call"), ("--token", "call"), ("--auth-token", "mcp"), ("--auth-token", "repl")]
        {
            let args: Vec<&str> = match sub {
                "call" => vec!["supex-bridge", "call", "ping", flag, "secret"],
                _ => vec!["supex-bridge", sub, flag, "secret"],
            };
            let token = match Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}")).command {
                Some(Command::Call(call)) => call.bridge.auth.auth_token,
                Some(Command::Mcp(mcp)) => mcp.bridge.auth.auth_token,
                Some(Command::Repl(repl)) => repl.auth.auth_token,
                _ => None,
            };
            assert_eq!(token.as_deref(), Some("secret"), "{args:?}");
        }
    }

    #[test]
    fn beyond_loopback_takes_allow_remote_and_then_a_token() {
        let wide: SocketAddr = "0.0.0.0:1".parse().unwrap();
        let error = check_exposure("SUPEX_HOST", wide, false, Some("t")).unwrap_err();
        assert!(error.setting == "SUPEX_HOST" && error.problem.contains("SUPEX_ALLOW_REMOTE=1"), "{error}");
        let error = check_exposure("SUPEX_REPL_HOST", wide, true, None).unwrap_err();
        assert!(error.setting == "SUPEX_REPL_HOST" && error.problem.contains("SUPEX_AUTH_TOKEN"), "{error}");
        assert!(check_exposure("SUPEX_HOST", wide, true, Some("t")).is_ok());
        assert!(check_exposure("SUPEX_HOST", "[::1]:1".parse().unwrap(), false, None).is_ok());
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn sizes_and_counts_keep_their_floor() {
        let parse = |args: &[&str]| Cli::try_parse_from(["supex-bridge"].iter().chain(args));
        assert!(parse(&["--max-message", "1023"]).is_err());
        assert_eq!(parse(&["--max-message", "1024"]).unwrap().serve.max_message, 1024);
        assert!(parse(&["--max-connections", "0"]).is_err());
        assert!(parse(&["--write-budget", "100"]).is_err());
        assert!(parse(&["--backlog-bytes", "100"]).is_err());
        assert!(parse(&["--hello-timeout", "0"]).is_err());
    }
}
