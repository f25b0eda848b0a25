//! The lineup: the extensions of the configuration in effect, in config
//! order, started together at start-up and replaced on reload (SIGHUP,
//! `extensions/reload`). The host holds the list; this is what starts the
//! processes on it, each under its own [`supervisor`](super::supervisor).
//!
//! On a reload of all, the old extensions are told `shutdown {reason:
//! "reload"}` all at once (a slow one costs 5 s, not 5 s each), then the new
//! list starts, each extension on its own, so one slow `initialize` holds up
//! no other.

use std::sync::Arc;

use rpc_core::RpcError;

use super::log::ExtensionLog;
use super::{Extension, StopReason, supervisor};
use crate::config::ExtensionSpec;
use crate::errors;
use crate::state::Host;

/// Starts the extensions of the configuration in effect (none once the
/// daemon is stopping); a disabled one is listed and not started.
pub fn start_all(host: &Arc<Host>) {
    if host.is_closing() {
        return;
    }
    let mut started = Vec::new();
    for spec in host.settings().specs().unwrap_or_default() {
        let extension = listed(host, spec);
        if extension.spec.enabled {
            supervisor::start(host.clone(), extension.clone());
        } else {
            extension.log.note("disabled in the configuration; not started");
        }
        started.push(extension);
    }
    host.set_extensions(started);
}

/// `extensions/reload` and SIGHUP: reads the config file again; with a
/// `name`, restarts only that extension (with its new settings). Returns
/// the extensions' names after it.
pub async fn reload(host: &Arc<Host>, name: Option<&str>) -> Result<Vec<String>, RpcError> {
    let _one_at_a_time = host.one_reload_at_a_time().await;
    host.reread_config_file()?;
    match name {
        None => {
            tracing::info!("reloading every extension");
            host.stop_all(StopReason::Reload).await;
            start_all(host);
        }
        Some(name) => reload_one(host, name).await?,
    }
    Ok(host.extension_names())
}

/// Stops extension `name` and starts it again with what the file now says:
/// stopped for good if the file disables it, gone if the file no longer has it.
async fn reload_one(host: &Arc<Host>, name: &str) -> Result<(), RpcError> {
    let old =
        host.extension(name).ok_or_else(|| RpcError::new(errors::GENERAL, format!("no extension named {name:?}")))?;
    let spec = host.settings().specs().unwrap_or_default().into_iter().find(|s| s.name == name);
    let now_disabled = spec.as_ref().is_some_and(|s| !s.enabled);
    old.stop(if now_disabled { StopReason::Disabled } else { StopReason::Reload }).await;
    let Some(spec) = spec else {
        // Gone from the file: it stays stopped and leaves the list.
        host.replace_extension(name, None);
        return Ok(());
    };
    let fresh = listed(host, spec);
    if fresh.spec.enabled && !host.is_closing() {
        supervisor::start(host.clone(), fresh.clone());
    }
    host.replace_extension(name, Some(fresh));
    Ok(())
}

/// A new extension for `spec`, not started, its log in `<data dir>/logs/<name>.log`.
fn listed(host: &Host, spec: ExtensionSpec) -> Arc<Extension> {
    let log_path = host.data_dir.join("logs").join(format!("{}.log", spec.name));
    let log = ExtensionLog::new(&spec.name, Some(log_path));
    Arc::new(Extension::new(spec, log))
}
