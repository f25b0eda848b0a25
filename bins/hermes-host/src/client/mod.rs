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

use rpc_core::escape::Tabbed;

/// Text an extension wrote (a log line, a dialog's words, its name), fit to
/// print at a terminal: control characters but tab, the Unicode line
/// separators and the bidi overrides are shown escaped (`\u{1b}`) rather
/// than sent, and `\` as `\\` so an escape cannot be faked; no extension
/// can retitle the window, clear the screen, hide or reorder words of a
/// question, or move the cursor over what the host printed.
pub(crate) fn terminal_safe(text: &str) -> String {
    Tabbed(text).to_string()
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
        assert_eq!(terminal_safe("\x1b]0;pwned\x07\x1b[2J"), "\\u{1b}]0;pwned\\u{7}\\u{1b}[2J");
        assert_eq!(terminal_safe("Delete \x1b[8mALL\x1b[0m?"), "Delete \\u{1b}[8mALL\\u{1b}[0m?");
        assert_eq!(terminal_safe("a\rb\nc\x7f\u{9b}31m"), "a\\u{d}b\\u{a}c\\u{7f}\\u{9b}31m");
        assert_eq!(terminal_safe("rm \u{202e}txt.exe C:\\x"), "rm \\u{202e}txt.exe C:\\\\x");
        let json = serde_json::to_string_pretty(&serde_json::json!({"line": "\x1b[2J\x7f\u{9b}"})).unwrap();
        let safe = json_terminal_safe(&json);
        assert!(!safe.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["line"], "\x1b[2J\x7f\u{9b}");
    }
}
