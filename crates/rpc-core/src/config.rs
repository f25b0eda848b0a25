//! Configuration rules every daemon shares, one rule each: durations, the
//! address to bind, the address a client command connects to, and "a bind
//! beyond loopback needs a token". So `SUPEX_*`, `BTCP_*` and the rest accept
//! the same spellings and refuse the same things in the same words.
//!
//! No command-line parser here: the functions take text and return typed
//! errors, and `rpc_core::cli` (feature `cli`) plugs them into clap.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// A setting the daemon cannot start with. Shown as one line,
/// `bad configuration: SETTING: PROBLEM`, and exit code 2.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad configuration: {setting}: {problem}")]
pub struct ConfigError {
    /// The setting as the user knows it: its env variable (`BTCP_PORT`),
    /// perhaps with its flag (`BTCP_PORT (--port)`).
    pub setting: String,
    /// What is wrong with it, in words the user can act on.
    pub problem: String,
}

impl ConfigError {
    pub fn new(setting: impl Into<String>, problem: impl fmt::Display) -> ConfigError {
        ConfigError { setting: setting.into(), problem: problem.to_string() }
    }
}

/// Why a value does not parse, before anyone knows which setting it came
/// from (a clap value parser, say). [`ValueError::of`] names the setting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(String);

impl ValueError {
    pub fn new(problem: impl fmt::Display) -> ValueError {
        ValueError(problem.to_string())
    }

    /// The same problem, now naming the setting it belongs to.
    pub fn of(self, setting: impl Into<String>) -> ConfigError {
        ConfigError::new(setting, self.0)
    }
}

/// The unit of a bare number in a duration setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Milliseconds,
    Seconds,
}

impl Unit {
    fn length(self) -> Duration {
        match self {
            Unit::Milliseconds => Duration::from_millis(1),
            Unit::Seconds => Duration::from_secs(1),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Milliseconds => "milliseconds",
            Unit::Seconds => "seconds",
        }
    }
}

/// A duration setting: a bare number (integer or decimal, finite, >= 0) in the
/// setting's `unit`, else a humantime duration (`1m30s`, `500ms`).
///
/// Zero is accepted; a setting that must be positive says so with [`positive`].
pub fn duration(text: &str, unit: Unit) -> Result<Duration, ValueError> {
    let text = text.trim();
    // Integers exactly (1500 ms is 1.5 s, not 1.5000000000000002 s).
    if let Ok(count) = text.parse::<u64>() {
        let nanos = unit.length().as_nanos() * u128::from(count);
        let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_long(text))?;
        return Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32));
    }
    // `f64` also parses `inf` and `NaN`: those are refused here, not read as
    // humantime (which would refuse them with a less helpful message).
    if let Ok(count) = text.parse::<f64>() {
        if !count.is_finite() {
            return Err(ValueError::new(format!("{text:?} is not a finite number of {}", unit.name())));
        }
        if count < 0.0 {
            return Err(ValueError::new(format!("{text:?} is negative")));
        }
        return Duration::try_from_secs_f64(count * unit.length().as_secs_f64()).map_err(|_| too_long(text));
    }
    humantime::parse_duration(text).map_err(|e| {
        ValueError::new(format!("{text:?} is neither a number of {} nor a duration like 1m30s: {e}", unit.name()))
    })
}

fn too_long(text: &str) -> ValueError {
    ValueError::new(format!("{text:?} is too long a duration"))
}

/// For a duration setting where zero makes no sense (a timeout, an interval).
pub fn positive(duration: Duration) -> Result<Duration, ValueError> {
    if duration.is_zero() {
        return Err(ValueError::new("must be longer than zero"));
    }
    Ok(duration)
}

/// The value parsers every daemon's settings use (clap's `value_parser =
/// rpc_core::config::seconds`), so that one spelling means one thing in every
/// daemon. Each returns [`ValueError`]; `cli` names the setting around it.
///
/// Seconds, more than zero: a timeout, an interval.
pub fn seconds(text: &str) -> Result<Duration, ValueError> {
    duration(text, Unit::Seconds).and_then(positive)
}

/// Seconds where zero means "none" (no grace, no delay between retries).
pub fn seconds_or_zero(text: &str) -> Result<Duration, ValueError> {
    duration(text, Unit::Seconds)
}

/// Milliseconds, more than zero.
pub fn millis(text: &str) -> Result<Duration, ValueError> {
    duration(text, Unit::Milliseconds).and_then(positive)
}

/// Milliseconds where zero means "none".
pub fn millis_or_zero(text: &str) -> Result<Duration, ValueError> {
    duration(text, Unit::Milliseconds)
}

/// A switch: `true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`, in any case;
/// empty is off (a variable set to nothing is not a request to turn
/// something on).
pub fn switch(text: &str) -> Result<bool, ValueError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ValueError::new(format!("{text:?} is not a switch: use true or false (yes/no, on/off, 1/0)"))),
    }
}

/// A size in bytes, at least `MIN` (a budget smaller than a message cannot work).
pub fn bytes_at_least<const MIN: usize>(text: &str) -> Result<usize, ValueError> {
    let bytes = whole_number(text)?;
    if bytes < MIN {
        return Err(ValueError::new(format!("must be at least {MIN} bytes")));
    }
    Ok(bytes)
}

/// A count, at least `MIN` (connections, lines, retries).
pub fn count_at_least<const MIN: usize>(text: &str) -> Result<usize, ValueError> {
    let count = whole_number(text)?;
    if count < MIN {
        return Err(ValueError::new(format!("must be at least {MIN}")));
    }
    Ok(count)
}

fn whole_number(text: &str) -> Result<usize, ValueError> {
    text.trim().parse().map_err(|_| ValueError::new(format!("{text:?} is not a whole number")))
}

/// The address to listen on for `host` and `port`.
///
/// `localhost` is 127.0.0.1 without asking DNS (a resolver may answer `::1`
/// first, or something else entirely); an IP literal is taken as it is, with
/// or without brackets (`::1`, `[::1]`); any other name is resolved and its
/// first address used.
pub fn bind_address(setting: &str, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    let host = host.trim();
    if host.is_empty() {
        return Err(ConfigError::new(setting, "empty; give an address such as 127.0.0.1"));
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Some(ip) = ip_literal(host) {
        return Ok(SocketAddr::new(ip, port));
    }
    match (host, port).to_socket_addrs() {
        Ok(mut addrs) => {
            addrs.next().ok_or_else(|| ConfigError::new(setting, format!("{host} resolves to no address")))
        }
        Err(e) => Err(ConfigError::new(setting, format!("cannot resolve {host}: {e}"))),
    }
}

/// Where a client command connects to reach a daemon bound to `host`, as
/// `host:port` (fit for a socket address or a URL authority). A wildcard bind
/// (`0.0.0.0`, `::`) is reached on the loopback address of the same family;
/// an empty host means the default, 127.0.0.1; names are left to the resolver.
pub fn connect_address(host: &str, port: u16) -> String {
    let host = host.trim();
    if host.is_empty() {
        return SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port).to_string();
    }
    match ip_literal(host) {
        Some(IpAddr::V4(ip)) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port).to_string(),
        Some(IpAddr::V6(ip)) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port).to_string(),
        // Brackets added for IPv6.
        Some(ip) => SocketAddr::new(ip, port).to_string(),
        None => format!("{host}:{port}"),
    }
}

/// A bind beyond loopback hands the daemon to anyone who can reach the
/// machine, so it needs a token. `setting` names where the address came from
/// (`BTCP_HOST`, or a socket systemd passed); an empty token is no token.
pub fn check_exposure(setting: &str, ip: IpAddr, token_setting: &str, token: Option<&str>) -> Result<(), ConfigError> {
    if ip.is_loopback() || token.is_some_and(|t| !t.is_empty()) {
        return Ok(());
    }
    Err(ConfigError::new(setting, format!("{ip} is not a loopback address; set {token_setting} to listen on it")))
}

/// `host` as an IP address, brackets allowed around IPv6.
fn ip_literal(host: &str) -> Option<IpAddr> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_number_is_in_the_settings_unit() {
        assert_eq!(duration("1500", Unit::Milliseconds), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("300", Unit::Seconds), Ok(Duration::from_secs(300)));
        assert_eq!(duration(" 30 ", Unit::Seconds), Ok(Duration::from_secs(30)));
        assert_eq!(duration("0.25", Unit::Seconds), Ok(Duration::from_millis(250)));
        assert_eq!(duration("2.5", Unit::Milliseconds), Ok(Duration::from_micros(2500)));
        assert_eq!(duration("0", Unit::Seconds), Ok(Duration::ZERO));
    }

    #[test]
    fn anything_else_is_a_humantime_duration() {
        assert_eq!(duration("1m30s", Unit::Seconds), Ok(Duration::from_secs(90)));
        assert_eq!(duration("500ms", Unit::Seconds), Ok(Duration::from_millis(500)));
        assert_eq!(duration("2s", Unit::Milliseconds), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn negative_infinite_and_unreadable_durations_are_refused() {
        assert!(duration("-1", Unit::Seconds).unwrap_err().to_string().contains("negative"));
        assert!(duration("inf", Unit::Seconds).unwrap_err().to_string().contains("finite"));
        assert!(duration("NaN", Unit::Seconds).is_err());
        assert!(duration("1e30", Unit::Seconds).unwrap_err().to_string().contains("too long"));
        assert!(duration(&u64::MAX.to_string(), Unit::Seconds).is_ok());
        let soon = duration("soon", Unit::Milliseconds).unwrap_err().to_string();
        assert!(soon.contains("milliseconds") && soon.contains("1m30s"), "{soon}");
    }

    #[test]
    fn positive_refuses_zero_only() {
        assert!(positive(Duration::ZERO).is_err());
        assert_eq!(positive(Duration::from_nanos(1)), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn the_shared_parsers_say_the_same_thing_in_every_daemon() {
        assert_eq!(seconds("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(seconds("0").unwrap_err().to_string(), "must be longer than zero");
        assert_eq!(seconds_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(millis("1500"), Ok(Duration::from_millis(1500)));
        assert!(millis("0").is_err());
        assert_eq!(millis_or_zero("0"), Ok(Duration::ZERO));
        for on in ["1", "true", "YES", "On"] {
            assert_eq!(switch(on), Ok(true), "{on}");
        }
        for off in ["", "0", "false", "no", "OFF"] {
            assert_eq!(switch(off), Ok(false), "{off}");
        }
        assert!(switch("maybe").unwrap_err().to_string().contains("true or false"));
        assert_eq!(bytes_at_least::<1024>("1024"), Ok(1024));
        assert_eq!(bytes_at_least::<1024>("1023").unwrap_err().to_string(), "must be at least 1024 bytes");
        assert!(bytes_at_least::<1024>("8M").unwrap_err().to_string().contains("whole number"));
        assert_eq!(count_at_least::<1>("0").unwrap_err().to_string(), "must be at least 1");
        assert_eq!(count_at_least::<1>(" 7 "), Ok(7));
    }

    #[test]
    fn config_errors_read_as_one_line_naming_the_setting() {
        let error = ValueError::new("must be longer than zero").of("BTCP_KEEPALIVE");
        assert_eq!(error.to_string(), "bad configuration: BTCP_KEEPALIVE: must be longer than zero");
    }

    #[test]
    fn bind_address_takes_localhost_ip_literals_and_names() {
        let at = |host| bind_address("X_HOST", host, 80);
        assert_eq!(at("localhost"), Ok("127.0.0.1:80".parse().unwrap()));
        assert_eq!(at("LocalHost"), Ok("127.0.0.1:80".parse().unwrap()));
        assert_eq!(at("0.0.0.0"), Ok("0.0.0.0:80".parse().unwrap()));
        assert_eq!(at("::1"), Ok("[::1]:80".parse().unwrap()));
        assert_eq!(at("[::]"), Ok("[::]:80".parse().unwrap()));
    }

    #[test]
    fn bind_address_says_why_it_cannot() {
        let error = bind_address("X_HOST", "", 80).unwrap_err();
        assert_eq!(error.setting, "X_HOST");
        assert!(error.problem.contains("empty"));
        let error = bind_address("X_HOST", "no-such-host.invalid", 80).unwrap_err();
        assert_eq!(error.setting, "X_HOST");
        assert!(error.problem.contains("no-such-host.invalid"), "{error}");
        assert!(bind_address("X_HOST", "[::1", 80).is_err());
    }

    #[test]
    fn wildcards_are_reached_on_loopback_of_the_same_family() {
        assert_eq!(connect_address("0.0.0.0", 9), "127.0.0.1:9");
        assert_eq!(connect_address("::", 9), "[::1]:9");
        assert_eq!(connect_address("[::]", 9), "[::1]:9");
        assert_eq!(connect_address("", 9), "127.0.0.1:9");
        assert_eq!(connect_address("::1", 9), "[::1]:9");
        assert_eq!(connect_address("[fe80::2]", 9), "[fe80::2]:9");
        assert_eq!(connect_address("10.0.0.2", 9), "10.0.0.2:9");
        assert_eq!(connect_address("localhost", 9), "localhost:9");
        assert_eq!(connect_address("broker.example", 9), "broker.example:9");
    }

    #[test]
    fn beyond_loopback_a_token_is_needed() {
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let v6_loopback: IpAddr = "::1".parse().unwrap();
        let wildcard: IpAddr = "0.0.0.0".parse().unwrap();
        assert_eq!(check_exposure("X_HOST", loopback, "X_TOKEN", None), Ok(()));
        assert_eq!(check_exposure("X_HOST", v6_loopback, "X_TOKEN", None), Ok(()));
        assert_eq!(check_exposure("X_HOST", wildcard, "X_TOKEN", Some("secret")), Ok(()));
        let error = check_exposure("X_HOST", wildcard, "X_TOKEN", Some("")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "bad configuration: X_HOST: 0.0.0.0 is not a loopback address; set X_TOKEN to listen on it"
        );
    }
}
