//! What the broker reads from an HTTP request before routing or upgrading
//! it: the path (normalised), the query string, the bearer token, the
//! session id, the declared body length, the Origin, and the tokens and key
//! of a WebSocket handshake.
//!
//! Pure functions of the request's parts, with no broker state: the library
//! target (`lib.rs`) exposes this module so that the fuzz targets run exactly
//! what the daemon runs; the handlers in `http/` turn their answers into
//! refusals.

use std::collections::HashMap;

use axum::http::uri::PathAndQuery;
use axum::http::{HeaderMap, HeaderName, Request, Uri, header};

/// Longest accepted session id.
pub const MAX_SESSION_ID: usize = 256;

/// Collapses repeated slashes in the request path and drops a trailing one,
/// before routing: the public btcp-client builds `ws://host:port//ws` from the
/// base URL its docs show, and `http://host:port//message` from one given with
/// a trailing slash.
pub fn normalize_path<B>(request: &mut Request<B>) {
    let path = request.uri().path();
    if !path.contains("//") && (path.len() <= 1 || !path.ends_with('/')) {
        return;
    }
    let mut clean = String::with_capacity(path.len());
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        clean.push('/');
        clean.push_str(segment);
    }
    if clean.is_empty() {
        clean.push('/');
    }
    if let Some(query) = request.uri().query() {
        clean.push('?');
        clean.push_str(query);
    }
    let mut parts = request.uri().clone().into_parts();
    let Ok(path_and_query) = PathAndQuery::try_from(clean) else {
        return;
    };
    parts.path_and_query = Some(path_and_query);
    if let Ok(uri) = Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
}

/// With no list: loopback pages only (`http(s)://localhost|127.0.0.1|[::1]`,
/// any port). With a list: exactly those origins.
pub fn origin_allowed(allowed: Option<&[String]>, origin: &str) -> bool {
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    if let Some(list) = allowed {
        return list.contains(&origin);
    }
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    let (host, port) = match rest.strip_prefix("[::1]") {
        Some(port) => ("[::1]", port),
        None => rest.find(':').map_or((rest, ""), |i| rest.split_at(i)),
    };
    matches!(host, "localhost" | "127.0.0.1" | "[::1]") && (port.is_empty() || valid_port(port))
}

/// Whether a request naming `host` (its `Host` header) may be served. A page
/// that rebinds its own name to 127.0.0.1 (DNS rebinding) still sends that
/// name: on a loopback address only loopback names (`localhost`,
/// `*.localhost`, 127.0.0.0/8, `[::1]`) and the `allowed` ones are served.
/// Beyond loopback every client needs the token; without a list any host is
/// served there, with one only loopback names and the list. Any port.
pub fn host_allowed(host: &str, allowed: Option<&[String]>, on_loopback: bool) -> bool {
    let host = host.to_ascii_lowercase();
    let (name, port) = match host.find(']') {
        Some(end) if host.starts_with('[') => host.split_at(end + 1),
        _ => host.find(':').map_or((host.as_str(), ""), |i| host.split_at(i)),
    };
    if !(port.is_empty() || valid_port(port)) {
        return false;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    if loopback_name(name) {
        return true;
    }
    match allowed {
        Some(list) => list.iter().any(|entry| *entry == name || *entry == host),
        None => !on_loopback,
    }
}

/// `localhost`, a name under `.localhost` (RFC 6761: loopback), or a
/// loopback address (`[::1]` in brackets, as a Host header writes it).
fn loopback_name(name: &str) -> bool {
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()));
    }
    name.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// `:` and decimal digits below 65536; `parse` alone would also take a sign.
fn valid_port(text: &str) -> bool {
    text.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok())
}

/// A query parameter whose name or value is not UTF-8 once percent-decoded.
#[derive(Debug, PartialEq, Eq)]
pub struct NotUtf8 {
    /// The parameter's name (its invalid bytes shown as U+FFFD).
    pub name: String,
}

/// The query string as a map (last value wins), decoded as a form is (`+`
/// is a space, `%XX` a byte). Text that is not UTF-8 once decoded is refused
/// rather than patched with U+FFFD: `%FFa` and `%FEa` would be the same
/// session id.
pub fn query(uri: &Uri) -> Result<HashMap<String, String>, NotUtf8> {
    let mut map = HashMap::new();
    for pair in uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = String::from_utf8(form_decode(name))
            .map_err(|e| NotUtf8 { name: String::from_utf8_lossy(e.as_bytes()).into_owned() })?;
        let Ok(value) = String::from_utf8(form_decode(value)) else {
            return Err(NotUtf8 { name });
        };
        map.insert(name, value);
    }
    Ok(map)
}

/// `application/x-www-form-urlencoded` decoding to bytes: a `%` not
/// followed by two hex digits is kept as it is.
fn form_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (hex(i + 1), hex(i + 2))
        {
            out.push((high * 16 + low) as u8);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    out
}

/// The token a client presents: `Authorization: Bearer <token>`, else the
/// `token` query parameter (browsers cannot set WebSocket headers).
pub fn bearer_token<'a>(headers: &'a HeaderMap, query: &'a HashMap<String, String>) -> Option<&'a str> {
    let from_header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    from_header.or(query.get("token").map(String::as_str))
}

/// The `sessionId` query parameter: absent or empty is none; too long or
/// holding control characters is refused, with the reason.
pub fn session_id(query: &HashMap<String, String>) -> Result<Option<&str>, String> {
    match query.get("sessionId").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(id) if id.len() > MAX_SESSION_ID => Err(format!("sessionId is longer than {MAX_SESSION_ID} bytes")),
        Some(id) if id.chars().any(char::is_control) => Err("sessionId contains control characters".into()),
        Some(id) => Ok(Some(id)),
    }
}

/// The body length a `Content-Length` header declares, if it is a number.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// Whether `key` is a `Sec-WebSocket-Key` as RFC 6455 (4.1) requires it: the
/// base64 of 16 bytes, which is 22 base64 digits and `==`.
pub fn websocket_key_valid(key: &[u8]) -> bool {
    let is_digit = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    key.len() == 24 && key[..22].iter().all(is_digit) && &key[22..] == b"=="
}

/// Whether any `name` header lists `token` among its comma-separated values,
/// in any case (`Connection: keep-alive, Upgrade`).
pub fn lists_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_and_trailing_slashes_are_forgiven() {
        for (given, routed) in [
            ("//ws?sessionId=s&clientType=browser", "/ws?sessionId=s&clientType=browser"),
            ("/ws/", "/ws"),
            ("///events//?a=b//c", "/events?a=b//c"),
            ("//message", "/message"),
            ("/", "/"),
            ("//", "/"),
            ("/health", "/health"),
            ("http://127.0.0.1:8765//ws?x=1", "http://127.0.0.1:8765/ws?x=1"),
        ] {
            let mut request = Request::builder().uri(given).body(()).unwrap();
            normalize_path(&mut request);
            assert_eq!(request.uri().to_string(), routed, "{given}");
        }
    }

    #[test]
    fn a_query_is_decoded_as_a_form_and_must_be_utf8() {
        let parsed = |q: &str| query(&Uri::try_from(format!("/ws?{q}")).unwrap());
        let map = parsed("a=1&a=2&b=x+y%20z&c=%e2%82%ac&d=%zz%4&e&=f").unwrap();
        assert_eq!(map["a"], "2");
        assert_eq!(map["b"], "x y z");
        assert_eq!(map["c"], "€");
        assert_eq!(map["d"], "%zz%4");
        assert_eq!(map["e"], "");
        assert_eq!(map[""], "f");
        assert_eq!(parsed("sessionId=%FFab"), Err(NotUtf8 { name: "sessionId".into() }));
        assert_eq!(parsed("sessionId=%FEab"), Err(NotUtf8 { name: "sessionId".into() }));
        assert_eq!(parsed("x%C3=1"), Err(NotUtf8 { name: "x\u{fffd}".into() }));
        assert!(query(&Uri::from_static("/ws")).unwrap().is_empty());
    }

    #[test]
    fn default_origins_are_loopback_pages_only() {
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8765",
            "http://[::1]:8080",
            "http://LOCALHOST:1/",
        ] {
            assert!(origin_allowed(None, ok), "{ok}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil:80",
            "http://localhost:notaport",
            "chrome-extension://abc",
            "ftp://localhost",
        ] {
            assert!(!origin_allowed(None, bad), "{bad}");
        }
    }

    /// Found by the http_request fuzz target: `u16::from_str` takes a
    /// leading `+`, so `http://localhost:+80` passed as a loopback page.
    #[test]
    fn a_port_is_digits_only() {
        for bad in ["http://localhost:+000/", "http://127.0.0.1:+80", "http://[::1]:-1", "http://localhost: 80"] {
            assert!(!origin_allowed(None, bad), "{bad}");
        }
        assert!(origin_allowed(None, "http://localhost:080"));
    }

    #[test]
    fn a_websocket_key_is_the_base64_of_16_bytes() {
        assert!(websocket_key_valid(b"dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(websocket_key_valid(b"AAAAAAAAAAAAAAAAAAAAAA=="));
        for bad in [
            &b""[..],
            b"short",
            b"!!!notbase64!!!",
            b"dGhlIHNhbXBsZQ==",
            b"dGhlIHNhbXBsZSBub25jZQ",
            b"dGhlIHNhbXBsZSBub25jZQ=== ",
            b"dGhlIHNhbXBsZSBub25jZSE=",
            b"dGhlIHNhbXBsZSBub25j!Q==",
        ] {
            assert!(!websocket_key_valid(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn on_loopback_only_loopback_hosts_and_listed_ones_are_served() {
        for ok in [
            "localhost",
            "LOCALHOST:8765",
            "localhost.:80",
            "app.localhost:3000",
            "127.0.0.1:8765",
            "127.3.2.1",
            "[::1]:8765",
            "[::1]",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(host_allowed(ok, None, true), "{ok}");
        }
        for bad in [
            "attacker.example:8765",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "10.0.0.1:8765",
            "[::2]:80",
            "localhost:+80",
            "localhost:x",
            "[::1",
            "",
        ] {
            assert!(!host_allowed(bad, None, true), "{bad}");
        }
        let list = vec!["broker.lan".to_owned(), "proxy.example:443".to_owned()];
        assert!(host_allowed("Broker.lan:8765", Some(&list), true));
        assert!(host_allowed("proxy.example:443", Some(&list), true));
        assert!(!host_allowed("proxy.example:80", Some(&list), true));
        assert!(host_allowed("localhost:1", Some(&list), true));
        assert!(!host_allowed("attacker.example", Some(&list), true));
    }

    #[test]
    fn beyond_loopback_any_host_is_served_unless_a_list_is_given() {
        assert!(host_allowed("10.0.0.5:8765", None, false));
        assert!(host_allowed("broker.example", None, false));
        let list = vec!["broker.example".to_owned()];
        assert!(host_allowed("broker.example:8765", Some(&list), false));
        assert!(host_allowed("127.0.0.1:8765", Some(&list), false));
        assert!(!host_allowed("10.0.0.5:8765", Some(&list), false));
    }

    #[test]
    fn a_configured_list_is_matched_exactly() {
        let list = vec!["https://app.example".to_owned(), "chrome-extension://abc".to_owned()];
        assert!(origin_allowed(Some(&list), "https://app.example"));
        assert!(origin_allowed(Some(&list), "chrome-extension://abc"));
        assert!(!origin_allowed(Some(&list), "http://localhost"));
        assert!(!origin_allowed(Some(&list), "https://app.example.evil"));
    }
}
