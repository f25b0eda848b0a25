//! The task lock: `<socket dir>/<task>.lock`, flock'd for as long as the loop
//! runs and holding its pid, so a second `run` of the same task is refused
//! with a message naming the first. The kernel drops the lock when the
//! process dies, however it dies; the file is removed on a normal exit.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("task {task:?} is already running (pid {pid}); its lock is {path}")]
    Held { task: String, pid: String, path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

#[derive(Debug)]
pub struct TaskLock {
    path: PathBuf,
    _file: Flock<File>,
}

impl TaskLock {
    pub fn acquire(dir: &Path, task: &str) -> Result<TaskLock, LockError> {
        let path = dir.join(format!("{task}.lock"));
        let io = |source| LockError::Io { path: path.clone(), source };
        if !dir.exists() {
            fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
        }
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(io)?;
            let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => locked,
                Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                    let mut pid = String::new();
                    let _ = file.read_to_string(&mut pid);
                    let pid = if pid.trim().is_empty() { "unknown".to_owned() } else { pid.trim().to_owned() };
                    return Err(LockError::Held { task: task.to_owned(), pid, path });
                }
                Err((_, errno)) => return Err(io(errno.into())),
            };
            // The previous owner may have removed the file between our open
            // and our lock: then we hold a lock on a file nobody else can
            // find, and must take the one at the path instead.
            let ours = file.metadata().map_err(io)?;
            match fs::metadata(&path) {
                Ok(there) if there.ino() == ours.ino() && there.dev() == ours.dev() => {}
                _ => continue,
            }
            file.set_len(0).map_err(io)?;
            file.rewind().map_err(io)?;
            writeln!(file, "{}", std::process::id()).map_err(io)?;
            file.sync_all().map_err(io)?;
            return Ok(TaskLock { path, _file: file });
        }
    }
}

impl Drop for TaskLock {
    fn drop(&mut self) {
        // Removed while still locked, so no one can lock the old file and
        // believe it owns the task.
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_task_is_refused_with_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = TaskLock::acquire(dir.path(), "t").unwrap();
        let err = TaskLock::acquire(dir.path(), "t").unwrap_err().to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(TaskLock::acquire(dir.path(), "other").is_ok());
        drop(first);
        assert!(!dir.path().join("t.lock").exists());
        let _again = TaskLock::acquire(dir.path(), "t").unwrap();
    }
}
