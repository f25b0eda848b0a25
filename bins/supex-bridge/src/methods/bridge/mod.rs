//! The bridge server's own methods (port 9876) besides `ping` and the tools:
//! its `hello` (identity and workspace), and the legacy `{command,
//! parameters}` dialect rewritten into `tools/call`. Its method table is in
//! [`crate::methods`].

pub mod hello;
pub mod legacy;
