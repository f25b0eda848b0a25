//! The editor page: hermes-host's own web server, for a person in a
//! browser. It is wiring, like `server`: the page speaks to the host only
//! through the control methods (`crate::methods::control_router`), carried
//! over one WebSocket at `/ws`, the same table the control socket serves.
//!
//! - [`access`]: who may load the page (the token, traded for a cookie; the
//!   Host and Origin checks).
//! - [`admission`]: connections that have not shown the token, held to a
//!   share of the slots and a deadline.
//! - [`routes`]: the routes (`/`, `/assets/...`, `/ws`).
//! - [`live`]: `/ws`, a control connection over a WebSocket.
//! - [`assets`]: the page's files, compiled into the binary.
//! - [`site`]: what every request shares (the host, the access rule, the method table).
//! - [`listener`]: binding the port, serving HTTP on it, and telling where the page is.

pub mod access;
pub mod admission;
pub mod assets;
pub mod listener;
pub mod live;
pub mod routes;
pub mod site;
