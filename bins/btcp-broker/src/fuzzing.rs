//! The entry point of the `http_request` fuzz target, kept here so that plain
//! tests run it too: an HTTP request head from anyone who can reach the port,
//! through every parser the broker applies before routing or upgrading.
//! Beyond "no panic" it asserts that path normalisation is idempotent and
//! keeps the segments and the query, that the Origin policy is exactly the
//! documented one, and that what passes a check is what the check promises.

use axum::http::{HeaderName, HeaderValue, Request, Uri, header};

use crate::http::request::{self, MAX_SESSION_ID};

/// The request target on the first line, then one `Name: value` header a
/// line. Lines that hyper would refuse (an invalid URI, a header name or
/// value it cannot carry) are skipped, as hyper never lets them through.
pub fn http_request(data: &[u8]) {
    let mut lines = data.split(|&b| b == b'\n');
    let Ok(uri) = Uri::try_from(lines.next().unwrap_or_default()) else { return };
    let mut req = Request::builder().uri(uri).body(()).expect("a request with a valid URI");
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else { continue };
        let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(&line[..colon]), HeaderValue::from_bytes(line[colon + 1..].trim_ascii()))
        else {
            continue;
        };
        req.headers_mut().append(name, value);
    }

    let before = req.uri().clone();
    request::normalize_path(&mut req);
    let once = req.uri().clone();
    request::normalize_path(&mut req);
    assert_eq!(req.uri(), &once, "normalize_path is not idempotent on {before}");
    let path = once.path();
    if !before.path().is_empty() && before.path() != "*" {
        assert!(!path.contains("//") && (path == "/" || !path.ends_with('/')), "{before} -> {once}");
    }
    let segments = |p: &str| p.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(segments(path), segments(before.path()), "{before} -> {once}");
    assert_eq!((once.query(), once.scheme(), once.authority()), (before.query(), before.scheme(), before.authority()));

    if let Ok(query) = request::query(&once) {
        if let Some(token) = request::bearer_token(req.headers(), &query) {
            let from_query = query.get("token").map(String::as_str) == Some(token);
            assert!(from_query || token == token.trim(), "{token:?}");
        }
        if let Ok(Some(id)) = request::session_id(&query) {
            assert!(!id.is_empty() && id.len() <= MAX_SESSION_ID && !id.chars().any(char::is_control), "{id:?}");
        }
    }

    let list = ["https://app.example".to_owned(), "chrome-extension://abc".to_owned()];
    for origin in req.headers().get_all(header::ORIGIN) {
        let text = origin.to_str().unwrap_or("");
        assert_eq!(request::origin_allowed(None, text), loopback_page(text), "{text:?}");
        let listed = list.contains(&text.trim_end_matches('/').to_ascii_lowercase());
        assert_eq!(request::origin_allowed(Some(&list), text), listed, "{text:?}");
    }
    if let Some(length) = request::declared_length(req.headers()) {
        let text = req.headers()[header::CONTENT_LENGTH].to_str().unwrap().trim();
        assert_eq!(text.parse::<u64>().ok(), Some(length));
    }
    request::lists_token(req.headers(), header::UPGRADE, "websocket");
    request::lists_token(req.headers(), header::CONNECTION, "upgrade");
}

/// The documented default policy, written out plainly: `http` or `https`,
/// host `localhost`, `127.0.0.1` or `[::1]`, and no port or a port of
/// decimal digits below 65536; any case, trailing slashes ignored.
fn loopback_page(origin: &str) -> bool {
    let origin = origin.trim_end_matches('/').to_ascii_lowercase();
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    ["localhost", "127.0.0.1", "[::1]"].iter().any(|host| match rest.strip_prefix(host) {
        Some("") => true,
        Some(port) => port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()),
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed seeds (fuzz/seeds/http_request/): a cheap stand-in for
    /// the fuzzer in every test run.
    #[test]
    fn the_seed_corpus_passes() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/http_request");
        let entries = std::fs::read_dir(&seeds).unwrap_or_else(|e| panic!("{}: {e}", seeds.display()));
        for entry in entries {
            http_request(&std::fs::read(entry.unwrap().path()).unwrap());
        }
    }
}
