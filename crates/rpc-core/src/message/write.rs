//! Writing messages: responses, requests and batches, serialised once,
//! straight into their bytes.

use std::cell::RefCell;

use serde::Serialize;

use super::error::RpcError;
use super::id::Id;
use super::text::write_json_str;

/// The kind of an outgoing message, for transports that label them (SSE events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// Serialises a success response around an already-serialised result.
pub fn response_ok(id: &Id, result_json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(33 + id.json_len_hint() + result_json.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    id.write_json(&mut out);
    out.extend_from_slice(b",\"result\":");
    out.extend_from_slice(result_json);
    out.push(b'}');
    out
}

/// Serialises a success response, the result written straight after the id.
pub fn response_with<R: Serialize + ?Sized>(id: &Id, result: &R) -> serde_json::Result<Vec<u8>> {
    exact_size(|out| write_response(out, id, result))
}

/// What `write` writes, in a buffer of exactly its size.
///
/// It is written into a buffer this thread keeps, then copied out: a buffer
/// with spare capacity costs `Bytes` an extra allocation (and two frees) on
/// its way to the socket, one that grows as it is written is allocated and
/// copied again at every doubling, and one on the stack has to be zeroed
/// first, every time.
fn exact_size(write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>) -> serde_json::Result<Vec<u8>> {
    /// Past this, the buffer goes after use: a thread keeps at most this
    /// much for the next message, however large one was.
    const KEEP: usize = 16 * 1024;
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut out) => {
            out.clear();
            let written = write(&mut out).map(|()| out.to_vec());
            if out.capacity() > KEEP {
                *out = Vec::new();
            }
            written
        }
        // A value whose serialisation writes a message of its own.
        Err(_) => {
            let mut out = Vec::new();
            write(&mut out)?;
            Ok(out)
        }
    })
}

/// A success response appended to `out` (nothing of it if the result does
/// not serialise).
pub fn response_into<R: Serialize + ?Sized>(out: &mut Vec<u8>, id: &Id, result: &R) -> serde_json::Result<()> {
    let start = out.len();
    let written = write_response(out, id, result);
    if written.is_err() {
        out.truncate(start);
    }
    written
}

fn write_response<W: std::io::Write, R: Serialize + ?Sized>(
    out: &mut W,
    id: &Id,
    result: &R,
) -> serde_json::Result<()> {
    let io = serde_json::Error::io;
    out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":").map_err(io)?;
    match id {
        // The common id, without a serializer made for it.
        Id::Int(n) => out.write_all(itoa::Buffer::new().format(*n).as_bytes()).map_err(io)?,
        _ => serde_json::to_writer(&mut *out, id)?,
    }
    out.write_all(b",\"result\":").map_err(io)?;
    serde_json::to_writer(&mut *out, result)?;
    out.write_all(b"}").map_err(io)
}

/// Serialises an error response.
pub fn response_err(id: &Id, error: &RpcError) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    id.write_json(&mut out);
    out.extend_from_slice(b",\"error\":");
    serde_json::to_writer(&mut out, error).expect("an error object always serialises");
    out.push(b'}');
    out
}

/// A request's params, written into the request as JSON. Anything
/// `Serialize` is, through serde; a type on a hot path may write itself
/// instead (a forwarded call that only wraps JSON it already holds, where
/// serde's map and raw-value machinery cost more than the bytes).
pub trait WriteJson {
    /// Appends exactly one JSON value to `out`.
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()>;
}

impl<T: Serialize + ?Sized> WriteJson for T {
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        serde_json::to_writer(out, self)
    }
}

/// Serialises a request (`id: Some`) or a notification (`id: None`).
pub fn request<P: WriteJson + ?Sized>(id: Option<&Id>, method: &str, params: &P) -> serde_json::Result<Vec<u8>> {
    exact_size(|out| {
        out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",");
        if let Some(id) = id {
            out.extend_from_slice(b"\"id\":");
            id.write_json(out);
            out.push(b',');
        }
        out.extend_from_slice(b"\"method\":");
        write_json_str(out, method);
        let start = out.len();
        out.extend_from_slice(b",\"params\":");
        let params_at = out.len();
        params.write_json(out)?;
        // `()` and `None` serialise as null: leave the member out rather than
        // send a value some peers reject.
        if &out[params_at..] == b"null" {
            out.truncate(start);
        }
        out.push(b'}');
        Ok(())
    })
}

/// Serialises several replies as one batch array.
pub fn batch(replies: &[Vec<u8>]) -> Vec<u8> {
    let len = replies.iter().map(|r| r.len() + 1).sum::<usize>() + 2;
    let mut out = Vec::with_capacity(len);
    out.push(b'[');
    for (i, reply) in replies.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(reply);
    }
    out.push(b']');
    out
}
