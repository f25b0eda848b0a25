//! Writing a file whole by replacing it: a new file beside it, synced, then
//! renamed over it, so a crash leaves the old file or the new one.
//!
//! The new file gets a name no one could have planted (the pid and a
//! counter, and created only if it does not exist, `O_EXCL`): a fixed
//! temporary name, opened with `O_CREAT | O_TRUNC`, would follow a symbolic
//! link someone left under that name and overwrite whatever it points to.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many names are tried before giving up (each taken by a file someone put there).
const ATTEMPTS: u32 = 16;

/// Replaces `path` with `bytes` (a new file of `mode`), durably: the new
/// file and its directory are synced.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for _ in 0..ATTEMPTS {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        let mut file = match OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        drop(file);
        if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        return File::open(dir)?.sync_all();
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: no free temporary name beside it", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_planted_where_a_temporary_file_could_go_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let target = dir.path().join("state.json");
        // Every name the next few writes could pick, and the old fixed ones.
        for n in 0..64 {
            let name = format!(".state.json.{}.{n}.tmp", std::process::id());
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
        }
        std::os::unix::fs::symlink(&victim, dir.path().join("state.tmp")).unwrap();
        let written = replace(&target, b"new", 0o600);
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        if written.is_ok() {
            assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        }
    }

    #[test]
    fn the_file_is_replaced_whole_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f");
        replace(&target, b"one", 0o600).unwrap();
        replace(&target, b"two", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
