//! `stop`, `checkpoint`, `inject` and `tail`: one call each (tail: a stream).

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;

use super::socket::{call, connect};
use crate::config::{InjectArgs, SocketArgs, StopArgs, TaskArg};

/// One call; its result printed as one line of JSON.
async fn one_call(
    task: &str,
    sockets: &SocketArgs,
    method: &str,
    params: serde_json::Value,
) -> Result<ExitCode, String> {
    let connected = connect(task, sockets).await?;
    let result = call(&connected.peer, method, params).await?;
    println!("{result}");
    Ok(ExitCode::SUCCESS)
}

pub async fn stop(args: StopArgs, sockets: SocketArgs) -> Result<ExitCode, String> {
    one_call(&args.task, &sockets, "stop", json!({"force": args.force})).await
}

pub async fn checkpoint(args: TaskArg, sockets: SocketArgs) -> Result<ExitCode, String> {
    one_call(&args.task, &sockets, "checkpoint", json!({})).await
}

pub async fn inject(args: InjectArgs, sockets: SocketArgs) -> Result<ExitCode, String> {
    one_call(&args.task, &sockets, "inject_prompt", json!({"prompt": args.text})).await
}

/// Output events to stdout, a line each, until the task ends.
pub async fn tail(args: TaskArg, sockets: SocketArgs) -> Result<ExitCode, String> {
    let mut connected = connect(&args.task, &sockets).await?;
    call(&connected.peer, "subscribe", json!({"events": ["output"]})).await?;
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
    Ok(ExitCode::SUCCESS)
}
