//! Command line and settings: every setting is a flag with an `BTCP_*` env name.
//!
//! `serve` is the default command, so its settings are accepted both at the top
//! level (`btcp-broker --port 9000`) and after `serve`. The endpoint settings
//! (host, port, token) are global because the client commands need them too.
//! Every value is read by rpc-core's parsers (durations, switches, sizes and
//! counts with a minimum), and the bind address and "beyond loopback needs a
//! token" follow rpc-core's rules, as in every daemon: one spelling means one
//! thing everywhere.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use rpc_core::cli::LogArgs;
use rpc_core::config::{self, ConfigError, bytes_at_least, count_at_least, millis, seconds, seconds_or_zero, switch};

use crate::cluster::settings::{ClusterArgs, ClusterSettings};

#[derive(Debug, Parser)]
#[command(
    name = "btcp-broker",
    version,
    about = "BTCP session broker: AI agents call tools that browser pages provide."
)]
pub struct Cli {
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The man pages' EXIT STATUS section (`man btcp-broker`), a paragraph per block.
pub const EXIT_STATUS: &str = "0: the broker stopped cleanly (SIGTERM or SIGINT: calls in flight answered, connections closed with 1001), or a client command (call, sessions, tools, mcp) succeeded.\n\n1: a failure at run time (a port in use), a second signal (stop at once), or a client command that failed: the broker could not be reached, the session or tool does not exist, the call failed, or the tool reported an error.\n\n2: bad configuration or usage, one line naming the setting (BTCP_PORT (--port): ...).";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the broker (the default).
    Serve(Box<ServeArgs>),
    /// List the sessions of a running broker.
    Sessions {
        /// Print the broker's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the tools a session's browser registered.
    Tools {
        /// The session id.
        session: String,
        /// Print the tools as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool as an agent and print its result.
    Call {
        /// The session id.
        session: String,
        /// The tool name.
        tool: String,
        /// An argument, `key=value` (value parsed as JSON when it is JSON); repeatable.
        #[arg(long = "arg", value_name = "KEY=VALUE", value_parser = parse_tool_arg)]
        args: Vec<(String, serde_json::Value)>,
        /// Call timeout in milliseconds (the broker caps it).
        #[arg(long, value_name = "MS")]
        timeout: Option<u64>,
        /// Print the raw JSON result instead of its text content.
        #[arg(long)]
        json: bool,
    },
    /// A Model Context Protocol server on stdio for AI agents: the tools of one
    /// session's browser page, through the running broker (as an agent).
    Mcp {
        /// The session whose browser tools to offer (`demo`: the demo page's).
        #[arg(long)]
        session: String,
        /// Timeout of each forwarded tool call (ms, or a duration like `2m`);
        /// default: the broker's BTCP_CALL_TIMEOUT. The broker caps it.
        #[arg(long, value_parser = millis)]
        call_timeout: Option<Duration>,
    },
    #[command(flatten)]
    Common(rpc_core::cli::CommonCommand),
}

fn parse_tool_arg(text: &str) -> Result<(String, serde_json::Value), String> {
    rpc_core::cli::parse_arg(text)
}

/// Where the broker listens (serve) or where the client commands find it
/// (under their own heading, after a subcommand's own options).
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Broker")]
pub struct EndpointArgs {
    /// Address to listen on (serve) or connect to (client commands).
    #[arg(long, env = "BTCP_HOST", default_value = "127.0.0.1", global = true)]
    pub host: String,
    /// Port to listen on or connect to.
    #[arg(long, env = "BTCP_PORT", default_value_t = 8765, global = true)]
    pub port: u16,
    /// The broker's shared secret (`Authorization: Bearer` or `token=`): a
    /// client presents it; serve asks it of every client, and needs one to
    /// listen on a non-loopback address.
    #[arg(long, env = "BTCP_AUTH_TOKEN", hide_env_values = true, global = true)]
    pub auth_token: Option<String>,
}

/// The broker's limits and timeouts.
#[derive(Clone, Debug, Args)]
pub struct ServeArgs {
    /// Comma-separated list of allowed `Origin`s (e.g. `https://app.example`).
    /// Default: no Origin header, or http(s)://localhost|127.0.0.1|[::1] on any port.
    #[arg(long, env = "BTCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Comma-separated list of extra host names (`Host` header, e.g.
    /// `broker.lan` or `proxy.example:443`) the broker answers to. On a loopback
    /// address it answers only to localhost, *.localhost, 127.0.0.0/8 and [::1]
    /// (against DNS rebinding) and to these; beyond loopback, to any host
    /// unless this is set.
    #[arg(long, env = "BTCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Default tools/call timeout (ms, or a duration like `30s`).
    #[arg(long, env = "BTCP_CALL_TIMEOUT", default_value = "30000", value_parser = millis)]
    pub call_timeout: Duration,
    /// Longest timeout an agent may ask for (ms, or a duration like `5m`).
    #[arg(long, env = "BTCP_MAX_CALL_TIMEOUT", default_value = "300000", value_parser = millis)]
    pub max_call_timeout: Duration,
    /// A session with no browser and no agents is removed after this long
    /// (seconds, or a duration like `500ms`).
    #[arg(long, env = "BTCP_SESSION_IDLE_TTL", default_value = "300", value_parser = seconds_or_zero)]
    pub session_idle_ttl: Duration,
    /// Agents allowed in one session.
    #[arg(long, env = "BTCP_MAX_AGENTS_PER_SESSION", default_value_t = 16, value_parser = count_at_least::<1>)]
    pub max_agents_per_session: usize,
    /// Largest JSON-RPC message (bytes) on any transport.
    #[arg(long, env = "BTCP_MAX_MESSAGE", default_value_t = 4 * 1024 * 1024, value_parser = bytes_at_least::<1024>)]
    pub max_message: usize,
    /// Tools one session may register.
    #[arg(long, env = "BTCP_MAX_TOOLS_PER_SESSION", default_value_t = 256, value_parser = count_at_least::<1>)]
    pub max_tools_per_session: usize,
    /// Sessions the broker holds at once.
    #[arg(long, env = "BTCP_MAX_SESSIONS", default_value_t = 10_000, value_parser = count_at_least::<1>)]
    pub max_sessions: usize,
    /// tools/call per agent per second (token bucket); 0 disables the limit.
    #[arg(long, env = "BTCP_RATE_LIMIT", default_value_t = 50.0)]
    pub rate_limit: f64,
    /// Calls an agent may make in a burst above the rate.
    #[arg(long, env = "BTCP_RATE_BURST", default_value_t = 100.0)]
    pub rate_burst: f64,
    /// Browser and agent connections (WebSocket and SSE) held at once.
    #[arg(long, env = "BTCP_MAX_CONNECTIONS", default_value_t = 20_000, value_parser = count_at_least::<1>)]
    pub max_connections: usize,
    /// Interval of WebSocket pings to detect dead peers, two missed and the
    /// peer is dropped (seconds, or a duration like `500ms`).
    #[arg(long, env = "BTCP_KEEPALIVE", default_value = "30", value_parser = seconds)]
    pub keepalive: Duration,
    /// How long `/mcp` keeps a session id's door (its agent connection) with
    /// no MCP request and no response still streaming (seconds, or a
    /// duration like `10m`).
    #[arg(long, env = "BTCP_MCP_IDLE", default_value = "600", value_parser = seconds)]
    pub mcp_idle: Duration,
    /// MCP sessions (`initialize` on `/mcp`) alive at once, over every
    /// session id; past it a new one is refused with 503.
    #[arg(long, env = "BTCP_MAX_MCP_SESSIONS", default_value_t = 1024, value_parser = count_at_least::<1>)]
    pub max_mcp_sessions: usize,
    /// Time in-flight calls get to finish on SIGTERM before connections close
    /// (seconds, or a duration like `500ms`).
    #[arg(long, env = "BTCP_SHUTDOWN_GRACE", default_value = "5", value_parser = seconds_or_zero)]
    pub shutdown_grace: Duration,
    /// Bytes of messages one connection may have waiting to be written; past it
    /// its next requests wait (an agent that never reads holds no more).
    #[arg(
        long,
        env = "BTCP_WRITE_BUDGET",
        default_value_t = rpc_core::peer::DEFAULT_WRITE_BUDGET,
        value_parser = bytes_at_least::<1024>
    )]
    pub write_budget: usize,
    /// Bytes of requests and notifications one connection may have waiting to
    /// run; past it requests are answered `overloaded` and notifications dropped.
    #[arg(
        long,
        env = "BTCP_BACKLOG_BYTES",
        default_value_t = rpc_core::peer::DEFAULT_BACKLOG_BYTES,
        value_parser = bytes_at_least::<1024>
    )]
    pub backlog_bytes: usize,
    /// A connection whose messages make no progress for this long while it owes
    /// replies is closed: an agent that never reads does not hold its slot and
    /// budget (seconds, or `500ms`).
    #[arg(long, env = "BTCP_WRITE_STALL", default_value = "30", value_parser = seconds)]
    pub write_stall: Duration,
    /// Bytes of tool lists kept for browsers that have left (until they return
    /// or the idle TTL); past it the lists of the browsers that left longest
    /// ago are dropped first.
    #[arg(long, env = "BTCP_TOOLS_BUDGET", default_value_t = DEFAULT_TOOLS_BUDGET)]
    pub tools_budget: usize,
    /// Let a POST to /message that names only a session (`X-Session-ID` or
    /// `sessionId`, as the public client's HTTP transport does) speak for that
    /// session's SSE browser. Whoever knows the session id can then act as that
    /// browser; `false` requires the client id from the welcome.
    #[arg(
        long,
        env = "BTCP_SSE_SESSION_FALLBACK",
        default_value = "true",
        value_name = "BOOL",
        action = ArgAction::Set,
        value_parser = switch
    )]
    pub sse_session_fallback: bool,
    /// Several brokers as one service, through NATS (`BTCP_CLUSTER`).
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Default of `BTCP_TOOLS_BUDGET`: 64 MiB.
pub const DEFAULT_TOOLS_BUDGET: usize = 64 * 1024 * 1024;

/// Validated settings of a running broker.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub auth_token: Option<String>,
    pub allowed_origins: Option<Vec<String>>,
    /// `None`: loopback names only on a loopback address, any host beyond.
    pub allowed_hosts: Option<Vec<String>>,
    pub call_timeout: Duration,
    pub max_call_timeout: Duration,
    pub session_idle_ttl: Duration,
    pub max_agents_per_session: usize,
    pub max_message: usize,
    pub max_tools_per_session: usize,
    pub max_sessions: usize,
    pub rate_limit: f64,
    pub rate_burst: f64,
    pub max_connections: usize,
    pub keepalive: Duration,
    pub mcp_idle: Duration,
    pub max_mcp_sessions: usize,
    pub shutdown_grace: Duration,
    pub write_budget: usize,
    pub backlog_bytes: usize,
    pub write_stall: Duration,
    pub tools_budget: usize,
    pub sse_session_fallback: bool,
    /// `None`: a single broker (no `BTCP_CLUSTER`).
    pub cluster: Option<ClusterSettings>,
}

impl Config {
    /// Checks the settings; the first bad one is named in the error.
    pub fn from_args(endpoint: &EndpointArgs, serve: &ServeArgs) -> Result<Config, ConfigError> {
        let listen = config::bind_address("BTCP_HOST", &endpoint.host, endpoint.port)?;
        let auth_token = endpoint.auth_token.clone().filter(|t| !t.is_empty());
        config::check_exposure("BTCP_HOST", listen.ip(), "BTCP_AUTH_TOKEN", auth_token.as_deref())?;
        let allowed_origins = allowed_origins(&serve.allowed_origins)?;
        let allowed_hosts = allowed_hosts(&serve.allowed_hosts)?;
        if serve.max_call_timeout < serve.call_timeout {
            return Err(ConfigError::new("BTCP_MAX_CALL_TIMEOUT", "must be at least BTCP_CALL_TIMEOUT"));
        }
        if !(serve.rate_limit >= 0.0 && serve.rate_limit.is_finite()) {
            return Err(ConfigError::new("BTCP_RATE_LIMIT", "must be a number >= 0"));
        }
        if !(serve.rate_burst >= 1.0 && serve.rate_burst.is_finite()) {
            return Err(ConfigError::new("BTCP_RATE_BURST", "must be a number >= 1"));
        }
        Ok(Config {
            listen,
            auth_token,
            allowed_origins,
            allowed_hosts,
            call_timeout: serve.call_timeout,
            max_call_timeout: serve.max_call_timeout,
            session_idle_ttl: serve.session_idle_ttl,
            max_agents_per_session: serve.max_agents_per_session,
            max_message: serve.max_message,
            max_tools_per_session: serve.max_tools_per_session,
            max_sessions: serve.max_sessions,
            rate_limit: serve.rate_limit,
            rate_burst: serve.rate_burst,
            max_connections: serve.max_connections,
            keepalive: serve.keepalive,
            mcp_idle: serve.mcp_idle,
            max_mcp_sessions: serve.max_mcp_sessions,
            shutdown_grace: serve.shutdown_grace,
            write_budget: serve.write_budget,
            backlog_bytes: serve.backlog_bytes,
            write_stall: serve.write_stall,
            tools_budget: serve.tools_budget,
            sse_session_fallback: serve.sse_session_fallback,
            cluster: ClusterSettings::from_args(&serve.cluster)?,
        })
    }
}

/// `BTCP_ALLOWED_ORIGINS` as the Origin policy compares them (lowercase, no
/// trailing slash); none given is `None`, the loopback-pages default.
fn allowed_origins(list: &[String]) -> Result<Option<Vec<String>>, ConfigError> {
    if list.is_empty() {
        return Ok(None);
    }
    let mut origins = Vec::new();
    for origin in list.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
        if !(origin.starts_with("http://") || origin.starts_with("https://") || origin.contains("-extension://")) {
            return Err(ConfigError::new(
                "BTCP_ALLOWED_ORIGINS",
                format!("{origin:?} is not an origin like https://app.example"),
            ));
        }
        origins.push(origin.trim_end_matches('/').to_ascii_lowercase());
    }
    Ok(Some(origins))
}

/// `BTCP_ALLOWED_HOSTS` as the Host policy compares them (lowercase); none
/// given is `None`.
fn allowed_hosts(list: &[String]) -> Result<Option<Vec<String>>, ConfigError> {
    let hosts: Vec<String> =
        list.iter().map(|h| h.trim()).filter(|h| !h.is_empty()).map(str::to_ascii_lowercase).collect();
    if let Some(bad) = hosts.iter().find(|h| h.contains(['/', '@', ' ', '*'])) {
        return Err(ConfigError::new(
            "BTCP_ALLOWED_HOSTS",
            format!("{bad:?} is not a host name like broker.lan or broker.lan:8765"),
        ));
    }
    Ok((!hosts.is_empty()).then_some(hosts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which shared rule each setting follows: a timeout, an interval or a
    /// stall refuses zero; a grace or a TTL takes zero as "none"; sizes and
    /// counts have their floor.
    #[test]
    fn each_setting_takes_its_rule_from_rpc_core() {
        let parses = |flag: &str, value: &str| Cli::try_parse_from(["btcp-broker", flag, value]).is_ok();
        for flag in ["--call-timeout", "--max-call-timeout", "--keepalive", "--write-stall"] {
            assert!(!parses(flag, "0"), "{flag} 0");
            assert!(parses(flag, "1500") && parses(flag, "2s"), "{flag}");
        }
        for flag in ["--shutdown-grace", "--session-idle-ttl"] {
            assert!(parses(flag, "0") && parses(flag, "250ms"), "{flag}");
        }
        for flag in ["--max-message", "--write-budget", "--backlog-bytes"] {
            assert!(!parses(flag, "1023") && parses(flag, "1024"), "{flag}");
        }
        for flag in ["--max-agents-per-session", "--max-tools-per-session", "--max-sessions", "--max-connections"] {
            assert!(!parses(flag, "0") && parses(flag, "1"), "{flag}");
        }
        let cli = Cli::try_parse_from(["btcp-broker", "--call-timeout", "1500", "--keepalive", "0.5"]).unwrap();
        assert_eq!(cli.serve.call_timeout, Duration::from_millis(1500));
        assert_eq!(cli.serve.keepalive, Duration::from_millis(500));
    }

    fn config_of(args: &[&str]) -> Result<Config, ConfigError> {
        let cli = Cli::try_parse_from(args).unwrap();
        Config::from_args(&cli.endpoint, &cli.serve)
    }

    #[test]
    fn a_non_loopback_address_needs_a_token() {
        let error = config_of(&["btcp-broker", "--host", "0.0.0.0"]).unwrap_err();
        assert_eq!(error.setting, "BTCP_HOST");
        assert!(error.problem.contains("BTCP_AUTH_TOKEN"), "{error}");
        assert!(config_of(&["btcp-broker", "--host", "0.0.0.0", "--auth-token", "t"]).is_ok());
        let config = config_of(&["btcp-broker", "--host", "[::1]", "--port", "9"]).unwrap();
        assert_eq!(config.listen, "[::1]:9".parse().unwrap());
    }

    #[test]
    fn every_setting_parses_with_defaults() {
        let cli = Cli::try_parse_from(["btcp-broker"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.endpoint.port, 8765);
        assert_eq!(cli.serve.max_agents_per_session, 16);
        let cli = Cli::try_parse_from(["btcp-broker", "--port", "9", "call", "s", "t", "--arg", "a=1"]).unwrap();
        assert_eq!(cli.endpoint.port, 9);
        assert!(matches!(cli.command, Some(Command::Call { ref args, .. }) if args.len() == 1));
    }

    #[test]
    fn allowed_hosts_are_a_list_of_names() {
        assert_eq!(config_of(&["btcp-broker"]).unwrap().allowed_hosts, None);
        let config = config_of(&["btcp-broker", "--allowed-hosts", "Broker.LAN, proxy.example:443,"]).unwrap();
        assert_eq!(config.allowed_hosts, Some(vec!["broker.lan".to_owned(), "proxy.example:443".to_owned()]));
        let error = config_of(&["btcp-broker", "--allowed-hosts", "http://broker.lan"]).unwrap_err();
        assert_eq!(error.setting, "BTCP_ALLOWED_HOSTS");
    }

    #[test]
    fn the_session_fallback_is_on_unless_turned_off() {
        assert!(config_of(&["btcp-broker"]).unwrap().sse_session_fallback);
        for off in ["false", "0", "no", "off", ""] {
            let config = config_of(&["btcp-broker", "--sse-session-fallback", off]).unwrap();
            assert!(!config.sse_session_fallback, "{off}");
        }
        assert!(Cli::try_parse_from(["btcp-broker", "--sse-session-fallback", "maybe"]).is_err());
        assert_eq!(config_of(&["btcp-broker"]).unwrap().tools_budget, DEFAULT_TOOLS_BUDGET);
    }
}
