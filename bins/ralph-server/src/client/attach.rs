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
    let status = call(&connected.peer, "get_status", json!({})).await?;
    // Restored when this returns, before an error is printed.
    let _raw = RawTerminal::enter();
    say(&header(&status));
    let recent = status["recent_output"].as_array().cloned().unwrap_or_default();
    for line in recent.iter().skip(recent.len().saturating_sub(LAST_LINES)) {
        say(&format!("{}\n", line.as_str().unwrap_or_default()));
    }
    call(&connected.peer, "subscribe", json!({"events": ["*"]})).await?;
    let (Ok(mut term), Ok(mut hangup)) = (signal(SignalKind::terminate()), signal(SignalKind::hangup())) else {
        return Err("cannot watch signals".to_owned());
    };
    let mut keys = keys();
    let mut interactive = status["interactive_mode"] == true;
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
