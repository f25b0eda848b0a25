//! The message's file on disk: read only when it is a regular file and
//! within the limit, written atomically.

use std::path::Path;

use rpc_core::RpcError;

use crate::errors;

/// The bytes of the regular file at `path`, at most `max_bytes`: -32006 when
/// it cannot be read or is anything else (a device such as `/dev/zero`, a
/// FIFO, a directory), -32004 when it is longer. The size a file claims is
/// not trusted: what is read stops at the limit plus one byte, so a file
/// that grows as it is read still costs no more than a message.
pub(super) fn read_regular_file(path: &Path, max_bytes: usize) -> Result<Vec<u8>, RpcError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || {
        RpcError::new(
            errors::PATH_NOT_FOUND,
            format!("{}: not a regular file (a device, a FIFO or a directory cannot be opened)", path.display()),
        )
    };
    // Checked before opening, so a device is never opened; and again on what
    // was opened, in case the path changed in between.
    if !std::fs::metadata(path).map_err(|e| not_found(path, e))?.is_file() {
        return Err(not_regular());
    }
    // Non-blocking: opening a FIFO would otherwise wait for a writer.
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY;
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(path).map_err(|e| not_found(path, e))?;
    if !file.metadata().map_err(|e| not_found(path, e))?.is_file() {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(max_bytes as u64 + 1).read_to_end(&mut bytes).map_err(|e| not_found(path, e))?;
    if bytes.len() > max_bytes {
        return Err(RpcError::new(
            errors::INVALID_MESSAGE,
            format!(
                "{}: larger than the message limit of {max_bytes} bytes (HERMES_HOST_MAX_MESSAGE, --max-message)",
                path.display()
            ),
        ));
    }
    Ok(bytes)
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
