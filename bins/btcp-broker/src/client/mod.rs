//! Client commands: talk to a running broker, as an HTTP client (`sessions`)
//! or as an agent over WebSocket (`tools`, `call`, and `mcp`, the MCP server
//! on stdio). They honour `BTCP_AUTH_TOKEN` like any other client.

mod agent;
mod http;
mod mcp;

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use serde_json::{Map, Value};

use crate::config::{Command, EndpointArgs};
use rpc_core::escape::{self, Lines, OneLine};

/// Runs a client command; an error ends it with exit code 1.
pub async fn run(endpoint: &EndpointArgs, command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(_) | Command::Common(_) => unreachable!("main runs serve, completions and man itself"),
        Command::Sessions { json } => sessions(endpoint, json).await,
        Command::Tools { session, json } => tools(endpoint, &session, json).await,
        Command::Call { session, tool, args, timeout, json } => {
            call(endpoint, &session, &tool, args, timeout, json).await
        }
        Command::Mcp { session, call_timeout } => mcp::serve_stdio(endpoint, &session, call_timeout).await,
    }?;
    Ok(ExitCode::SUCCESS)
}

async fn sessions(endpoint: &EndpointArgs, json: bool) -> anyhow::Result<()> {
    let list = http::get_json(endpoint, "/sessions").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    let rows = list.as_array().context("the broker's /sessions is not a list")?;
    if rows.is_empty() {
        println!("no sessions");
        return Ok(());
    }
    // Ids and node names come from browsers and brokers: escaped, a row is a line.
    let shown = |value: &Value, missing: &str| escape::one_line(value.as_str().unwrap_or(missing));
    let width = rows.iter().map(|r| shown(&r["id"], "?").chars().count()).max().unwrap_or(0).max("SESSION".len());
    // A cluster's rows name the node that holds each session's browser.
    let nodes = rows.iter().any(|r| r["node"].is_string());
    let node_width = rows.iter().map(|r| shown(&r["node"], "-").chars().count()).max().unwrap_or(0).max(4);
    let node_column = |text: &str| if nodes { format!("{text:node_width$}  ") } else { String::new() };
    println!("{:width$}  {}BROWSER  AGENTS  TOOLS  LAST ACTIVITY", "SESSION", node_column("NODE"));
    for row in rows {
        println!(
            "{:width$}  {}{:7}  {:<6}  {:<5}  {}",
            shown(&row["id"], "?"),
            node_column(&shown(&row["node"], "-")),
            if row["hasBrowser"].as_bool() == Some(true) { "yes" } else { "no" },
            row["agentCount"].as_u64().unwrap_or(0),
            row["toolCount"].as_u64().unwrap_or(0),
            shown(&row["lastActivity"], "")
        );
    }
    Ok(())
}

async fn tools(endpoint: &EndpointArgs, session: &str, json: bool) -> anyhow::Result<()> {
    let agent = agent::Agent::join(endpoint, session).await?;
    let tools = agent.joined["tools"].clone();
    agent.close();
    if json {
        println!("{}", serde_json::to_string_pretty(&tools)?);
        return Ok(());
    }
    let tools = tools.as_array().cloned().unwrap_or_default();
    if tools.is_empty() {
        println!("session {} has no tools registered", OneLine(session));
        return Ok(());
    }
    // Names and descriptions are the browser's: escaped, a tool is a line.
    let shown = |value: &Value, missing: &str| escape::one_line(value.as_str().unwrap_or(missing));
    let width = tools.iter().map(|t| shown(&t["name"], "?").chars().count()).max().unwrap_or(0);
    for tool in &tools {
        println!("{:width$}  {}", shown(&tool["name"], "?"), shown(&tool["description"], ""));
    }
    Ok(())
}

async fn call(
    endpoint: &EndpointArgs,
    session: &str,
    tool: &str,
    args: Vec<(String, Value)>,
    timeout: Option<u64>,
    json: bool,
) -> anyhow::Result<()> {
    let agent = agent::Agent::join(endpoint, session).await?;
    let arguments: Map<String, Value> = args.into_iter().collect();
    let mut params = serde_json::json!({ "name": tool, "arguments": arguments });
    if let Some(ms) = timeout {
        params["timeout"] = ms.into();
    }
    // Wait a little longer than the broker so its timeout error is what we see.
    let wait = std::time::Duration::from_millis(timeout.unwrap_or(300_000) + 5_000);
    let result = agent.request("tools/call", &params, wait).await;
    agent.close();
    let result = result?;
    if json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_content(&result);
    }
    if result["isError"].as_bool() == Some(true) {
        bail!("the tool reported an error");
    }
    Ok(())
}

/// Prints a tool result's text content as text (its lines kept, any other
/// control character escaped: the browser wrote it), anything else as JSON.
fn print_content(result: &Value) {
    match result["content"].as_array() {
        Some(items) => {
            for item in items {
                match (item["type"].as_str(), item["text"].as_str()) {
                    (Some("text"), Some(text)) => println!("{}", Lines(text)),
                    _ => println!("{item}"),
                }
            }
        }
        None => println!("{result}"),
    }
}
