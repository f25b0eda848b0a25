//! The control protocol's method table: every method the socket serves, in
//! one place. The per-connection state is the client's event subscription.

mod control;
mod events;
mod interactive;
mod status;

use std::sync::Arc;

use rpc_core::Router;
use rpc_core::router::DuplicateMethods;

pub use events::Client;

use crate::state::Session;

pub fn router(session: Arc<Session>) -> Result<Arc<Router<Client>>, DuplicateMethods> {
    let s = || session.clone();
    Router::new()
        .method_now("get_status", status::get_status(s()))
        .method("get_server_status", status::get_server_status)
        .method_now("stop", control::stop(s()))
        .method_now("checkpoint", control::checkpoint(s()))
        .method("inject_prompt", control::inject_prompt(s()))
        .method_now("set_interactive_mode", interactive::set_interactive_mode(s()))
        .method("write_pty", interactive::write_pty(s()))
        .method("subscribe", events::subscribe(s()))
        .method("unsubscribe", events::unsubscribe())
        .build()
}
