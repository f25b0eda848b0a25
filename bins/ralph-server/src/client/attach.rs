//! `attach TASK`: the status, the last lines, then the output live. Keys:
//! `i` interactive mode (keys then go to the agent; Esc alone leaves it),
//! `s` stop, `c` checkpoint, `q` (or Ctrl-C, Ctrl-D) detach.
//!
//! The terminal is raw while attached (keys arrive one by one, and the
//! agent's terminal does its own echo); [`RawTerminal`] restores it on every
//! way out: a key, the server going away, SIGTERM/SIGHUP, an error, a panic.

use std::io::Write;
use std::os::fd::AsFd;
use std::process::ExitCode;

use nix::sys::termios::{self, SetArg, Termios};
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::socket::{call, connect};
use crate::config::{SocketArgs, TaskArg};
use crate::output::plain;

/// Lines of recent output shown on attaching.
const LAST_LINES: usize = 20;

/// Raw mode on stdin while it lives; the saved settings come back on drop.
struct RawTerminal {
    saved: Termios,
}

impl RawTerminal {
    fn enter() -> Option<RawTerminal> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSADRAIN, &raw).ok()?;
        Some(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSADRAIN, &self.saved);
    }
}

/// Keys from stdin, read on a thread of their own (a blocked read must not
/// keep the runtime from ending).
fn keys() -> mpsc::UnboundedReceiver<Vec<u8>> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        loop {
            match std::io::Read::read(&mut std::io::stdin(), &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Writes with `\r\n` line ends (the terminal is raw).
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", text.replace('\n', "\r\n"));
    let _ = out.flush();
}

pub async fn run(args: TaskArg, sockets: SocketArgs) -> Result<ExitCode, String> {
    let mut connected = connect(&args.task, &sockets).await?;
    // Subscribed before the status is read: a line written in between is
    // then in both (and shown once, see `overlap`), never in neither.
    call(&connected.peer, "subscribe", json!({"events": ["*"]})).await?;
    let status = call(&connected.peer, "get_status", json!({})).await?;
    // Restored when this returns, before an error is printed.
    let _raw = RawTerminal::enter();
    say(&header(&status));
    let recent: Vec<&str> = status["recent_output"]
        .as_array()
        .map(|lines| lines.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for line in &recent[recent.len().saturating_sub(LAST_LINES)..] {
        say(&format!("{line}\n"));
    }
    let mut held = Vec::new();
    while let Ok(event) = connected.events.try_recv() {
        held.push(event);
    }
    let mut interactive = status["interactive_mode"] == true;
    let mut repeated = overlap(&recent, &held);
    for event in &held {
        if repeated > 0 && event["type"] == "output" {
            repeated -= 1;
            continue;
        }
        show(event, &mut interactive);
    }
    let (Ok(mut term), Ok(mut hangup)) = (signal(SignalKind::terminate()), signal(SignalKind::hangup())) else {
        return Err("cannot watch signals".to_owned());
    };
    let mut keys = keys();
    loop {
        tokio::select! {
            event = connected.events.recv() => match event {
                Some(event) => show(&event, &mut interactive),
                None => break,
            },
            key = keys.recv() => {
                let Some(key) = key else { break };
                if !on_key(&connected.peer, &key, &mut interactive).await {
                    break;
                }
            }
            _ = connected.peer.closed() => {
                say("\n[ralph-server: the task's server went away]\n");
                break;
            }
            _ = term.recv() => break,
            _ = hangup.recv() => break,
        }
    }
    say("\n[detached]\n");
    Ok(ExitCode::SUCCESS)
}

/// How many of the first `output` events in `held` repeat the end of
/// `recent` (lines written after the subscription and before the status
/// was read): the most lines for which the two agree.
fn overlap(recent: &[&str], held: &[Value]) -> usize {
    let lines: Vec<String> = held
        .iter()
        .filter(|event| event["type"] == "output")
        .map(|event| plain(event["data"]["line"].as_str().unwrap_or_default()))
        .collect();
    (1..=lines.len().min(recent.len()))
        .rev()
        .find(|&n| recent[recent.len() - n..].iter().zip(&lines[..n]).all(|(seen, line)| *seen == line.as_str()))
        .unwrap_or(0)
}

fn header(s: &Value) -> String {
    format!(
        "ralph-server: {} - {} - iteration {}/{} - story {} - agent {}\n\
         keys: i interactive (Esc leaves), s stop, c checkpoint, q detach\n",
        s["task_name"].as_str().unwrap_or("?"),
        s["status"].as_str().unwrap_or("?"),
        s["iteration"],
        s["max_iterations"],
        s["current_story"].as_str().unwrap_or("-"),
        s["agent"].as_str().unwrap_or("?"),
    )
}

fn show(event: &Value, interactive: &mut bool) {
    let data = &event["data"];
    match event["type"].as_str() {
        Some("output") => {
            let line = data["line"].as_str().unwrap_or_default();
            if data["partial"] == true { say(line) } else { say(&format!("{line}\n")) }
        }
        Some("state_change") => {
            if let Some(on) = data["interactive_mode"].as_bool() {
                *interactive = on;
            }
            say(&format!("[ralph-server: {data}]\n"));
        }
        Some("dropped") => say(&format!("[ralph-server: {} events missed]\n", data["count"])),
        _ => {}
    }
}

/// Acts on keys; returns false to detach.
async fn on_key(peer: &rpc_core::PeerHandle, key: &[u8], interactive: &mut bool) -> bool {
    if *interactive {
        if key == b"\x1b" {
            *interactive = false;
            let _ = call(peer, "set_interactive_mode", json!({"enabled": false})).await;
            say("[ralph-server: interactive mode off]\n");
        } else {
            let data = String::from_utf8_lossy(key);
            let _ = call(peer, "write_pty", json!({"data": data})).await;
        }
        return true;
    }
    for &byte in key {
        match byte {
            b'i' => {
                *interactive = true;
                let _ = call(peer, "set_interactive_mode", json!({"enabled": true})).await;
                say("[ralph-server: interactive mode: keys go to the agent, Esc leaves]\n");
                return true;
            }
            b's' => {
                let _ = call(peer, "stop", json!({})).await;
                say("[ralph-server: stop requested]\n");
            }
            b'c' => {
                let _ = call(peer, "checkpoint", json!({})).await;
                say("[ralph-server: checkpoint requested]\n");
            }
            b'q' | 0x03 | 0x04 => return false,
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(line: &str) -> Value {
        json!({"type": "output", "data": {"line": line}})
    }

    #[test]
    fn lines_written_between_the_subscription_and_the_status_are_shown_once() {
        let recent = ["one", "two", "three"];
        // Nothing in between: every held event is new.
        assert_eq!(overlap(&recent, &[output("four")]), 0);
        // "two" and "three" came in both; a state_change in between counts for nothing.
        let state = json!({"type": "state_change", "data": {"iteration": 2}});
        assert_eq!(overlap(&recent, &[output("two"), state, output("\x1b[1mthree\x1b[0m"), output("four")]), 2);
        // The most lines that agree, the prompt written last included.
        assert_eq!(overlap(&["x", "x", "your input: "], &[output("x"), output("your input: ")]), 2);
        assert_eq!(overlap(&[], &[output("one")]), 0);
        assert_eq!(overlap(&recent, &[]), 0);
    }
}
