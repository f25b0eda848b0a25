//! The extension's `ui/*` methods (dialogs and windows): validated here,
//! then answered by the attached UI client or the headless policy (see
//! `crate::dialog_route`). The UI receives the extension's params
//! as they came, plus `extension` (who asks) and, for windows, `windowId`.

use std::sync::atomic::{AtomicU64, Ordering};

use rpc_core::{Ctx, RpcError};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::dialog_route::Unanswered;
use crate::errors;
use crate::state::{ExtensionSession, TOPIC_DIALOG};

type Answer = Result<Box<RawValue>, RpcError>;

fn raw(value: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&value).expect("a JSON value serialises")
}

/// Checks params against the method's shape (-32602 naming the field).
fn check<T: DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    let params = if params.is_null() { json!({}) } else { params.clone() };
    serde_json::from_value(params).map_err(RpcError::invalid_params)
}

/// The params the UI gets: the extension's own plus `extension`.
fn for_ui(ctx: &Ctx<ExtensionSession>, params: &Value) -> Value {
    let mut params = match params {
        Value::Object(map) => map.clone(),
        _ => Default::default(),
    };
    params.insert("extension".into(), json!(ctx.state.extension.name()));
    Value::Object(params)
}

/// Forwards to the UI, or answers with `headless`.
async fn ask(ctx: &Ctx<ExtensionSession>, method: &str, params: &Value, headless: impl FnOnce() -> Answer) -> Answer {
    match ask_ui(ctx, method, for_ui(ctx, params)).await {
        Ok(answer) => Ok(answer),
        Err(Unanswered::Headless) => headless(),
        Err(Unanswered::Failed(error)) => Err(error),
    }
}

static NEXT_DIALOG: AtomicU64 = AtomicU64::new(1);

/// Asks the attached UI with a `dialogId` added, and tells the `dialog`
/// subscribers (the other UIs) that it is pending and then that it is done.
async fn ask_ui(ctx: &Ctx<ExtensionSession>, method: &str, mut params: Value) -> Result<Box<RawValue>, Unanswered> {
    let host = &ctx.state.host;
    if !host.dialogs.is_attached() {
        return Err(Unanswered::Headless);
    }
    let id = format!("dialog-{}", NEXT_DIALOG.fetch_add(1, Ordering::Relaxed));
    params["dialogId"] = json!(id);
    host.publish(
        TOPIC_DIALOG,
        json!({"dialogId": id, "state": "pending", "method": method, "extension": params["extension"],
               "title": params.get("title"), "message": params.get("message")}),
    );
    let answer = host.dialogs.ask(method, &params, ctx.cancel_token()).await;
    host.publish(TOPIC_DIALOG, json!({"dialogId": id, "state": "done", "method": method}));
    answer
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct MessageParams {
    message: String,
    title: Option<String>,
    kind: Option<String>,
}

pub async fn show_message(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    let p: MessageParams = check(&params)?;
    let name = ctx.state.extension.name().to_owned();
    ask(&ctx, "ui/showMessage", &params, || {
        let kind = p.kind.as_deref().unwrap_or("info");
        let title = p.title.as_deref().unwrap_or("");
        tracing::info!(extension = %name, kind, title, "message (no UI attached): {}", p.message);
        Ok(raw(json!({"acknowledged": true})))
    })
    .await
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ConfirmParams {
    message: String,
    title: Option<String>,
    buttons: Option<String>,
}

pub async fn show_confirm(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    let _: ConfirmParams = check(&params)?;
    let confirmed = ctx.state.host.dialogs.headless_confirm();
    ask(&ctx, "ui/showConfirm", &params, || Ok(raw(json!({"confirmed": confirmed})))).await
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct FileParams {
    title: Option<String>,
    #[serde(rename = "defaultPath")]
    default_path: Option<String>,
    #[serde(rename = "defaultName")]
    default_name: Option<String>,
    filters: Option<Vec<Filter>>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Filter {
    name: String,
    extensions: Vec<String>,
}

async fn picker(ctx: Ctx<ExtensionSession>, method: &str, params: Value, key: &str) -> Answer {
    let _: FileParams = check(&params)?;
    ask(&ctx, method, &params, || Ok(raw(json!({ key: null })))).await
}

pub async fn open_file(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    picker(ctx, "ui/openFile", params, "path").await
}

pub async fn open_files(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    picker(ctx, "ui/openFiles", params, "paths").await
}

pub async fn save_file(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    picker(ctx, "ui/saveFile", params, "path").await
}

pub async fn select_directory(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    picker(ctx, "ui/selectDirectory", params, "path").await
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct WindowParams {
    url: String,
    title: String,
    width: Option<f64>,
    height: Option<f64>,
    modal: Option<bool>,
    resizable: Option<bool>,
}

/// Only http and https, with a host: a window must not open `file:` or
/// `javascript:` URLs on an extension's say-so.
fn check_url(url: &str) -> Result<(), RpcError> {
    let invalid = || RpcError::new(errors::INVALID_URL, format!("invalid URL (http or https only): {url}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let scheme_ok = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    if !scheme_ok || host.is_empty() || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid());
    }
    Ok(())
}

pub async fn open_window(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    let p: WindowParams = check(&params)?;
    check_url(&p.url)?;
    let ui = &ctx.state.host.dialogs;
    if !ui.is_attached() {
        return Err(RpcError::new(errors::WINDOW_ERROR, "no UI attached"));
    }
    let owner = ctx.state.extension.name();
    let window_id = ui.new_window(owner);
    let mut forwarded = params.clone();
    if let Value::Object(map) = &mut forwarded {
        map.insert("windowId".into(), json!(window_id));
    }
    match ask_ui(&ctx, "ui/openWindow", for_ui(&ctx, &forwarded)).await {
        Ok(_) => Ok(raw(json!({"windowId": window_id}))),
        Err(failure) => {
            ui.forget_window(&window_id);
            Err(match failure {
                Unanswered::Headless => RpcError::new(errors::WINDOW_ERROR, "no UI attached"),
                Unanswered::Failed(e) => {
                    RpcError::new(errors::WINDOW_ERROR, format!("the window did not open: {}", e.message))
                }
            })
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CloseParams {
    window_id: String,
}

pub async fn close_window(ctx: Ctx<ExtensionSession>, params: Value) -> Answer {
    let p: CloseParams = check(&params)?;
    let ui = &ctx.state.host.dialogs;
    let me = ctx.state.extension.name();
    match ui.owner_of(&p.window_id) {
        None => return Err(RpcError::new(errors::WINDOW_ERROR, format!("no window {}", p.window_id))),
        Some(owner) if owner != me => {
            return Err(RpcError::new(
                errors::WINDOW_ERROR,
                format!("window {} belongs to another extension", p.window_id),
            ));
        }
        Some(_) => {}
    }
    ui.close_window(&p.window_id, &for_ui(&ctx, &json!({"windowId": p.window_id})), ctx.cancel_token()).await;
    ctx.state.extension.queue_event("window/closed", &json!({"windowId": p.window_id, "reason": "extension"}));
    Ok(raw(json!({"success": true})))
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn only_http_and_https_urls_open_windows() {
        assert!(check_url("http://localhost:8080/wizard").is_ok());
        assert!(check_url("HTTPS://example.org").is_ok());
        for bad in ["file:///etc/passwd", "javascript:alert(1)", "http://", "ftp://x", "http://a b", "localhost:80"] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
