//! `progress.txt`: the task's log, where the loop appends one block per
//! event of its own (an iteration begun, a failure, how it ended), fsynced.
//! The agent writes there too; the loop only ever appends.
//! (The loop's state is `.ralph/state.json`, [`crate::state`]; injected
//! prompts have a file of their own, [`crate::injected`].)

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;

/// Appends one block to `progress.txt`, flushed and fsynced: the log
/// survives a crash right after the loop wrote it.
pub fn append(task_dir: &Path, block: &str) -> io::Result<()> {
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
    fn progress_blocks_are_appended() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("progress.txt"), "# log\n").unwrap();
        append(dir.path(), "## a").unwrap();
        append(dir.path(), "## b\n").unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("progress.txt")).unwrap(), "# log\n\n## a\n\n## b\n");
    }
}
