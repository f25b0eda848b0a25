//! `hello` and `ping`.

use std::sync::LazyLock;

use rpc_core::escape::OneLine;
use rpc_core::router::Answer;
use rpc_core::{ConnCtx, Ctx, NoParams, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::peer::{PROTOCOL_VERSION, SERVER_VERSION};
use crate::sessions::ClientType;
use crate::state::ConnState;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloParams {
    client_type: Option<String>,
    version: Option<String>,
    /// Accepted and logged; the broker has no use for them yet.
    #[serde(default)]
    capabilities: Option<Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloReply {
    session_id: Option<String>,
    client_id: String,
    client_type: ClientType,
    server_version: &'static str,
    protocol_version: &'static str,
}

/// Announces the client; the client type was fixed by the connect URL and
/// cannot change here.
pub async fn hello(cx: Ctx<ConnState>, params: HelloParams) -> Result<HelloReply, RpcError> {
    let state = &cx.state;
    if let Some(claimed) = params.client_type.as_deref()
        && claimed != state.client_type.as_str()
    {
        let this = match state.client_type {
            ClientType::Browser => "a browser",
            ClientType::Agent => "an agent",
        };
        return Err(RpcError::invalid_params(format!(
            "clientType: this connection is {this} (from its URL), not {claimed:?}"
        )));
    }
    tracing::debug!(
        client = %state.client_id,
        version = %OneLine(params.version.as_deref().unwrap_or("-")),
        capabilities = %params.capabilities.unwrap_or(serde_json::Value::Null),
        "hello"
    );
    Ok(HelloReply {
        session_id: state.session().map(|s| s.id.to_string()),
        client_id: state.client_id.to_string(),
        client_type: state.client_type,
        server_version: SERVER_VERSION,
        protocol_version: PROTOCOL_VERSION,
    })
}

/// `{"pong": true}`, written as the constant it is: the derive wrote its key
/// through serde's string escaping on every ping, 3 % of one.
pub struct Pong;

impl Serialize for Pong {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        static PONG: LazyLock<&RawValue> =
            LazyLock::new(|| serde_json::from_str(r#"{"pong":true}"#).expect("a constant JSON object"));
        PONG.serialize(s)
    }
}

/// Answered by the read loop itself (`method_now`): no future, no per-call context.
pub fn ping(_: &ConnCtx<ConnState>, _: NoParams) -> Answer<Pong> {
    Answer::Now(Ok(Pong))
}
