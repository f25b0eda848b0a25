//! `ralph-server mcp [--task NAME]`: a Model Context Protocol server on stdio
//! for an agent that supervises Ralph loops. It is a client of each task's
//! control socket (the socket directory the client commands use), so it does
//! what `status`, `inject`, `stop` and `checkpoint` do, and nothing more.
//!
//! Each tool acts on one task: the one named in its `task` argument, else
//! `--task`, else the only running one. Each task's `progress.txt` and
//! `prd.json` are resources, read from the directory the task reports and
//! updated as the task reports activity ([`tasks`]).

mod tasks;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mcp_front::{CallToolResult, Caller, CancellationToken, Changes, Door, JsonObject, McpError, ServerName, Tool};
use serde_json::{Value, json};

use super::socket::task_name;
use crate::config::{McpArgs, SocketArgs};
use tasks::{Task, Tasks};

/// Lines of `recent_output` given when the call asks for no number.
const DEFAULT_LINES: u64 = 50;

/// Serves MCP on stdio until its client closes it. A socket directory or a
/// `--task` that cannot be used is bad configuration: exit 2.
pub async fn run(args: McpArgs, sockets: SocketArgs) -> Result<ExitCode, String> {
    let socket_dir = match sockets.dir() {
        Ok(dir) => dir,
        Err(e) => return Ok(rpc_core::cli::bad_configuration(&e)),
    };
    let default = match args.task.as_deref().map(task_name).transpose() {
        Ok(task) => task,
        Err(e) => {
            eprintln!("ralph-server mcp: --task: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let changes = Changes::new();
    let tasks = Tasks::new(socket_dir, args.timeout, changes.clone());
    // Watched from the start: its resources are the ones listed.
    let default = default.map(|(name, dir)| tasks.get(&name, dir).name.clone());
    let door = Arc::new(RalphDoor { tasks, default, timeout: args.timeout, changes });
    mcp_front::serve_stdio(door).await?;
    Ok(ExitCode::SUCCESS)
}

struct RalphDoor {
    tasks: Tasks,
    /// `--task`, by name.
    default: Option<String>,
    timeout: Duration,
    changes: Changes,
}

fn tools() -> Vec<Tool> {
    let task = json!({"type": "string",
        "description": "the task's name or directory; default: the server's --task, else the only running task"});
    vec![
        mcp_front::tool(
            "list_tasks",
            "The running tasks, each with its status (as the status tool gives it).",
            json!({"type": "object", "properties": {}}),
        ),
        mcp_front::tool(
            "status",
            "A task's status: name, directory, iteration of max_iterations, current story, agent, status \
             (starting, running, stopping, checkpointed, stopped, completed, failed), interactive mode, \
             when it started and last changed.",
            json!({"type": "object", "properties": {"task": task}}),
        ),
        mcp_front::tool(
            "recent_output",
            "The last lines the task's agent printed (escape sequences removed), oldest first.",
            json!({"type": "object", "properties": {
                "task": task,
                "lines": {"type": "integer", "minimum": 1, "maximum": 200, "default": DEFAULT_LINES}
            }}),
        ),
        mcp_front::tool(
            "inject_prompt",
            "Add instructions to the start of the task's next iteration prompt (given once; several \
             injections before it are all given, in order).",
            json!({"type": "object", "properties": {"task": task, "prompt": {"type": "string"}},
                   "required": ["prompt"]}),
        ),
        mcp_front::tool(
            "stop",
            "Stop the task's loop once the current agent run finishes (status stopped); with force, end the \
             agent now.",
            json!({"type": "object", "properties": {"task": task, "force": {"type": "boolean", "default": false}}}),
        ),
        mcp_front::tool(
            "checkpoint",
            "Checkpoint the task once the current agent run finishes: the loop records a CHECKPOINT block and \
             exits; `ralph-server run` on the task resumes it.",
            json!({"type": "object", "properties": {"task": task}}),
        ),
    ]
}

fn optional_str<'a>(args: &'a JsonObject, key: &str) -> Result<Option<&'a str>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("`{key}` must be a string, not {other}")),
    }
}

/// `lines` of recent_output: 1 to 200 (more is all there is).
fn lines_arg(args: &JsonObject) -> Result<usize, String> {
    match args.get("lines") {
        None | Some(Value::Null) => Ok(DEFAULT_LINES as usize),
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Ok(n.min(crate::state::RECENT_LINES as u64) as usize),
            _ => Err(format!("`lines` must be a whole number from 1 to 200, not {value}")),
        },
    }
}

/// A tool call as a control request, once its task is known.
fn request(tool: &str, args: &JsonObject) -> Result<(&'static str, Value), String> {
    Ok(match tool {
        "status" | "recent_output" => ("get_status", json!({})),
        // The server refuses an empty prompt with its own message.
        "inject_prompt" => ("inject_prompt", json!({"prompt": args.get("prompt")})),
        "stop" => match args.get("force") {
            None | Some(Value::Null) => ("stop", json!({})),
            Some(Value::Bool(force)) => ("stop", json!({"force": force})),
            Some(other) => return Err(format!("`force` must be true or false, not {other}")),
        },
        "checkpoint" => ("checkpoint", json!({})),
        other => return Err(format!("no tool named {other:?}")),
    })
}

/// get_status without its output lines (those are recent_output's).
fn status_only(mut status: Value) -> Value {
    if let Some(fields) = status.as_object_mut() {
        fields.remove("recent_output");
    }
    status
}

impl RalphDoor {
    /// The task a call is about: its `task` argument, `--task`, or the only running one.
    async fn task_for(&self, args: &JsonObject) -> Result<Arc<Task>, String> {
        if let Some(named) = optional_str(args, "task")? {
            let (name, dir) = task_name(named)?;
            return Ok(self.tasks.get(&name, dir));
        }
        if let Some(name) = &self.default {
            return Ok(self.tasks.get(name, None));
        }
        let running = self.tasks.running().await;
        match running.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(format!(
                "no task is running (no server answers in {}). Start one with `ralph-server run TASK_DIR`.",
                self.tasks.socket_dir().display()
            )),
            several => {
                let names: Vec<&str> = several.iter().map(|t| t.name.as_str()).collect();
                Err(format!("{} tasks are running ({}): name one with `task`.", names.len(), names.join(", ")))
            }
        }
    }

    async fn list_tasks(&self, cancel: &CancellationToken) -> CallToolResult {
        let mut statuses = Vec::new();
        for task in self.tasks.running().await {
            // A task that ended in between is left out.
            if let Ok(status) = task.link.call("get_status", &json!({}), Some(self.timeout), cancel).await {
                statuses.push(status_only(status));
            }
        }
        mcp_front::success(json!({ "tasks": statuses }))
    }

    async fn call(&self, tool: &str, args: &JsonObject, cancel: &CancellationToken) -> Result<CallToolResult, String> {
        let (method, params) = request(tool, args)?;
        let lines = if tool == "recent_output" { lines_arg(args)? } else { 0 };
        let task = self.task_for(args).await?;
        let result = match task.link.call(method, &params, Some(self.timeout), cancel).await {
            Ok(result) => result,
            Err(failure) => return Ok(failure.into_result()),
        };
        Ok(match tool {
            "status" => mcp_front::success(status_only(result)),
            "recent_output" => {
                let all = result["recent_output"].as_array().cloned().unwrap_or_default();
                let last: Vec<Value> = all[all.len().saturating_sub(lines)..].to_vec();
                let text: Vec<&str> = last.iter().filter_map(Value::as_str).collect();
                let text = if text.is_empty() { "(no output yet)".to_owned() } else { text.join("\n") };
                mcp_front::success_text([text], json!({"task_name": task.name, "lines": last}))
            }
            _ => mcp_front::success(result),
        })
    }
}

impl Door for RalphDoor {
    fn server_name(&self) -> ServerName {
        ServerName {
            name: "ralph-server",
            version: env!("CARGO_PKG_VERSION"),
            instructions: "Watches and steers Ralph loops: each runs a coding agent over a task's PRD, one \
                           story per iteration, until every story passes. status and recent_output show \
                           where a task is; inject_prompt adds instructions to its next iteration; stop and \
                           checkpoint end it after the current agent run. Tools act on the task named in \
                           `task`, else the only running one. Each task's progress.txt and prd.json are \
                           resources (ralph://TASK/progress.txt, ralph://TASK/prd.json), updated as the task \
                           works."
                .into(),
        }
    }

    fn changes(&self) -> &Changes {
        &self.changes
    }

    async fn list_tools(&self, _caller: &Caller) -> Result<Vec<Tool>, McpError> {
        Ok(tools())
    }

    async fn call_tool(
        &self,
        _caller: &Caller,
        name: &str,
        arguments: JsonObject,
        cancel: CancellationToken,
    ) -> CallToolResult {
        if name == "list_tasks" {
            return self.list_tasks(&cancel).await;
        }
        match self.call(name, &arguments, &cancel).await {
            Ok(result) => result,
            Err(message) => mcp_front::failure(message, None),
        }
    }

    fn resources(&self) -> Vec<Value> {
        let tasks = match &self.default {
            Some(name) => vec![self.tasks.get(name, None)],
            None => self.tasks.all(),
        };
        let mut resources = Vec::new();
        for task in tasks {
            let name = &task.name;
            resources.push(json!({
                "uri": task.uri("progress.txt"), "name": format!("{name}/progress.txt"),
                "title": format!("progress.txt of task {name}"),
                "description": "The task's append-only log: the loop's ITERATION, FAILURE, CHECKPOINT, STOPPED and \
                                COMPLETED blocks and the agent's own notes (a long one is shown from its end).",
                "mimeType": "text/plain",
            }));
            resources.push(json!({
                "uri": task.uri("prd.json"), "name": format!("{name}/prd.json"),
                "title": format!("prd.json of task {name}"),
                "description": "The task's stories; the agent sets `passes` as it finishes them.",
                "mimeType": "application/json",
            }));
        }
        resources
    }

    async fn read_resource(&self, _caller: &Caller, uri: &str) -> Result<Vec<Value>, McpError> {
        let Some((name, file)) = tasks::parse_uri(uri) else {
            return Err(McpError::resource_not_found(format!("no resource {uri}"), None));
        };
        let task = self.tasks.get(&name, None);
        if task.dir().is_none() {
            // Connecting asks the task where it is.
            let _ = task.link.peer().await;
        }
        let Some(dir) = task.dir() else {
            return Err(McpError::resource_not_found(
                format!("task {name:?} is not running and its directory is not known to this server"),
                None,
            ));
        };
        let text = tasks::read(&dir, file).await.map_err(|e| McpError::resource_not_found(e, None))?;
        let mime = if file == "prd.json" { "application/json" } else { "text/plain" };
        Ok(vec![mcp_front::resource_text(uri, mime, text)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn tools_map_to_the_loop_methods_and_bad_arguments_are_named() {
        assert_eq!(request("stop", &args(json!({}))).unwrap(), ("stop", json!({})));
        assert_eq!(request("stop", &args(json!({"force": true}))).unwrap(), ("stop", json!({"force": true})));
        assert!(request("stop", &args(json!({"force": "yes"}))).unwrap_err().contains("`force`"));
        assert_eq!(request("checkpoint", &args(json!({}))).unwrap().0, "checkpoint");
        assert_eq!(request("recent_output", &args(json!({}))).unwrap().0, "get_status");
        assert!(request("reboot", &args(json!({}))).unwrap_err().contains("no tool"));
        assert_eq!(lines_arg(&args(json!({}))).unwrap(), 50);
        assert_eq!(lines_arg(&args(json!({"lines": 5000}))).unwrap(), 200);
        assert!(lines_arg(&args(json!({"lines": 0}))).is_err());
        assert!(lines_arg(&args(json!({"lines": "3"}))).is_err());
        let listed: Vec<String> = tools().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(listed, ["list_tasks", "status", "recent_output", "inject_prompt", "stop", "checkpoint"]);
    }

    #[test]
    fn status_leaves_the_output_to_recent_output() {
        let status = status_only(json!({"task_name": "t", "recent_output": ["a"]}));
        assert_eq!(status, json!({"task_name": "t"}));
    }
}
