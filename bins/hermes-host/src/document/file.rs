//! The message's file on disk: read only when it is a regular file and
//! within the limit, written atomically.

use std::path::Path;

use rpc_core::RpcError;

use crate::errors;

/// The bytes of the regular file at `path`, at most `max_bytes`
/// ([`rpc_core::files::read_regular`]): -32006 when it cannot be read or is
/// anything else (a device such as `/dev/zero`, a FIFO, a directory), -32004
/// when it is longer. The size a file claims is not trusted: what is read
/// stops at the limit plus one byte, so a file that grows as it is read
/// still costs no more than a message.
pub(super) fn read_regular_file(path: &Path, max_bytes: usize) -> Result<Vec<u8>, RpcError> {
    use rpc_core::files::Refused;
    rpc_core::files::read_regular(path, max_bytes).map_err(|e| match Refused::of(&e) {
        Some(Refused::NotRegular) => RpcError::new(
            errors::PATH_NOT_FOUND,
            format!("{}: not a regular file (a device, a FIFO or a directory cannot be opened)", path.display()),
        ),
        Some(Refused::TooLarge { .. }) => RpcError::new(
            errors::INVALID_MESSAGE,
            format!(
                "{}: larger than the message limit of {max_bytes} bytes (HERMES_HOST_MAX_MESSAGE, --max-message)",
                path.display()
            ),
        ),
        None => not_found(path, e),
    })
}

pub(super) fn not_found(path: &Path, e: std::io::Error) -> RpcError {
    RpcError::new(errors::PATH_NOT_FOUND, format!("{}: {e}", path.display()))
}

/// Replaces the file at `path` whole ([`rpc_core::files::replace`]): a
/// crash leaves the old file or the new. An existing file keeps its
/// permissions; a new one is 0644.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    rpc_core::files::replace(path, bytes, rpc_core::files::Mode::KeepOr(0o644))
}
