//! Files a daemon reads and writes whole.
//!
//! Reading ([`read_regular`], [`open_regular`]): only a regular file, and at
//! most a limit of bytes. A path someone else controls may name a FIFO (whose
//! open and read wait for a writer forever, on whatever thread does them), a
//! device (`/dev/zero` never ends) or a file far larger than anything the
//! daemon means to hold.
//!
//! Writing ([`replace`]): a new file beside the old one, written and
//! synced, renamed over the old one, and the directory synced, so that a
//! crash or a full disk leaves the old file or the new one, never a part.
//!
//! The new file gets a random name and is created only if nothing has that
//! name (`O_EXCL`): a fixed or guessable temporary name opened with
//! `O_CREAT | O_TRUNC` would follow a symbolic link someone left under it
//! and overwrite whatever that points to. A write that fails leaves no
//! temporary file behind.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Why [`read_regular`] or [`open_regular`] refused a file: the error inside
/// the [`io::Error`] they return ([`Refused::of`] finds it). Its text does
/// not name the file, as the standard library's errors do not: the caller
/// says which file it was reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("not a regular file (a device, a FIFO or a directory is never read)")]
    NotRegular,
    #[error("larger than {max_bytes} bytes, the most that is read of it")]
    TooLarge { max_bytes: u64 },
}

impl Refused {
    /// The refusal an error from [`read_regular`] or [`open_regular`] carries, if it is one.
    pub fn of(error: &io::Error) -> Option<Refused> {
        error.get_ref()?.downcast_ref::<Refused>().copied()
    }
}

impl From<Refused> for io::Error {
    fn from(refused: Refused) -> io::Error {
        let kind = match refused {
            Refused::NotRegular => io::ErrorKind::InvalidInput,
            Refused::TooLarge { .. } => io::ErrorKind::FileTooLarge,
        };
        io::Error::new(kind, refused)
    }
}

/// The regular file at `path`, open for reading. Checked before it is
/// opened, so a device is never opened; opened non-blocking, so a FIFO put
/// there in between does not wait for a writer; and checked again on what
/// was opened. A symbolic link is followed to what it names, which is
/// checked the same way. A missing file is the open's own error (`NotFound`).
pub fn open_regular(path: &Path) -> io::Result<File> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(Refused::NotRegular.into());
    }
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(Refused::NotRegular.into());
    }
    Ok(file)
}

/// The bytes of the regular file at `path` ([`open_regular`]), at most
/// `max_bytes`: past them, [`Refused::TooLarge`]. The size the file claims
/// is not trusted: reading stops at the limit plus one byte, so a file that
/// grows as it is read costs no more than the limit either.
pub fn read_regular(path: &Path, max_bytes: usize) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(max_bytes as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > max_bytes {
        return Err(Refused::TooLarge { max_bytes: max_bytes as u64 }.into());
    }
    Ok(bytes)
}

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
    use std::time::{Duration, Instant};

    #[test]
    fn a_regular_file_is_read_up_to_its_limit_and_refused_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prd.json");
        fs::write(&path, b"12345").unwrap();
        assert_eq!(read_regular(&path, 5).unwrap(), b"12345");
        let err = read_regular(&path, 4).unwrap_err();
        assert_eq!(Refused::of(&err), Some(Refused::TooLarge { max_bytes: 4 }));
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(err.to_string(), "larger than 4 bytes, the most that is read of it");
        // A link to a regular file is read; a missing file is the usual NotFound.
        std::os::unix::fs::symlink(&path, dir.path().join("link")).unwrap();
        assert_eq!(read_regular(&dir.path().join("link"), 5).unwrap(), b"12345");
        let err = read_regular(&dir.path().join("missing"), 5).unwrap_err();
        assert_eq!((err.kind(), Refused::of(&err)), (io::ErrorKind::NotFound, None));
    }

    #[test]
    fn a_fifo_a_device_or_a_directory_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let started = Instant::now();
        for path in [&fifo, &zero, &dir.path().to_owned()] {
            let err = read_regular(path, 1 << 20).unwrap_err();
            assert_eq!(Refused::of(&err), Some(Refused::NotRegular), "{path:?}: {err}");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            assert!(err.to_string().starts_with("not a regular file"), "{err}");
            assert!(open_regular(path).is_err());
        }
        // No writer ever opens the FIFO: a blocking open or read would hang here.
        assert!(started.elapsed() < Duration::from_secs(5));
    }

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
