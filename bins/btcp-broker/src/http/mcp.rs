//! `/mcp?sessionId=ID`: the MCP front door of any session over streamable
//! HTTP on the broker's own port. Each session asked for gets a door
//! (`mcp_door.rs`) whose agent connection is made in process: an in-memory
//! stream served by the broker's own HTTP stack, so the broker's admission,
//! limits and rate limit apply to it as to any agent.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use http_body_util::BodyExt as _;
use mcp_front::CancellationToken;
use tower_service::Service as _;

use super::admission::{self, PeerAddr, reject};
use super::connection::serve_in_process;
use super::request;
use crate::mcp_door::{Dial, ServeInProcess, SessionDoor};
use crate::state::Broker;

/// The `/mcp` endpoint's doors, one per session id asked for. A door with no
/// request and no response streaming for `BTCP_MCP_IDLE` is closed, so its
/// agent connection does not keep a session alive forever.
pub struct HttpDoors {
    broker: Arc<Broker>,
    /// The broker's HTTP routes, which the in-process agent connections are
    /// served by (set once, right after they are built).
    app: std::sync::OnceLock<axum::Router>,
    doors: Mutex<HashMap<String, HttpDoor>>,
    /// Fires when the broker drains: every door closes its MCP sessions.
    stop_all: CancellationToken,
}

struct HttpDoor {
    service: McpService,
    /// Cloned for each request being served and each response body still
    /// streaming (an SSE stream included): while a clone lives, the door is
    /// in use.
    in_use: Arc<()>,
    last_used: Instant,
    stop: CancellationToken,
}

type McpService = mcp_front::rmcp::transport::streamable_http_server::StreamableHttpService<
    mcp_front::Front<SessionDoor>,
    mcp_front::rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
>;

/// At most this many sessions served over `/mcp` at once.
const MAX_HTTP_DOORS: usize = 1024;

impl HttpDoors {
    pub fn new(broker: Arc<Broker>) -> Arc<Self> {
        let stop_all = CancellationToken::new();
        let doors = Arc::new(HttpDoors { broker, app: Default::default(), doors: Mutex::default(), stop_all });
        tokio::spawn(doors.clone().close_idle());
        doors
    }

    pub fn set_app(&self, app: axum::Router) {
        let _ = self.app.set(app);
    }

    /// The MCP service for `session`, made on first use, and the door's
    /// in-use mark to hold while serving. `None` when too many sessions are
    /// served already.
    pub fn service(&self, session: &str) -> Option<(McpService, Arc<()>)> {
        let mut doors = self.doors.lock();
        if let Some(entry) = doors.get_mut(session) {
            entry.last_used = Instant::now();
            return Some((entry.service.clone(), entry.in_use.clone()));
        }
        if doors.len() >= MAX_HTTP_DOORS {
            return None;
        }
        let config = &self.broker.config;
        let dial = Dial::InProcess { authority: config.listen.to_string(), serve: self.serve_in_process()? };
        let door = SessionDoor::new(dial, session, config.auth_token.clone(), None);
        let stop = self.stop_all.child_token();
        door.keep_connected(stop.clone());
        let factory_door = door.clone();
        // Host and Origin are the broker's business (its token and Origin
        // policy run before this service); rmcp's own checks would only
        // disagree with BTCP_HOST and BTCP_ALLOWED_ORIGINS.
        let http = mcp_front::rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
            .with_allowed_hosts(Vec::<String>::new())
            .with_cancellation_token(stop.clone());
        let service =
            McpService::new(move || Ok(mcp_front::Front::new(factory_door.clone())), Default::default(), http);
        let in_use = Arc::new(());
        let entry = HttpDoor { service: service.clone(), in_use: in_use.clone(), last_used: Instant::now(), stop };
        doors.insert(session.to_owned(), entry);
        Some((service, in_use))
    }

    /// How a door's agent connection is served: by the broker's routes, as a
    /// socket's would be. `None` before the routes are set.
    fn serve_in_process(&self) -> Option<ServeInProcess> {
        let app = self.app.get()?.clone();
        let shutdown = self.broker.shutdown.clone();
        Some(Arc::new(move |io| {
            tokio::spawn(serve_in_process(io, app.clone(), shutdown.clone()));
        }))
    }

    async fn close_idle(self: Arc<Self>) {
        let idle = self.broker.config.mcp_idle;
        let mut ticks = tokio::time::interval((idle / 2).clamp(Duration::from_millis(10), Duration::from_secs(30)));
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = self.broker.shutdown.draining() => {
                    self.stop_all.cancel();
                    return;
                }
            }
            self.doors.lock().retain(|_, entry| {
                // Only the map holds the mark: no request or response is in flight.
                let unused = Arc::strong_count(&entry.in_use) == 1 && entry.last_used.elapsed() >= idle;
                if unused {
                    entry.stop.cancel();
                }
                !unused
            });
        }
    }
}

/// `/mcp?sessionId=ID`: the broker's token applies (the Origin policy ran
/// before), then the session's MCP service answers.
pub async fn endpoint(doors: Arc<HttpDoors>, request: axum::extract::Request) -> axum::response::Response {
    let broker = &doors.broker;
    let query = match admission::query(request.uri()) {
        Ok(query) => query,
        Err(rejection) => return rejection.into_response(),
    };
    if let Err(rejection) =
        admission::authorize(broker, request.headers(), &query, request.extensions().get::<PeerAddr>())
    {
        return rejection.into_response();
    }
    let session = match request::session_id(&query) {
        Ok(Some(session)) => session,
        Ok(None) => {
            return reject(StatusCode::BAD_REQUEST, "session_id", "sessionId is required: /mcp?sessionId=ID")
                .into_response();
        }
        Err(why) => return reject(StatusCode::BAD_REQUEST, "invalid_session_id", why).into_response(),
    };
    let Some((mut service, in_use)) = doors.service(session) else {
        return reject(
            StatusCode::SERVICE_UNAVAILABLE,
            "mcp_sessions",
            format!("too many sessions served over /mcp (at most {MAX_HTTP_DOORS})"),
        )
        .into_response();
    };
    let ending_session = request.method() == axum::http::Method::DELETE;
    let mut response = match service.call(request).await {
        Ok(response) => response.map(|body| holding(body, in_use)),
        Err(never) => match never {},
    };
    // rmcp answers a session's end 202 Accepted; MCP clients (the official
    // SDKs) expect 200 (or 204) and take anything else as a failed close.
    if ending_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// `body`, holding the door's in-use mark until it has been sent or dropped
/// (an SSE stream: until it ends).
fn holding<B>(body: B, in_use: Arc<()>) -> axum::body::Body
where
    B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    axum::body::Body::new(body.map_frame(move |frame| {
        let _held = &in_use;
        frame
    }))
}
