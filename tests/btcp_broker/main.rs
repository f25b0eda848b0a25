//! btcp-broker over real sockets: the binary started on a free port, spoken to
//! as browsers and agents over WebSocket and SSE+POST, and by headless Chromium.

mod chromium;
mod commands;
mod forwarding;
mod http;
mod load;
mod logging;
mod mcp;
mod mcp_errors;
mod mcp_limits;
mod memory;
mod messages;
mod public_client;
mod service;
mod sessions;
mod settings;
mod shutdown;
mod sse;
mod sse_fallback;
mod sse_head;
mod support;
