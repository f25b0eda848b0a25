//! `editor/getMessage`, `editor/patchMessage`, `editor/setMessage`.

use std::path::PathBuf;

use rpc_core::router::Answer;
use rpc_core::{ConnCtx, Ctx, RpcError};
use serde::{Deserialize, Serialize};

use crate::document::{Document, PatchOutcome, Text};
use crate::hl7::patch::Patch;
use crate::hl7::tree::Format;
use crate::state::ExtensionSession;

/// `editor/getMessage` and the control socket's `message/get`.
#[derive(Deserialize)]
pub struct GetParams {
    #[serde(default = "hl7")]
    pub format: Format,
}

pub(crate) fn hl7() -> Format {
    Format::Hl7
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    #[serde(serialize_with = "Text::to_json")]
    pub message: Text,
    pub has_file: bool,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "path_text")]
    pub file_path: Option<PathBuf>,
}

/// A path as its text; one that is not UTF-8 as `Path::display` shows it.
fn path_text<S: serde::Serializer>(path: &Option<PathBuf>, serializer: S) -> Result<S::Ok, S::Error> {
    match path.as_deref().map(|p| (p, p.to_str())) {
        Some((_, Some(text))) => serializer.serialize_str(text),
        Some((path, None)) => serializer.collect_str(&path.display()),
        None => serializer.serialize_none(),
    }
}

/// Answered in the read loop (`method_now`): it reads the message held and
/// waits for nothing. The hot path of every extension (B6).
pub fn get_message(conn: &ConnCtx<ExtensionSession>, params: GetParams) -> Answer<Message> {
    Answer::Now(message_in(&conn.state.host.document, params))
}

/// The open message in the asked format, with where it came from.
pub fn message_in(document: &Document, params: GetParams) -> Result<Message, RpcError> {
    let (message, file) = document.get(params.format)?;
    Ok(Message { message, has_file: file.is_some(), file_path: file })
}

/// `editor/patchMessage` and the control socket's `message/patch`.
#[derive(Deserialize)]
pub struct PatchParams {
    pub patches: Vec<Patch>,
}

pub async fn patch_message(ctx: Ctx<ExtensionSession>, params: PatchParams) -> Result<PatchOutcome, RpcError> {
    ctx.state.host.document.patch(params.patches, ctx.state.extension.name()).await
}

#[derive(Deserialize)]
pub struct SetParams {
    message: String,
    #[serde(default = "hl7")]
    format: Format,
}

#[derive(Serialize)]
pub struct SetOutcome {
    success: bool,
}

/// Unparsable input is -32004 (the spec's choice over Hermes'
/// `{success: false, error}`), so `success` is always true here.
pub async fn set_message(ctx: Ctx<ExtensionSession>, params: SetParams) -> Result<SetOutcome, RpcError> {
    ctx.state.host.document.set(params.message, params.format, ctx.state.extension.name()).await?;
    Ok(SetOutcome { success: true })
}
