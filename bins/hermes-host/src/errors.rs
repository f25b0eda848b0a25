//! Hermes' own error codes (-32000..-32049); -32050..-32099 belong to extensions.
//!
//! Hermes reserves three more that this host never sends, as Hermes itself
//! does not: -32002 "already initialised" (what an extension may answer to
//! a second `initialize`; the host initialises each process once), -32010
//! "command timeout" (`command/execute` is a notification with no timeout),
//! -32011 "validation error" (for schema validation, which neither Hermes'
//! protocol nor this host performs: `schema/get` only merges schemas).

use rpc_core::RpcError;

pub const GENERAL: i64 = -32000;
pub const NOT_INITIALISED: i64 = -32001;
pub const NO_MESSAGE: i64 = -32003;
pub const INVALID_MESSAGE: i64 = -32004;
pub const INVALID_PATH: i64 = -32005;
pub const PATH_NOT_FOUND: i64 = -32006;
pub const INVALID_URL: i64 = -32007;
pub const WINDOW_ERROR: i64 = -32008;
pub const COMMAND_NOT_FOUND: i64 = -32009;
pub const DIALOG_ERROR: i64 = -32012;

pub fn no_message() -> RpcError {
    RpcError::new(NO_MESSAGE, "no message open")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reserved by Hermes, never sent by the host (see above).
    const NEVER_SENT: [i64; 3] = [-32002, -32010, -32011];

    /// The user documentation says which codes the host sends and which it
    /// never does, and agrees with this file.
    #[test]
    fn the_documented_codes_are_the_ones_the_host_sends() {
        let docs = include_str!("../../../docs/hermes-host.md");
        let section = docs.split("\n## Error codes\n").nth(1).expect("an Error codes section");
        let section = section.split("\n## ").next().unwrap();
        let (sent, rest) = section.split_once("never sends").expect("a list of codes never sent");
        let sent_codes = [
            GENERAL,
            NOT_INITIALISED,
            NO_MESSAGE,
            INVALID_MESSAGE,
            INVALID_PATH,
            PATH_NOT_FOUND,
            INVALID_URL,
            WINDOW_ERROR,
            COMMAND_NOT_FOUND,
            DIALOG_ERROR,
        ];
        for code in sent_codes {
            assert!(sent.contains(&code.to_string()), "{code} is sent but not documented as sent");
            assert!(!rest.contains(&code.to_string()), "{code} is sent but documented as never sent");
        }
        for code in NEVER_SENT {
            assert!(!sent_codes.contains(&code));
            assert!(!sent.contains(&code.to_string()), "{code} is documented as sent");
            assert!(rest.contains(&code.to_string()), "{code} is not documented");
        }
    }
}
