//! What every request to the page shares, at the bottom of `web`: the host,
//! who may come in, and what a live channel is served with (the control
//! method table and a control connection's budgets).

use std::sync::Arc;

use rpc_core::{PeerConfig, Router, Shutdown};
use tokio::sync::Semaphore;

use super::access::Access;
use crate::state::{ControlSession, Host};

pub struct Site {
    pub host: Arc<Host>,
    pub access: Access,
    pub control: Arc<Router<ControlSession>>,
    /// A live channel's budgets: a control connection's.
    pub peer: PeerConfig,
    pub max_message: usize,
    /// Live channels open at once (a tab each): as many as control connections.
    pub live_slots: Arc<Semaphore>,
    pub shutdown: Shutdown,
}
