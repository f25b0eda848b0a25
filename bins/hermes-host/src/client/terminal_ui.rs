//! `hermes-host ctl ui`: attaches to the host as its UI and answers the
//! extensions' dialogs at the terminal. Messages are printed; a confirm asks
//! y/n; file and directory pickers ask for a path (empty: cancelled); a
//! window prints its URL to open in a browser. Standard input may be a pipe
//! (scripts answer dialogs that way); at its end, dialogs are cancelled.
//!
//! Dialogs arriving together are asked one after the other. Everything an
//! extension wrote is printed with its control characters escaped
//! ([`terminal_safe`]): a conceal sequence cannot hide part of a question.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use rpc_core::{Ctx, PeerConfig, Router, RpcError, Transport};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{Mutex, mpsc};

use super::terminal_safe;

/// Lines typed at the terminal, one prompt at a time.
pub struct Terminal {
    lines: Mutex<mpsc::Receiver<String>>,
}

impl Terminal {
    /// Prints `prompt` and reads the answer; `None` once input has ended.
    async fn ask(&self, prompt: &str) -> Option<String> {
        let mut lines = self.lines.lock().await;
        print!("{prompt}");
        let _ = std::io::stdout().flush();
        let answer = lines.recv().await;
        if answer.is_none() {
            println!("(no input: cancelled)");
        }
        answer.map(|line| line.trim().to_owned())
    }
}

fn who(params: &Value) -> String {
    let extension = terminal_safe(params["extension"].as_str().unwrap_or("an extension"));
    match params["title"].as_str().filter(|t| !t.is_empty()) {
        Some(title) => format!("[{extension}] {}: ", terminal_safe(title)),
        None => format!("[{extension}] "),
    }
}

/// A string param, fit to print.
fn text(params: &Value, key: &str) -> String {
    terminal_safe(params[key].as_str().unwrap_or(""))
}

async fn show_message(_: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    let kind = terminal_safe(params["kind"].as_str().unwrap_or("info"));
    println!("{}{kind}: {}", who(&params), text(&params, "message"));
    Ok(json!({"acknowledged": true}))
}

async fn show_confirm(ctx: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    let choices = if params["buttons"].as_str() == Some("okCancel") { "ok/cancel" } else { "y/n" };
    let prompt = format!("{}{} [{choices}] ", who(&params), text(&params, "message"));
    let answer = ctx.state.ask(&prompt).await.unwrap_or_default().to_ascii_lowercase();
    Ok(json!({"confirmed": matches!(answer.as_str(), "y" | "yes" | "ok")}))
}

async fn path_prompt(ctx: &Ctx<Terminal>, params: &Value, what: &str) -> Option<String> {
    let default = params["defaultPath"].as_str().map(|d| format!(" [{}]", terminal_safe(d))).unwrap_or_default();
    let prompt = format!("{}{what}{default} (empty: cancel): ", who(params));
    ctx.state.ask(&prompt).await.filter(|p| !p.is_empty())
}

async fn open_file(ctx: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    Ok(json!({"path": path_prompt(&ctx, &params, "file to open").await}))
}

async fn save_file(ctx: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    Ok(json!({"path": path_prompt(&ctx, &params, "save as").await}))
}

async fn select_directory(ctx: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    Ok(json!({"path": path_prompt(&ctx, &params, "directory").await}))
}

async fn open_files(ctx: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    let line = path_prompt(&ctx, &params, "files to open, separated by spaces").await;
    let paths = line.map(|l| shlex::split(&l).unwrap_or_else(|| l.split_whitespace().map(str::to_owned).collect()));
    Ok(json!({ "paths": paths }))
}

async fn open_window(_: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    println!(
        "{}window {} wants {}: open it in a browser",
        who(&params),
        text(&params, "windowId"),
        text(&params, "url")
    );
    Ok(json!({"opened": true}))
}

async fn close_window(_: Ctx<Terminal>, params: Value) -> Result<Value, RpcError> {
    println!("{}window {} closed", who(&params), text(&params, "windowId"));
    Ok(json!({"closed": true}))
}

pub async fn run(socket: &Path) -> Result<ExitCode, String> {
    let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| super::not_reached(socket, e))?;
    let (read, write) = stream.into_split();
    let router = Router::new()
        .method("ui/showMessage", show_message)
        .method("ui/showConfirm", show_confirm)
        .method("ui/openFile", open_file)
        .method("ui/openFiles", open_files)
        .method("ui/saveFile", save_file)
        .method("ui/selectDirectory", select_directory)
        .method("ui/openWindow", open_window)
        .method("ui/closeWindow", close_window)
        .build()
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).await.is_err() {
                break;
            }
        }
    });
    let terminal = Terminal { lines: Mutex::new(rx) };
    let transport = Transport::ndjson(read, write, rpc_core::codec::DEFAULT_MAX_MESSAGE);
    let peer = rpc_core::client::spawn_with(transport, router, terminal, PeerConfig::default());
    match peer.request_raw("ui/attach", &json!({}), Some(std::time::Duration::from_secs(10))).await {
        Ok(_) => eprintln!("attached as the UI of {}; dialogs appear here (Ctrl-C to detach)", socket.display()),
        Err(e) => return Err(format!("cannot attach: {e}")),
    }
    tokio::select! {
        () = peer.closed() => {
            eprintln!("the host closed the connection");
            Ok(ExitCode::SUCCESS)
        }
        _ = tokio::signal::ctrl_c() => Ok(ExitCode::SUCCESS),
    }
}
