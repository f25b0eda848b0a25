//! Hermes' own error codes (-32000..-32012); -32050..-32099 belong to extensions.

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
