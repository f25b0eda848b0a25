//! Who may use the page. A loopback port is open to every local user and,
//! through the user's own browser, to any web page, unlike the 0600
//! control socket; so every request is checked, in this order:
//!
//! 1. `Host` must name the bind address or `localhost` with the port (421
//!    otherwise): a page that rebinds its own name to 127.0.0.1 (DNS
//!    rebinding) sends its own name. A wildcard bind (`0.0.0.0`) is reached
//!    under names we cannot know, and needs a token the user set.
//! 2. `Origin`, when sent, must be the page's own (403): no other site's
//!    script may open the live channel or send anything. Browsers send it on
//!    every WebSocket and on every request that can change anything.
//! 3. The token (401): the `hermes-host-<port>` cookie (HttpOnly,
//!    SameSite=Strict: set when the page's URL is first opened with
//!    `?token=`), `Authorization: Bearer`, or `?token=`. Compared in
//!    constant time, never logged.

use std::net::SocketAddr;

use axum::http::{HeaderMap, StatusCode, Uri, header};

/// Why a request is refused, as the status it gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    ForeignHost,
    ForeignOrigin,
    NoToken,
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::ForeignHost => StatusCode::MISDIRECTED_REQUEST,
            Refusal::ForeignOrigin => StatusCode::FORBIDDEN,
            Refusal::NoToken => StatusCode::UNAUTHORIZED,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::ForeignHost => "this server answers only to its own address (Host)",
            Refusal::ForeignOrigin => "requests from other sites are refused (Origin)",
            Refusal::NoToken => "open the page with its token: `hermes-host ctl web` prints the URL",
        }
    }
}

pub struct Access {
    token: String,
    cookie: String,
    /// The `Host` values accepted (lower case); `None`: any (a wildcard bind).
    hosts: Option<Vec<String>>,
}

impl Access {
    pub fn new(listen: SocketAddr, token: String) -> Access {
        let port = listen.port();
        let hosts = (!listen.ip().is_unspecified()).then(|| {
            let mut hosts = vec![format!("{listen}"), format!("localhost:{port}")];
            // A browser leaves out the scheme's default port.
            if port == 80 {
                let ip = SocketAddr::new(listen.ip(), 80).to_string();
                hosts.extend([ip.trim_end_matches(":80").to_owned(), "localhost".to_owned()]);
            }
            hosts
        });
        Access { token, cookie: format!("hermes-host-{port}"), hosts }
    }

    /// The whole check of a request, in the order above.
    pub fn check(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), Refusal> {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !self.host_allowed(host) {
            return Err(Refusal::ForeignHost);
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let own = format!("http://{host}");
            if !origin.to_str().is_ok_and(|o| o.eq_ignore_ascii_case(&own)) {
                return Err(Refusal::ForeignOrigin);
            }
        }
        if self.token_given(headers, uri) { Ok(()) } else { Err(Refusal::NoToken) }
    }

    fn host_allowed(&self, host: &str) -> bool {
        match &self.hosts {
            None => !host.is_empty(),
            Some(hosts) => hosts.iter().any(|h| h.eq_ignore_ascii_case(host)),
        }
    }

    fn token_given(&self, headers: &HeaderMap, uri: &Uri) -> bool {
        let matches = |given: &str| rpc_core::token::token_matches(&self.token, given);
        let bearer =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        bearer.is_some_and(matches)
            || self.cookie_value(headers).is_some_and(matches)
            || query_token(uri).is_some_and(matches)
    }

    fn cookie_value<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.cookie)
            .map(|(_, value)| value)
    }

    /// The cookie that stands for the token from now on: HttpOnly (no
    /// script reads it), SameSite=Strict (no other site's request carries it).
    pub fn set_cookie(&self) -> String {
        format!("{}={}; Path=/; HttpOnly; SameSite=Strict", self.cookie, self.token)
    }
}

/// The `token` query parameter (a token is hex: no decoding needed).
pub fn query_token(uri: &Uri) -> Option<&str> {
    uri.query()?.split('&').find_map(|pair| pair.strip_prefix("token="))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn host_then_origin_then_token() {
        let access = Access::new("127.0.0.1:8767".parse().unwrap(), "abc123".into());
        let page: Uri = "/".parse().unwrap();
        let with_token: Uri = "/?token=abc123".parse().unwrap();
        let host = ("host", "127.0.0.1:8767");
        assert_eq!(access.check(&headers(&[host]), &with_token), Ok(()));
        assert_eq!(access.check(&headers(&[("host", "localhost:8767")]), &with_token), Ok(()));
        assert_eq!(access.check(&headers(&[("host", "evil.example:8767")]), &with_token), Err(Refusal::ForeignHost));
        assert_eq!(access.check(&headers(&[]), &with_token), Err(Refusal::ForeignHost));
        let foreign = ("origin", "http://evil.example");
        assert_eq!(access.check(&headers(&[host, foreign]), &with_token), Err(Refusal::ForeignOrigin));
        let own = ("origin", "http://127.0.0.1:8767");
        assert_eq!(access.check(&headers(&[host, own]), &with_token), Ok(()));
        assert_eq!(access.check(&headers(&[host]), &page), Err(Refusal::NoToken));
        assert_eq!(access.check(&headers(&[host]), &"/?token=abc".parse().unwrap()), Err(Refusal::NoToken));
        let cookie = ("cookie", "other=1; hermes-host-8767=abc123");
        assert_eq!(access.check(&headers(&[host, cookie]), &page), Ok(()));
        let wrong_port = ("cookie", "hermes-host-9999=abc123");
        assert_eq!(access.check(&headers(&[host, wrong_port]), &page), Err(Refusal::NoToken));
        assert_eq!(access.check(&headers(&[host, ("authorization", "Bearer abc123")]), &page), Ok(()));
    }

    #[test]
    fn a_wildcard_bind_takes_any_host_but_still_the_token() {
        let access = Access::new("0.0.0.0:8767".parse().unwrap(), "t".into());
        let host = ("host", "myhost.lan:8767");
        assert_eq!(access.check(&headers(&[host]), &"/?token=t".parse().unwrap()), Ok(()));
        assert_eq!(access.check(&headers(&[host]), &"/".parse().unwrap()), Err(Refusal::NoToken));
    }
}
