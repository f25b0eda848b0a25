//! `get_status`: the seed's result shape, field for field.

use std::sync::Arc;

use rpc_core::{Ctx, NoParams, RpcError};

use super::Client;
use crate::session::{Session, StatusReply};

pub fn get_status(
    session: Arc<Session>,
) -> impl Fn(Ctx<Client>, NoParams) -> std::future::Ready<Result<StatusReply, RpcError>> + Send + Sync + 'static {
    move |_, _| std::future::ready(Ok(session.snapshot()))
}
