//! The page's routes, every one behind [`access`](super::access):
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the page; `/?token=...` sets the cookie and redirects to `/` (the token leaves the address bar) |
//! | `GET /assets/{file}` | the page's modules and style |
//! | `GET /ws` | the live channel: the control methods over a WebSocket ([`live`](super::live)) |

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::access::query_token;
use super::admission::PageConnection;
use super::assets;
use super::live;
use super::site::Site;

pub fn router(site: Arc<Site>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{file}", get(asset))
        .route("/ws", get(live::upgrade))
        .layer(middleware::from_fn_with_state(site.clone(), admit))
        .with_state(site)
}

/// Host, Origin, token ([`super::access`]); then headers every answer carries.
/// A connection that passes has shown the token ([`super::admission`]).
async fn admit(State(site): State<Arc<Site>>, request: Request, next: Next) -> Response {
    if let Err(refusal) = site.access.check(request.headers(), request.uri()) {
        tracing::debug!(path = request.uri().path(), status = %refusal.status(), "page request refused");
        let mut response = (refusal.status(), refusal.reason()).into_response();
        no_store(&mut response);
        return response;
    }
    if let Some(connection) = request.extensions().get::<Arc<PageConnection>>() {
        connection.prove();
    }
    let mut response = next.run(request).await;
    no_store(&mut response);
    response
}

fn no_store(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // The URL with the token must not leave in a Referer.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}

/// Extensions' windows are frames of http(s) pages of their own; the page
/// itself is never framed (clickjacking) and loads scripts only from itself.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; frame-src http: https:; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'none'";

async fn index(State(site): State<Arc<Site>>, request: Request) -> Response {
    if query_token(request.uri()).is_some() {
        // Admitted, so the token was right: it becomes the cookie.
        let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if let Ok(cookie) = HeaderValue::from_str(&site.access.set_cookie()) {
            response.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        return response;
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        assets::INDEX_HTML,
    )
        .into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    match assets::file(&file) {
        Some((kind, text)) => ([(header::CONTENT_TYPE, kind)], text).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
