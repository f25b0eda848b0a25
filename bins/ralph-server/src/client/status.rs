//! `status [TASK] [--json]`. Exit code: 0 completed, 1 running (starting,
//! running, stopping), 2 failed or not found, 3 stopped or checkpointed.
//! Without TASK: every task with a socket; the code is 1 if any runs.
//! A TASK given as a directory whose loop has ended is read from its
//! `.ralph/state.json`.

use std::process::ExitCode;

use serde_json::{Value, json};

use super::socket::{call, connect, socket_path};
use crate::config::{SocketArgs, StatusArgs};
use crate::state::SavedState;

/// Never an error: a task that cannot be reached is reported as not running.
pub async fn run(args: StatusArgs, sockets: SocketArgs) -> Result<ExitCode, String> {
    let tasks = match &args.task {
        Some(task) => vec![task.clone()],
        None => running_tasks(&sockets),
    };
    let mut statuses = Vec::new();
    for task in &tasks {
        statuses.push(status_of(task, &sockets).await);
    }
    if args.json {
        let out = if args.task.is_some() { statuses.first().cloned().unwrap_or(Value::Null) } else { json!(statuses) };
        println!("{out:#}");
    } else if statuses.is_empty() {
        println!("{}", no_tasks(&sockets));
    } else {
        for status in &statuses {
            println!("{}", summary(status));
        }
    }
    let codes: Vec<u8> = statuses.iter().map(code).collect();
    let code = if codes.contains(&1) { 1 } else { codes.first().copied().unwrap_or(2) };
    Ok(ExitCode::from(code))
}

fn running_tasks(sockets: &SocketArgs) -> Vec<String> {
    let Ok(dir) = sockets.dir() else { return Vec::new() };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().strip_suffix(".sock").map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// get_status's result, the saved state of a finished task, or `{task, status: "not_running"}`.
async fn status_of(task: &str, sockets: &SocketArgs) -> Value {
    if let Ok(connected) = connect(task, sockets).await
        && let Ok(status) = call(&connected.peer, "get_status", json!({})).await
    {
        return status;
    }
    let dir = std::path::Path::new(task);
    if let Ok(Some(saved)) = SavedState::load(dir) {
        return json!({
            "task_name": socket_path(task, sockets).ok().and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned())),
            "task_dir": std::fs::canonicalize(dir).map(|d| d.display().to_string()).unwrap_or_default(),
            "iteration": saved.iteration,
            "current_story": saved.current_story,
            "status": saved.status,
            "reason": saved.reason,
            "updated_at": saved.updated_at,
            "running": false,
        });
    }
    let socket = socket_path(task, sockets).ok().map(|p| p.display().to_string());
    json!({"task_name": task, "status": "not_running", "socket": socket})
}

/// What `status` says when no task runs: where it looked, how to start one.
fn no_tasks(sockets: &SocketArgs) -> String {
    let start = "start one with `ralph-server run TASK_DIR`";
    match sockets.dir() {
        Ok(dir) if dir.is_dir() => format!("no running tasks in {}; {start}", dir.display()),
        Ok(dir) => {
            format!("no running tasks: {} does not exist (RALPH_SOCKET_DIR, --socket-dir); {start}", dir.display())
        }
        Err(e) => format!("no running tasks: {e}"),
    }
}

fn code(status: &Value) -> u8 {
    match status["status"].as_str() {
        Some("completed") => 0,
        Some("starting" | "running" | "stopping") if status["running"] != false => 1,
        Some("stopped" | "checkpointed" | "starting" | "running" | "stopping") => 3,
        _ => 2,
    }
}

fn summary(s: &Value) -> String {
    let text = |v: &Value| v.as_str().map(str::to_owned).unwrap_or_else(|| "-".into());
    if s["status"] == "not_running" {
        return format!(
            "{}: not running (no server at {}); a task that has ended is read from its directory: \
             `ralph-server status TASK_DIR`",
            text(&s["task_name"]),
            text(&s["socket"])
        );
    }
    if s["running"] == false {
        // Read from the task directory's saved state: the loop has ended.
        return format!(
            "{}: {} after iteration {} ({}; {}), last story {}",
            text(&s["task_name"]),
            text(&s["status"]),
            s["iteration"].as_u64().unwrap_or(0),
            text(&s["reason"]).replace('_', " "),
            text(&s["updated_at"]),
            text(&s["current_story"]),
        );
    }
    format!(
        "{}: {} (iteration {}/{}, story {}, agent {}{})",
        text(&s["task_name"]),
        text(&s["status"]),
        s["iteration"].as_u64().unwrap_or(0),
        s["max_iterations"].as_u64().map_or("-".into(), |n| n.to_string()),
        text(&s["current_story"]),
        text(&s["agent"]),
        if s["interactive_mode"] == true { ", interactive" } else { "" }
    )
}
