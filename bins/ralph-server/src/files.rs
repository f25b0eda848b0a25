//! The loop's own files in the task directory: `.ralph/state.json`, written
//! atomically, and the blocks it appends to `progress.txt`, fsynced.
//! (Injected prompts have a file of their own: [`crate::injected`].)

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::session::Status;

/// What `.ralph/state.json` holds: enough to resume.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct SavedState {
    pub iteration: u32,
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub current_story: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
    /// Instructions injected but not yet given to the agent, as versions
    /// before `.ralph/injected.jsonl` kept them: read, never written.
    #[serde(default, skip_serializing)]
    pub pending_prompt: Option<String>,
    #[serde(default)]
    pub consecutive_failures: u32,
}

impl SavedState {
    pub fn path(task_dir: &Path) -> PathBuf {
        task_dir.join(".ralph/state.json")
    }

    /// The saved state, `None` when there is none; an unreadable one is an error.
    pub fn load(task_dir: &Path) -> io::Result<Option<SavedState>> {
        let path = SavedState::path(task_dir);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }

    /// Whether a new `run` continues this one: after a checkpoint, or after a
    /// run that never reached a final status (it crashed or was killed).
    pub fn resumable(&self) -> bool {
        matches!(self.status, Some(Status::Checkpointed | Status::Starting | Status::Running | Status::Stopping))
    }

    /// Writes a temporary file beside it, syncs it, renames it over the old
    /// one and syncs the directory: a crash leaves the old state or the new.
    pub fn save(&self, task_dir: &Path) -> io::Result<()> {
        let path = SavedState::path(task_dir);
        let dir = path.parent().unwrap_or(task_dir);
        fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".state.json.{}.tmp", std::process::id()));
        let json = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        let mut file = File::create(&tmp)?;
        file.write_all(&json)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    }
}

/// Appends one block to `progress.txt`, flushed and fsynced: the log
/// survives a crash right after the loop wrote it.
pub fn append_progress(task_dir: &Path, block: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().create(true).append(true).open(task_dir.join("progress.txt"))?;
    let mut text = String::with_capacity(block.len() + 2);
    text.push('\n');
    text.push_str(block.trim_end());
    text.push('\n');
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_says_when_to_resume() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(SavedState::load(dir.path()).unwrap(), None);
        let state = SavedState { iteration: 3, status: Some(Status::Checkpointed), ..Default::default() };
        state.save(dir.path()).unwrap();
        let back = SavedState::load(dir.path()).unwrap().unwrap();
        assert_eq!(back, state);
        assert!(back.resumable());
        assert!(!SavedState { status: Some(Status::Completed), ..Default::default() }.resumable());
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(dir.path().join(".ralph")).unwrap().count(), 1);
    }

    #[test]
    fn progress_blocks_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("progress.txt"), "# log\n").unwrap();
        append_progress(dir.path(), "## a").unwrap();
        append_progress(dir.path(), "## b\n").unwrap();
        assert_eq!(fs::read_to_string(dir.path().join("progress.txt")).unwrap(), "# log\n\n## a\n\n## b\n");
    }
}
