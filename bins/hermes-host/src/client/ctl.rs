//! `hermes-host ctl ...`: one command per control method, printed for a
//! person (or as JSON with `--json`); `ctl subscribe` prints events as they
//! come, and `ctl ui` makes this terminal the UI ([`super::terminal_ui`]).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use rpc_core::{CallError, PeerHandle};
use serde_json::{Value, json};

use super::{json_terminal_safe, terminal_safe, terminal_ui, web_page};
use crate::config::{CtlArgs, CtlCommand, ExtCommand, client_socket};

/// Runs one `ctl` command: its exit code, or why it could not run.
pub async fn run(args: CtlArgs) -> Result<ExitCode, String> {
    let socket = client_socket(args.socket);
    // These two keep the connection open, in a shape of their own.
    match &args.command {
        CtlCommand::Ui => return terminal_ui::run(&socket).await,
        CtlCommand::Web { open } => return web_page::run(&socket, *open),
        CtlCommand::Subscribe { events } => {
            let events = if events.is_empty() { vec!["*".to_owned()] } else { events.clone() };
            return subscribe_raw(&socket, &json!({"events": events})).await;
        }
        _ => {}
    }
    let peer = rpc_core::client::connect_unix(&socket).await.map_err(|e| super::not_reached(&socket, e))?;
    let (method, params) = request(&args.command)?;
    // A reload waits for extensions to stop and start; nothing else takes long.
    let timeout = match method {
        "extensions/reload" => None,
        _ => Some(Duration::from_secs(60)),
    };
    let result = call(&peer, method, &params, timeout).await?;
    if args.json {
        println!("{}", json_terminal_safe(&serde_json::to_string_pretty(&result).unwrap_or_default()));
    } else {
        print_result(&args.command, &result);
    }
    // A patch that failed is reported in the result, not as an error: a
    // script still needs to know.
    if result["success"] == false {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The control method a command calls, and its params.
fn request(command: &CtlCommand) -> Result<(&str, Value), String> {
    Ok(match command {
        CtlCommand::New { file: None, .. } => ("message/new", json!({})),
        CtlCommand::New { file: Some(file), format } => {
            ("message/new", json!({"message": read_input(file)?, "format": format}))
        }
        CtlCommand::Open { file } => ("message/open", json!({"path": absolute(file)})),
        CtlCommand::Get { format } => ("message/get", json!({"format": format})),
        CtlCommand::Set { file, format } => ("message/set", json!({"message": read_input(file)?, "format": format})),
        CtlCommand::Patch { patches } => {
            let patches: Vec<Value> = patches.iter().map(|p| patch_arg(p)).collect();
            ("message/patch", json!({ "patches": patches }))
        }
        CtlCommand::Save { file } => ("message/save", json!({"path": file.as_ref().map(|f| absolute(f))})),
        CtlCommand::Run { command } => ("command/execute", json!({"command": command})),
        CtlCommand::Ext(ExtCommand::List) => ("extensions/list", json!({})),
        CtlCommand::Ext(ExtCommand::Reload { name }) => ("extensions/reload", json!({"name": name})),
        CtlCommand::Logs { name, lines } => ("extensions/logs", json!({"name": name, "lines": lines})),
        CtlCommand::Schema => ("schema/get", json!({})),
        CtlCommand::Call { method, args } => {
            let params: serde_json::Map<String, Value> = args.iter().cloned().collect();
            (method.as_str(), Value::Object(params))
        }
        CtlCommand::Ui | CtlCommand::Subscribe { .. } | CtlCommand::Web { .. } => unreachable!("handled by run"),
    })
}

/// The contents of FILE, or of standard input for `-`.
fn read_input(file: &Path) -> Result<String, String> {
    if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| format!("reading standard input: {e}"))
    } else {
        std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))
    }
}

/// One `ctl patch` argument as a patch: `PATH=VALUE`, `PATH=` (clear),
/// `+SEGMENT`, `-SEGMENT`. Anything else goes to the host as a path to clear,
/// whose error then names it.
fn patch_arg(arg: &str) -> Value {
    if let Some((path, value)) = arg.split_once('=') {
        return if value.is_empty() { json!({"path": path}) } else { json!({"path": path, "value": value}) };
    }
    match arg.split_at_checked(1) {
        Some(("+", segment)) => json!({"path": segment, "create": true}),
        Some(("-", segment)) => json!({"path": segment, "remove": true}),
        _ => json!({"path": arg}),
    }
}

fn absolute(path: &Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned()).display().to_string()
}

async fn call(peer: &PeerHandle, method: &str, params: &Value, timeout: Option<Duration>) -> Result<Value, String> {
    match peer.request_raw(method, params, timeout).await {
        Ok(raw) => serde_json::from_str(raw.get()).map_err(|e| e.to_string()),
        Err(CallError::Rpc(e)) => Err(format!("{} ({})", e.message, e.code)),
        Err(e) => Err(e.to_string()),
    }
}

fn print_result(command: &CtlCommand, result: &Value) {
    let mut out = std::io::stdout().lock();
    match command {
        CtlCommand::Get { format } => {
            let text = result["message"].as_str().unwrap_or_default();
            if format == "hl7" {
                let _ = writeln!(out, "{}", text.replace('\r', "\n"));
            } else {
                let _ = writeln!(out, "{}", text.trim_end());
            }
        }
        CtlCommand::Ext(ExtCommand::List) => {
            let _ = writeln!(out, "{:<20} {:<9} {:>7} {:>8}  COMMANDS", "NAME", "STATE", "PID", "RESTARTS");
            for e in result["extensions"].as_array().into_iter().flatten() {
                let pid = e["pid"].as_u64().map_or("-".to_owned(), |p| p.to_string());
                // Commands and a failure's reason are the extension's own words.
                let commands: Vec<&str> =
                    e["commands"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                let _ = writeln!(
                    out,
                    "{:<20} {:<9} {:>7} {:>8}  {}",
                    terminal_safe(e["name"].as_str().unwrap_or("")),
                    e["state"].as_str().unwrap_or(""),
                    pid,
                    e["restarts"],
                    terminal_safe(&commands.join(" "))
                );
                if let Some(reason) = e["reason"].as_str() {
                    let _ = writeln!(out, "    {}", terminal_safe(reason));
                }
            }
        }
        CtlCommand::Logs { .. } => {
            for line in result["lines"].as_array().into_iter().flatten() {
                let text = terminal_safe(line["line"].as_str().unwrap_or(""));
                let _ = writeln!(out, "[{}] {text}", line["level"].as_str().unwrap_or(""));
            }
        }
        CtlCommand::Run { command } => {
            let _ = writeln!(out, "{command} sent to {}", terminal_safe(result["extension"].as_str().unwrap_or("?")));
        }
        CtlCommand::Save { .. } => {
            let _ = writeln!(out, "saved {}", result["filePath"].as_str().unwrap_or(""));
        }
        CtlCommand::Patch { .. } => {
            let _ = writeln!(out, "{} applied", result["patchesApplied"]);
            for e in result["errors"].as_array().into_iter().flatten() {
                let _ = writeln!(out, "{}: {}", e["path"].as_str().unwrap_or(""), e["message"].as_str().unwrap_or(""));
            }
        }
        _ => {
            let _ = writeln!(out, "{}", json_terminal_safe(&serde_json::to_string_pretty(result).unwrap_or_default()));
        }
    }
}

/// Subscribes on a plain line connection (events are notifications, which
/// a peer without methods would not show) and prints each event line until
/// the host closes it or Ctrl-C.
async fn subscribe_raw(socket: &Path, params: &Value) -> Result<ExitCode, String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| super::not_reached(socket, e))?;
    let (read, mut write) = stream.into_split();
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "subscribe", "params": params});
    write.write_all(format!("{request}\n").as_bytes()).await.map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(read).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    let Ok(value) = serde_json::from_str::<Value>(&line) else { continue };
                    if value.get("method").is_some() {
                        println!("{}", json_terminal_safe(&line));
                    }
                }
                _ => return Ok(ExitCode::SUCCESS),
            },
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_arguments_set_clear_create_and_remove() {
        assert_eq!(patch_arg("PID.5.1=DOE"), json!({"path": "PID.5.1", "value": "DOE"}));
        assert_eq!(patch_arg("PID.5.1=A=B"), json!({"path": "PID.5.1", "value": "A=B"}));
        assert_eq!(patch_arg("PID.8="), json!({"path": "PID.8"}));
        assert_eq!(patch_arg("+NTE"), json!({"path": "NTE", "create": true}));
        assert_eq!(patch_arg("-OBX[2]"), json!({"path": "OBX[2]", "remove": true}));
        assert_eq!(patch_arg("PID.5"), json!({"path": "PID.5"}));
    }
}
