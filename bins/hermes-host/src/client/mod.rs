//! The client subcommands, each a client of a running host's control
//! socket: `hermes-host ctl ...` ([`ctl`]), one command per control method;
//! `ctl ui` ([`terminal_ui`]), a terminal that answers the extensions'
//! dialogs; `ctl web` ([`web_page`]), the editor page's URL; `hermes-host
//! mcp` ([`mcp`]), the same methods as an MCP server for agents.

pub mod ctl;
pub mod mcp;
mod terminal_ui;
mod web_page;

use std::borrow::Cow;
use std::fmt::Write as _;

/// Text an extension wrote (a log line, a dialog's words, its name), fit to
/// print at a terminal: control characters (C0 but tab, DEL, C1) are shown
/// escaped (`\x1b`, `\x7f`, `\u{9b}`) rather than sent, so no extension can
/// retitle the window, clear the screen, hide words of a question or move
/// the cursor over what the host printed.
pub(crate) fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !is_unsafe(c) => out.push(c),
            '\0'..='\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

fn is_unsafe(c: char) -> bool {
    c.is_control() && c != '\t'
}

/// A JSON text fit to print at a terminal: JSON writers escape C0 in strings
/// but not DEL and C1, which can only stand inside strings and mean the same
/// as their `\u` escapes there.
pub(crate) fn json_terminal_safe(json: &str) -> Cow<'_, str> {
    let raw_in_json = |c: char| c.is_control() && c > '\x7e';
    if !json.chars().any(raw_in_json) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        match c {
            c if raw_in_json(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Why a client could not connect to the host's control socket at `socket`:
/// for a host that is not running, where it looked and how to start one.
fn not_reached(socket: &std::path::Path, error: std::io::Error) -> String {
    use std::io::ErrorKind::{ConnectionRefused, NotFound};
    match error.kind() {
        NotFound | ConnectionRefused => format!(
            "hermes-host is not running: no host listens at {} ({error}). Start it with `hermes-host` \
             (or `systemctl --user start hermes-host`), or give its socket with --socket or HERMES_HOST_SOCKET",
            socket.display()
        ),
        _ => format!("cannot reach hermes-host at {}: {error}", socket.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(terminal_safe("plain\ttext, Zoë 🚑"), "plain\ttext, Zoë 🚑");
        assert_eq!(terminal_safe("\x1b]0;pwned\x07\x1b[2J"), "\\x1b]0;pwned\\x07\\x1b[2J");
        assert_eq!(terminal_safe("Delete \x1b[8mALL\x1b[0m?"), "Delete \\x1b[8mALL\\x1b[0m?");
        assert_eq!(terminal_safe("a\rb\nc\x7f\u{9b}31m"), "a\\x0db\\x0ac\\x7f\\u{9b}31m");
        let json = serde_json::to_string_pretty(&serde_json::json!({"line": "\x1b[2J\x7f\u{9b}"})).unwrap();
        let safe = json_terminal_safe(&json);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["line"], "\x1b[2J\x7f\u{9b}");
    }
}
