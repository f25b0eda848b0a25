//! JSON-RPC 2.0 messages: ids, errors, strict parsing and serialisation.
//!
//! Incoming text is parsed into borrowed types (`&RawValue` for params and
//! results) so the hot path never builds a `serde_json::Value`. Every rule of the
//! specification is enforced here, once, so that framings and the peer only move
//! bytes around. Choices the specification leaves open:
//!
//! - `"params": null` is accepted and means "no params".
//! - Number ids are kept as the exact text received (`1.0`, `-0`, `1e400` and
//!   numbers past 2^64 all come back byte for byte).
//! - A response carrying both `result` and `error` is reported as
//!   [`Outcome::Both`]; whether to accept it is the peer's policy.
//!
//! One file each: ids (`id.rs`), error objects (`error.rs`), parsing
//! (`parse.rs`, with its fast path in `scan.rs`), writing (`write.rs`).

mod error;
mod id;
mod parse;
mod raw;
mod scan;
#[cfg(test)]
mod tests;
mod text;
mod write;

pub use error::RpcError;
pub use id::Id;
pub(crate) use id::{IdMap, IdSet};
pub use parse::{Invalid, JSONRPC_VERSION, Message, Outcome, Parsed, parse, parse_text};
pub(crate) use parse::{
    MISSING_METHOD, check_id_kept, check_leading, check_scanner, invalid_object, parse_leading, parse_object,
};
pub use scan::{empty_object, object_members};
pub use text::write_json_str;
pub use write::{Kind, WriteJson, batch, request, response_err, response_into, response_ok, response_with};
