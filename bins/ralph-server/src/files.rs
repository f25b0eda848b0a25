//! Writing a file whole by replacing it ([`rpc_core::files::replace`]: a
//! new file under a random name beside it, synced, renamed over it), so a
//! crash leaves the old file or the new. The task's `.ralph` directory is
//! made first if it is not there yet.

use std::io;
use std::path::Path;

use rpc_core::files::Mode;

/// Replaces `path` with `bytes`, a file of exactly `mode`, durably.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    rpc_core::files::replace(path, bytes, Mode::Exactly(mode))
}
