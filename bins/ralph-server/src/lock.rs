//! The task's locks, flock'd for as long as the loop runs:
//!
//! - the task directory itself: one loop per task directory, whatever
//!   `--name` it runs under and however its path is spelled (a symlink,
//!   `..`): every spelling opens the same directory. A lock on a file inside
//!   it would not do: `git clean -fdx` in the project removes `.ralph`, and
//!   a second `run` would lock a new file of the same name.
//! - `TASK_DIR/.ralph/lock`, naming the loop (its pid and task name) for the
//!   message refusing a second one; flock'd too, as versions before the
//!   directory's lock did, so they and this one refuse each other.
//! - `<socket dir>/<task>.lock`, holding the pid: one loop per task name, so
//!   two directories of the same name never fight over one socket.
//!
//! A second `run` is refused with a message naming the one that runs. The
//! kernel drops a lock when its process dies, however it dies; the files are
//! removed on a normal exit, each only if it is still the one this loop
//! locked (never a file someone made at the path since, and may hold).
//!
//! Neither is opened through a symbolic link (the lock file is truncated and
//! written: a link planted there would have its target overwritten), and a
//! socket directory that other users may write to, without the sticky bit
//! that stops them replacing our files, is refused.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("task directory {dir} is already running {running}")]
    Directory { dir: PathBuf, running: String },
    #[error("task {task:?} is already running (pid {pid}); its lock is {path}")]
    Held { task: String, pid: String, path: PathBuf },
    #[error("{path} is a symbolic link; a lock file is never opened through one (remove it)")]
    Symlink { path: PathBuf },
    #[error(
        "the socket directory {dir} may be written by other users (mode {mode:o}, not sticky), who could \
         replace its sockets and locks; make it private (chmod 700) or choose another (RALPH_SOCKET_DIR)"
    )]
    OpenDirectory { dir: PathBuf, mode: u32 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// What the directory's lock file says of the loop holding it.
#[derive(Debug, Default, Deserialize, Serialize)]
struct Holder {
    pid: u32,
    task: String,
}

/// Dropped in this order: the files are removed while the directory is still locked.
#[derive(Debug)]
pub struct TaskLock {
    _name: LockFile,
    _holder: LockFile,
    _directory: Flock<File>,
}

impl TaskLock {
    /// Takes the directory's lock, then the name's (creating `socket_dir`
    /// 0700 if needed).
    pub fn acquire(task_dir: &Path, socket_dir: &Path, task: &str) -> Result<TaskLock, LockError> {
        let pid = std::process::id();
        let path = task_dir.join(".ralph/lock");
        let refused =
            |said: Option<String>| LockError::Directory { dir: task_dir.to_owned(), running: running(said, &path) };
        let directory = lock_directory(task_dir)?.ok_or_else(|| refused(read_holder(&path)))?;
        let holder = serde_json::to_string(&Holder { pid, task: task.to_owned() }).unwrap_or_default();
        let holder = match LockFile::take(&path, &holder)? {
            Taken::Ours(lock) => lock,
            Taken::Held(said) => return Err(refused(Some(said))),
        };
        if !socket_dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(socket_dir)
                .map_err(|source| LockError::Io { path: socket_dir.to_owned(), source })?;
        }
        check_private(socket_dir)?;
        let path = socket_dir.join(format!("{task}.lock"));
        let name = match LockFile::take(&path, &pid.to_string())? {
            Taken::Ours(lock) => lock,
            Taken::Held(said) => {
                let pid = if said.trim().is_empty() { "unknown".to_owned() } else { said.trim().to_owned() };
                return Err(LockError::Held { task: task.to_owned(), pid, path });
            }
        };
        Ok(TaskLock { _name: name, _holder: holder, _directory: directory })
    }
}

/// The task directory, flock'd; `None` when another process holds it.
fn lock_directory(task_dir: &Path) -> Result<Option<Flock<File>>, LockError> {
    let io = |source| LockError::Io { path: task_dir.to_owned(), source };
    let dir = OpenOptions::new().read(true).custom_flags(nix::libc::O_DIRECTORY).open(task_dir).map_err(io)?;
    match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => Ok(Some(locked)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(io(errno.into())),
    }
}

/// What `.ralph/lock` says of the loop holding the directory, if it can be
/// read (it is gone when `.ralph` was removed under that loop).
fn read_holder(path: &Path) -> Option<String> {
    let bytes = rpc_core::files::read_regular(path, HOLDER_MAX).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The most of a lock file that is read: a pid and a task name.
const HOLDER_MAX: usize = 4096;

/// "as task "x" (pid 1234)", from what the directory's lock file said.
fn running(said: Option<String>, path: &Path) -> String {
    // An unreadable holder (a file from another version) still refuses.
    let holder: Holder = said.as_deref().and_then(|said| serde_json::from_str(said).ok()).unwrap_or_default();
    match (said, holder.pid) {
        (None, _) => format!("(its pid is not known: {}, which names it, was removed)", path.display()),
        (Some(_), 0) => format!("as task {:?} (pid unknown)", holder.task),
        (Some(_), pid) => format!("as task {:?} (pid {pid})", holder.task),
    }
}

/// Refuses a directory others may write to without the sticky bit (a
/// shared `/tmp` is sticky: others cannot remove or rename our files there).
fn check_private(dir: &Path) -> Result<(), LockError> {
    let meta = fs::metadata(dir).map_err(|source| LockError::Io { path: dir.to_owned(), source })?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Err(LockError::OpenDirectory { dir: dir.to_owned(), mode });
    }
    Ok(())
}

/// One lock file, flock'd and removed when dropped.
#[derive(Debug)]
struct LockFile {
    path: PathBuf,
    _file: Flock<File>,
}

enum Taken {
    Ours(LockFile),
    /// Another process holds it; what its file says.
    Held(String),
}

impl LockFile {
    /// Locks `path` (0600, its directory created if needed) and writes `holder` into it.
    fn take(path: &Path, holder: &str) -> Result<Taken, LockError> {
        let io = |source| LockError::Io { path: path.to_owned(), source };
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io)?;
        }
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                // Non-blocking: a FIFO put there must not hold the open.
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
                .open(path)
                .map_err(|e| match e.raw_os_error() {
                    Some(nix::libc::ELOOP) => LockError::Symlink { path: path.to_owned() },
                    _ => io(e),
                })?;
            if !file.metadata().map_err(io)?.is_file() {
                return Err(io(rpc_core::files::Refused::NotRegular.into()));
            }
            let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => locked,
                Err((file, nix::errno::Errno::EWOULDBLOCK)) => {
                    let mut said = Vec::new();
                    let _ = file.take(HOLDER_MAX as u64).read_to_end(&mut said);
                    return Ok(Taken::Held(String::from_utf8_lossy(&said).into_owned()));
                }
                Err((_, errno)) => return Err(io(errno.into())),
            };
            // The previous owner may have removed the file between our open
            // and our lock: then we hold a lock on a file nobody else can
            // find, and must take the one at the path instead.
            let ours = file.metadata().map_err(io)?;
            match fs::symlink_metadata(path) {
                Ok(there) if there.ino() == ours.ino() && there.dev() == ours.dev() => {}
                _ => continue,
            }
            file.set_len(0).map_err(io)?;
            file.rewind().map_err(io)?;
            writeln!(file, "{holder}").map_err(io)?;
            file.sync_all().map_err(io)?;
            return Ok(Taken::Ours(LockFile { path: path.to_owned(), _file: file }));
        }
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Removed while still locked, so no one can lock the old file and
        // believe it owns the task; and only if it is still ours: removed
        // under us (`git clean`, a user), the path may now name another
        // process's lock.
        let ours = self._file.metadata().ok();
        let there = fs::symlink_metadata(&self.path).ok();
        if let (Some(ours), Some(there)) = (ours, there)
            && ours.dev() == there.dev()
            && ours.ino() == there.ino()
        {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_task_name_is_refused_with_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, sockets) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("sockets"));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        let first = TaskLock::acquire(&a, &sockets, "t").unwrap();
        let err = TaskLock::acquire(&b, &sockets, "t").unwrap_err();
        assert!(matches!(err, LockError::Held { .. }), "{err}");
        assert!(err.to_string().contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(TaskLock::acquire(&b, &sockets, "other").is_ok());
        drop(first);
        assert!(!sockets.join("t.lock").exists() && !a.join(".ralph/lock").exists());
        let _again = TaskLock::acquire(&a, &sockets, "t").unwrap();
    }

    #[test]
    fn a_directory_is_locked_whatever_the_name_and_the_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let (task, sockets) = (dir.path().join("task"), dir.path().join("sockets"));
        fs::create_dir(&task).unwrap();
        std::os::unix::fs::symlink(&task, dir.path().join("alias")).unwrap();
        let _first = TaskLock::acquire(&task, &sockets, "one").unwrap();
        let err = TaskLock::acquire(&dir.path().join("alias"), &sockets, "two").unwrap_err();
        let LockError::Directory { running, .. } = &err else { panic!("{err}") };
        assert_eq!(running, &format!("as task \"one\" (pid {})", std::process::id()));
        // The name's lock was not taken by the refused one.
        assert!(!sockets.join("two.lock").exists());
    }

    #[test]
    fn a_symlink_at_either_lock_is_refused_and_its_target_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (task, sockets, victim) = (dir.path().join("task"), dir.path().join("sockets"), dir.path().join("victim"));
        fs::create_dir_all(task.join(".ralph")).unwrap();
        fs::create_dir(&sockets).unwrap();
        fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, task.join(".ralph/lock")).unwrap();
        let err = TaskLock::acquire(&task, &sockets, "t").unwrap_err();
        assert!(matches!(err, LockError::Symlink { .. }) && err.to_string().contains("symbolic link"), "{err}");
        fs::remove_file(task.join(".ralph/lock")).unwrap();
        std::os::unix::fs::symlink(&victim, sockets.join("t.lock")).unwrap();
        let err = TaskLock::acquire(&task, &sockets, "t").unwrap_err();
        assert!(matches!(err, LockError::Symlink { .. }), "{err}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn a_socket_directory_others_may_write_to_is_refused_unless_sticky() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (task, sockets) = (dir.path().join("task"), dir.path().join("sockets"));
        fs::create_dir(&task).unwrap();
        fs::create_dir(&sockets).unwrap();
        fs::set_permissions(&sockets, fs::Permissions::from_mode(0o777)).unwrap();
        let err = TaskLock::acquire(&task, &sockets, "t").unwrap_err();
        assert!(matches!(err, LockError::OpenDirectory { mode: 0o777, .. }), "{err}");
        assert!(!sockets.join("t.lock").exists());
        fs::set_permissions(&sockets, fs::Permissions::from_mode(0o1777)).unwrap();
        TaskLock::acquire(&task, &sockets, "t").unwrap();
    }

    #[test]
    fn the_directory_stays_locked_when_dot_ralph_is_removed_and_its_exit_spares_a_new_lock() {
        let dir = tempfile::tempdir().unwrap();
        let (task, sockets) = (dir.path().join("task"), dir.path().join("sockets"));
        fs::create_dir(&task).unwrap();
        let first = TaskLock::acquire(&task, &sockets, "one").unwrap();
        // `git clean -fdx` in the project.
        fs::remove_dir_all(task.join(".ralph")).unwrap();
        let err = TaskLock::acquire(&task, &sockets, "two").unwrap_err();
        assert!(matches!(err, LockError::Directory { .. }), "{err}");
        assert!(err.to_string().contains("is already running (its pid is not known"), "{err}");
        // Someone else's file at a lock's path since: the first's exit leaves it.
        fs::create_dir(task.join(".ralph")).unwrap();
        fs::write(task.join(".ralph/lock"), "another's").unwrap();
        fs::remove_file(sockets.join("one.lock")).unwrap();
        fs::write(sockets.join("one.lock"), "another's").unwrap();
        drop(first);
        assert_eq!(fs::read_to_string(task.join(".ralph/lock")).unwrap(), "another's");
        assert_eq!(fs::read_to_string(sockets.join("one.lock")).unwrap(), "another's");
    }
}
