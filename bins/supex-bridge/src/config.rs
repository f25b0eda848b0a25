//! Settings of `supex-bridge serve`: the flags (each with its env variable), and
//! their validation into a [`Config`] the server can trust.
//!
//! Every check that can fail happens here, before anything listens: a bad
//! setting stops the daemon with one line naming it and exit code 2.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rpc_core::cli::config_error;
use rpc_core::listen;

use crate::paths::{AllowedRoots, PathPolicy};

/// Flags of the daemon. Shown by `supex-bridge --help` and `supex-bridge serve --help`.
#[derive(Clone, Debug, clap::Args)]
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
    #[arg(long, env = "SUPEX_REPL_DISABLED", value_parser = parse_switch)]
    pub repl_disabled: bool,
    /// Token every client must give in `hello` (both servers). Unset: no token.
    #[arg(long, env = "SUPEX_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// Allow a non-loopback bind address (a token is required as well).
    #[arg(long, env = "SUPEX_ALLOW_REMOTE", value_parser = parse_switch)]
    pub allow_remote: bool,
    /// Colon-separated directories file-taking tools may touch; `*` disables the check.
    #[arg(long, env = "SUPEX_ALLOWED_ROOTS")]
    pub allowed_roots: Option<String>,
    /// Project directory: always allowed, and the base of relative paths [default: current directory].
    #[arg(long, env = "SUPEX_PROJECT_ROOT")]
    pub project_root: Option<PathBuf>,
    /// Ruby interpreter to run (split like a shell would: `bundle exec ruby` works).
    #[arg(long, env = "SUPEX_RUBY", default_value = "ruby")]
    pub ruby: String,
    /// Longest one evaluation may run, in seconds (or `1m30s`); then the runtime is restarted.
    #[arg(long, env = "SUPEX_EVAL_TIMEOUT", default_value = "30", value_parser = parse_seconds)]
    pub eval_timeout: Duration,
    /// Largest request line accepted, in bytes.
    #[arg(long, env = "SUPEX_MAX_MESSAGE", default_value_t = 10_485_760)]
    pub max_message: usize,
    /// Most connections served at once, per server.
    #[arg(long, env = "SUPEX_MAX_CONNECTIONS", default_value_t = 64)]
    pub max_connections: usize,
    /// Directory of the runtime console log [default: <data dir>/supex-bridge/logs].
    #[arg(long, env = "SUPEX_LOG_DIR")]
    pub log_dir: Option<PathBuf>,
}

/// An on/off setting: `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`; empty is off.
pub fn parse_switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" | "off" => Ok(false),
        "1" | "true" | "yes" | "on" => Ok(true),
        other => Err(format!("expected 1 or 0 (or true/false, yes/no, on/off), got {other:?}")),
    }
}

/// Seconds as a plain number (`30`, `0.5`) or a humantime duration (`1m30s`).
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let duration = match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs < 1e9 => Duration::from_secs_f64(secs),
        Ok(_) => return Err(format!("{text:?} is not a positive number of seconds")),
        Err(_) => humantime::parse_duration(text.trim())
            .map_err(|e| format!("{text:?} is neither seconds nor a duration like 1m30s: {e}"))?,
    };
    if duration.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(duration)
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
    pub log_dir: Option<PathBuf>,
}

impl Config {
    /// Validates the flags; exits with code 2 naming the setting on the first problem.
    pub fn from_args(args: ServeArgs) -> Config {
        let auth_token = args.auth_token.filter(|t| !t.is_empty());
        let bridge_addr = bind_address("SUPEX_HOST", &args.host, args.port);
        check_exposure("SUPEX_HOST", &args.host, args.allow_remote, &auth_token);
        let repl_addr = (!args.repl_disabled).then(|| {
            check_exposure("SUPEX_REPL_HOST", &args.repl_host, args.allow_remote, &auth_token);
            bind_address("SUPEX_REPL_HOST", &args.repl_host, args.repl_port)
        });
        if let Some(repl) = repl_addr
            && repl == bridge_addr
            && args.port != 0
        {
            config_error("SUPEX_REPL_PORT", format!("the REPL and the bridge cannot both listen on {repl}"));
        }
        if args.max_message < 1024 {
            config_error("SUPEX_MAX_MESSAGE", "must be at least 1024 bytes");
        }
        if args.max_connections == 0 {
            config_error("SUPEX_MAX_CONNECTIONS", "must be at least 1");
        }
        let ruby = shlex::split(&args.ruby).filter(|words| !words.is_empty()).unwrap_or_else(|| {
            config_error("SUPEX_RUBY", format!("{:?} is not a command (empty or unbalanced quotes)", args.ruby))
        });
        let policy = path_policy(args.allowed_roots.as_deref(), args.project_root.as_deref());
        let log_dir = args.log_dir.or_else(|| dirs::data_dir().map(|d| d.join("supex-bridge").join("logs")));
        Config {
            bridge_addr,
            repl_addr,
            auth_token,
            policy,
            ruby,
            eval_timeout: args.eval_timeout,
            max_message: args.max_message,
            max_connections: args.max_connections,
            log_dir,
        }
    }
}

/// A non-loopback address would hand arbitrary Ruby evaluation to the network:
/// it takes both an explicit opt-in and a token.
fn check_exposure(setting: &str, host: &str, allow_remote: bool, token: &Option<String>) {
    if listen::is_loopback(host) {
        return;
    }
    if !allow_remote {
        config_error(
            setting,
            format!(
                "{host} is not a loopback address; anyone who can reach it could run Ruby code here. \
                 Set SUPEX_ALLOW_REMOTE=1 and SUPEX_AUTH_TOKEN to allow it"
            ),
        );
    }
    if token.is_none() {
        config_error("SUPEX_AUTH_TOKEN", format!("binding to the non-loopback address {host} requires a token"));
    }
}

fn bind_address(setting: &str, host: &str, port: u16) -> SocketAddr {
    if host.eq_ignore_ascii_case("localhost") {
        return SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    }
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>() {
        return SocketAddr::new(ip, port);
    }
    match (host, port).to_socket_addrs() {
        Ok(mut addrs) => {
            addrs.next().unwrap_or_else(|| config_error(setting, format!("{host} resolves to no address")))
        }
        Err(e) => config_error(setting, format!("cannot resolve {host}: {e}")),
    }
}

fn path_policy(allowed: Option<&str>, project_root: Option<&Path>) -> PathPolicy {
    let project_setting =
        if project_root.is_some() { "SUPEX_PROJECT_ROOT" } else { "SUPEX_PROJECT_ROOT (unset: the current directory)" };
    let project = match project_root {
        Some(dir) => dir.to_owned(),
        None => std::env::current_dir()
            .unwrap_or_else(|e| config_error(project_setting, format!("cannot read the current directory: {e}"))),
    };
    let project = std::fs::canonicalize(&project)
        .unwrap_or_else(|e| config_error(project_setting, format!("{}: {e}", project.display())));
    if !project.is_dir() {
        config_error(project_setting, format!("{} is not a directory", project.display()));
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
                    std::fs::canonicalize(p).ok().filter(|c| c.is_dir()).unwrap_or_else(|| {
                        config_error("SUPEX_ALLOWED_ROOTS", format!("{p} is not an existing directory"))
                    })
                })
                .collect(),
        ),
    };
    // A service started with cwd `/` must not open the whole disk by accident.
    if project == Path::new("/") && !matches!(roots, AllowedRoots::Anywhere) {
        config_error(
            project_setting,
            "the project root is /, which would let file tools touch the whole disk; \
             set SUPEX_PROJECT_ROOT to the project directory (or SUPEX_ALLOWED_ROOTS='*' to really allow everything)",
        );
    }
    PathPolicy::new(roots, project)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_read_like_a_person_would_write_them() {
        for on in ["1", "true", "YES", " on "] {
            assert_eq!(parse_switch(on), Ok(true), "{on}");
        }
        for off in ["", "0", "false", "no", "Off"] {
            assert_eq!(parse_switch(off), Ok(false), "{off}");
        }
        assert!(parse_switch("maybe").is_err());
    }

    #[test]
    fn seconds_accept_numbers_and_durations() {
        assert_eq!(parse_seconds("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_seconds("0.25").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_seconds("1m30s").unwrap(), Duration::from_secs(90));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("soon").is_err());
        assert!(parse_seconds("inf").is_err());
    }
}
