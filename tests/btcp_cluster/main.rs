//! btcp-broker as a cluster over real sockets: three brokers (the real
//! binary) joined through a real `nats-server -js` the harness starts on a
//! free port with a temporary store; browsers and agents on different nodes.
//! Each test skips with a clear line when `nats-server` is missing (fails
//! under CI=true, where `.ci/run` installs it).

#[path = "../btcp_broker/support.rs"]
#[allow(dead_code)]
mod support;

mod cluster;
mod figures;
mod hostile_ids;
mod limits;
mod loss;
mod mcp;
mod nats_faults;
mod routing;
mod settings;
mod support_sse;
mod takeover;
