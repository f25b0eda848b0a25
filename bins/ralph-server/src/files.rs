//! Writing a file whole by replacing it ([`rpc_core::files::replace`]: a
//! new file under a random name beside it, synced, renamed over it), so a
//! crash leaves the old file or the new. The task's `.ralph` directory is
//! made first if it is not there yet (or no more: `git clean -fdx` removes it).

use std::io;
use std::path::Path;

use rpc_core::files::Mode;

/// Replaces `path` with `bytes`, a file of exactly `mode`, durably.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        make_dir(dir)?;
    }
    rpc_core::files::replace(path, bytes, Mode::Exactly(mode))
}

/// Makes `dir` (and its parents) if it is not there, durably: a directory
/// made is synced into its parent, so a crash does not take it, and the
/// file just synced inside it, away.
pub fn make_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => std::fs::File::open(parent)?.sync_all(),
        None => Ok(()),
    }
}
