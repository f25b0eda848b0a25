//! Writing a file whole by replacing it: a new file beside it, written and
//! synced, renamed over the old one, and the directory synced, so that a
//! crash or a full disk leaves the old file or the new one, never a part.
//!
//! The new file gets a random name and is created only if nothing has that
//! name (`O_EXCL`): a fixed or guessable temporary name opened with
//! `O_CREAT | O_TRUNC` would follow a symbolic link someone left under it
//! and overwrite whatever that points to. A write that fails leaves no
//! temporary file behind.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The permissions the replacement gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Always these (a file of secrets: 0o600), whatever the old file had.
    Exactly(u32),
    /// The old file's, so that a user's `chmod` survives a save; these when
    /// there was no file.
    KeepOr(u32),
}

/// Replaces `path` with `bytes`, durably. Its directory must exist. A
/// symbolic link at `path` is replaced by the file, not followed.
pub fn replace(path: &Path, bytes: &[u8], mode: Mode) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let mut file = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(dir)?;
    let mode = match mode {
        Mode::Exactly(mode) => mode,
        Mode::KeepOr(new) => {
            let old = std::fs::symlink_metadata(path).ok().filter(|m| m.is_file());
            old.map_or(new, |m| m.permissions().mode())
        }
    };
    file.as_file().set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    // On failure the temporary file is removed as `persist`'s error drops it.
    file.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_file_is_replaced_whole_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("state.json");
        replace(&target, b"one", Mode::Exactly(0o600)).unwrap();
        replace(&target, b"two", Mode::Exactly(0o600)).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // A write that fails at the rename (a directory is in the way)
        // leaves no temporary file beside it.
        let taken = dir.path().join("taken");
        fs::create_dir(&taken).unwrap();
        fs::write(taken.join("inside"), "x").unwrap();
        assert!(replace(&taken, b"x", Mode::Exactly(0o600)).is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "{target:?} and {taken:?} only");
    }

    #[test]
    fn permissions_are_set_or_kept_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("message.hl7");
        replace(&target, b"new", Mode::KeepOr(0o640)).unwrap();
        assert_eq!(mode_of(&target), 0o640, "a new file gets the default");
        fs::set_permissions(&target, fs::Permissions::from_mode(0o604)).unwrap();
        replace(&target, b"saved", Mode::KeepOr(0o640)).unwrap();
        assert_eq!(mode_of(&target), 0o604, "a user's chmod survives a save");
        replace(&target, b"secret", Mode::Exactly(0o600)).unwrap();
        assert_eq!(mode_of(&target), 0o600);
    }

    #[test]
    fn a_symlink_is_replaced_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o666)).unwrap();
        let target = dir.path().join("state.json");
        std::os::unix::fs::symlink(&victim, &target).unwrap();
        replace(&target, b"new", Mode::KeepOr(0o600)).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        assert!(fs::symlink_metadata(&target).unwrap().is_file());
        assert_eq!(mode_of(&target), 0o600, "the link's target's mode is not taken either");
    }
}
