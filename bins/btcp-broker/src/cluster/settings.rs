//! The cluster's settings (`BTCP_CLUSTER*`, `BTCP_NODE_*`): the flags of
//! `btcp-broker serve` and the checked values the cluster runs with. Without
//! `BTCP_CLUSTER` there are none and the broker is a single node.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rpc_core::config::{ConfigError, millis};

/// The cluster's flags, flattened into `serve`'s.
#[derive(Clone, Debug, Args)]
pub struct ClusterArgs {
    /// NATS server URL(s), comma-separated (`nats://10.0.0.5:4222,nats://10.0.0.6:4222`;
    /// `tls://` for TLS, `nats://user:pass@host` for a password). Empty: no
    /// cluster, this broker alone, sessions in memory.
    #[arg(long, env = "BTCP_CLUSTER", value_delimiter = ',', hide_env_values = true)]
    pub cluster: Vec<String>,
    /// The cluster's name: the prefix of its NATS subjects and of its KV bucket
    /// (`<name>_sessions`), so that several clusters can share one NATS.
    /// Letters, digits, `-` and `_` only.
    #[arg(long, env = "BTCP_CLUSTER_NAME", default_value = "btcp")]
    pub cluster_name: String,
    /// This broker's name in the cluster (directory, logs, /health). Letters,
    /// digits, `-` and `_`. Default: the host name and a random suffix.
    #[arg(long, env = "BTCP_NODE_ID")]
    pub node_id: Option<String>,
    /// A NATS credentials file (`.creds`: JWT and nkey seed).
    #[arg(long, env = "BTCP_CLUSTER_CREDS", value_name = "FILE")]
    pub cluster_creds: Option<PathBuf>,
    /// A NATS authentication token.
    #[arg(long, env = "BTCP_CLUSTER_TOKEN", hide_env_values = true)]
    pub cluster_token: Option<String>,
    /// How often this broker tells the cluster it is alive (ms, or a duration
    /// like `1s`); a node silent for 4 of them is lost.
    #[arg(long, env = "BTCP_NODE_HEARTBEAT", default_value = "250", value_parser = millis)]
    pub node_heartbeat: Duration,
}

/// A running cluster's checked settings.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    pub urls: Vec<String>,
    pub name: String,
    pub node_id: String,
    pub creds: Option<PathBuf>,
    pub token: Option<String>,
    pub heartbeat: Duration,
}

impl ClusterSettings {
    /// `None` without `BTCP_CLUSTER`; the first bad setting is named.
    pub fn from_args(args: &ClusterArgs) -> Result<Option<ClusterSettings>, ConfigError> {
        let urls: Vec<String> = args.cluster.iter().map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect();
        if urls.is_empty() {
            return Ok(None);
        }
        for url in &urls {
            let scheme = url.split_once("://").map(|(scheme, _)| scheme);
            if !matches!(scheme, Some("nats" | "tls")) {
                return Err(ConfigError::new(
                    "BTCP_CLUSTER",
                    format!("{:?} is not a nats:// or tls:// URL", redact(url)),
                ));
            }
        }
        if !is_name(&args.cluster_name) {
            return Err(ConfigError::new(
                "BTCP_CLUSTER_NAME",
                format!(
                    "{:?} must be letters, digits, '-' or '_' (no '.', '*', '>' or spaces: it is a NATS subject token)",
                    args.cluster_name
                ),
            ));
        }
        let node_id = match &args.node_id {
            Some(id) if is_name(id) => id.clone(),
            Some(id) => {
                return Err(ConfigError::new(
                    "BTCP_NODE_ID",
                    format!("{id:?} must be 1 to 64 letters, digits, '-' or '_'"),
                ));
            }
            None => default_node_id(),
        };
        if let Some(creds) = &args.cluster_creds
            && !creds.is_file()
        {
            return Err(ConfigError::new("BTCP_CLUSTER_CREDS", format!("{} is not a readable file", creds.display())));
        }
        Ok(Some(ClusterSettings {
            urls,
            name: args.cluster_name.clone(),
            node_id,
            creds: args.cluster_creds.clone(),
            token: args.cluster_token.clone().filter(|t| !t.is_empty()),
            heartbeat: args.node_heartbeat,
        }))
    }
}

/// A subject token and bucket-name part: nothing NATS gives a meaning to.
fn is_name(text: &str) -> bool {
    (1..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The host's short name with what a subject token cannot hold made `-`,
/// and 6 random hex digits: two brokers on one host differ.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let short: String = host
        .trim()
        .split('.')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .take(48)
        .collect();
    let mut bits = [0u8; 3];
    getrandom::fill(&mut bits).expect("the operating system's random source");
    let suffix: String = bits.iter().map(|b| format!("{b:02x}")).collect();
    if short.is_empty() { format!("node-{suffix}") } else { format!("{short}-{suffix}") }
}

/// A URL fit for a log line or an error: its password, if any, hidden.
pub fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() => {
            let userinfo = &rest[..at - scheme.len() - 3];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{}", &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        cluster: ClusterArgs,
    }

    fn settings(args: &[&str]) -> Result<Option<ClusterSettings>, ConfigError> {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap();
        ClusterSettings::from_args(&cli.cluster)
    }

    #[test]
    fn no_url_is_no_cluster() {
        assert!(settings(&[]).unwrap().is_none());
        assert!(settings(&["--cluster", ""]).unwrap().is_none());
    }

    #[test]
    fn a_cluster_name_nats_would_read_as_a_pattern_is_refused() {
        for bad in ["a.b", "*", ">", "a b", "", "tab\t"] {
            let error = settings(&["--cluster", "nats://127.0.0.1:4222", "--cluster-name", bad]).unwrap_err();
            assert_eq!(error.setting, "BTCP_CLUSTER_NAME", "{bad:?}");
        }
        let ok = settings(&["--cluster", "nats://a:1,tls://b:2", "--cluster-name", "prod_eu-1"]).unwrap().unwrap();
        assert_eq!(ok.urls.len(), 2);
        assert_eq!(ok.heartbeat, Duration::from_millis(250));
        assert!(is_name(&ok.node_id), "{}", ok.node_id);
    }

    #[test]
    fn node_ids_and_urls_are_checked() {
        let error = settings(&["--cluster", "nats://a:1", "--node-id", "a.b"]).unwrap_err();
        assert_eq!(error.setting, "BTCP_NODE_ID");
        let error = settings(&["--cluster", "http://a:1"]).unwrap_err();
        assert_eq!(error.setting, "BTCP_CLUSTER");
        assert_eq!(redact("nats://me:secret@h:4222"), "nats://me:***@h:4222");
        assert_eq!(redact("nats://h:4222"), "nats://h:4222");
    }
}
