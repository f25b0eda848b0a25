//! `stop`, `checkpoint`, `inject` and `tail`: one call each (tail: a stream).

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;

use super::{call, connect, failed};
use crate::config::SocketArgs;

#[derive(Debug, clap::Args)]
pub struct TaskArg {
    /// Task name, or its directory.
    pub task: String,
}

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// Task name, or its directory.
    pub task: String,
    /// End the agent now (SIGTERM to its process group, SIGKILL after 5 s).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, clap::Args)]
pub struct InjectArgs {
    /// Task name, or its directory.
    pub task: String,
    /// The instructions.
    pub text: String,
}

async fn one_call(task: &str, sockets: &SocketArgs, method: &str, params: serde_json::Value) -> ExitCode {
    let connected = match connect(task, sockets).await {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    match call(&connected.peer, method, params).await {
        Ok(result) => {
            println!("{result}");
            ExitCode::SUCCESS
        }
        Err(e) => failed(&e),
    }
}

pub async fn stop(args: StopArgs, sockets: SocketArgs) -> ExitCode {
    one_call(&args.task, &sockets, "stop", json!({"force": args.force})).await
}

pub async fn checkpoint(args: TaskArg, sockets: SocketArgs) -> ExitCode {
    one_call(&args.task, &sockets, "checkpoint", json!({})).await
}

pub async fn inject(args: InjectArgs, sockets: SocketArgs) -> ExitCode {
    one_call(&args.task, &sockets, "inject_prompt", json!({"prompt": args.text})).await
}

/// Output events to stdout, a line each, until the task ends.
pub async fn tail(args: TaskArg, sockets: SocketArgs) -> ExitCode {
    let mut connected = match connect(&args.task, &sockets).await {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    if let Err(e) = call(&connected.peer, "subscribe", json!({"events": ["output"]})).await {
        return failed(&e);
    }
    let mut stdout = std::io::stdout().lock();
    while let Some(event) = connected.events.recv().await {
        let data = &event["data"];
        let written = match event["type"].as_str() {
            Some("output") => {
                let line = data["line"].as_str().unwrap_or_default();
                if data["partial"] == true { write!(stdout, "{line}") } else { writeln!(stdout, "{line}") }
            }
            Some("dropped") => writeln!(stdout, "[ralph-server: {} events missed]", data["count"]),
            _ => Ok(()),
        };
        // A closed pipe (`| head`) ends the command quietly.
        if written.and_then(|()| stdout.flush()).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}
