//! Whether the agent's claim of completion holds while it still runs: every
//! story in `prd.json` passes. The agent may print the marker on every line
//! (a log it cats), so the file is read off the path that reads its
//! terminal, on a blocking thread, one read at a time, and only when the
//! file has changed since the last read: a flood of claims costs one read
//! per change of the file, and never slows the agent down.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::task::JoinHandle;

use crate::prd::Prd;

/// A file changed this soon before it was read may change again within the
/// same tick of the file system's clock, with the same size, and look the
/// same: its verdict is not kept (as git treats a "racily clean" file).
const RACY: Duration = Duration::from_millis(50);

/// What identifies one version of the file: a new file (a rename over it,
/// `sed -i`), a new size or a new modification time is a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// One check of the file: the version read, and whether every story passed.
#[derive(Clone, Copy, Debug)]
struct Verdict {
    /// `None`: not to be trusted for the next claim (unreadable, or racy).
    stamp: Option<Stamp>,
    confirmed: bool,
    /// The file was read (not the last verdict kept, the file unchanged).
    read: bool,
}

impl Verdict {
    /// `last`'s verdict if the file is as it was then, else a new read.
    fn check(task_dir: &Path, last: Option<Verdict>) -> Verdict {
        let stamp = std::fs::metadata(Prd::path(task_dir)).ok().map(|m| Stamp::of(&m));
        if let Some(last) = last
            && stamp.is_some()
            && last.stamp == stamp
        {
            return Verdict { read: false, ..last };
        }
        let started = SystemTime::now();
        let confirmed = Prd::load(task_dir).is_ok_and(|prd| prd.all_pass());
        let racy = stamp.is_none_or(|s| {
            let mtime = SystemTime::UNIX_EPOCH + Duration::new(s.mtime.0.max(0) as u64, s.mtime.1 as u32);
            mtime + RACY > started
        });
        Verdict { stamp: if racy { None } else { stamp }, confirmed, read: true }
    }
}

/// The claims of one run of the agent and the reads of `prd.json` they cause.
#[derive(Debug)]
pub struct ClaimCheck {
    task_dir: PathBuf,
    /// A claim came after the read under way began: one more read after it.
    wanted: bool,
    running: Option<JoinHandle<Verdict>>,
    last: Option<Verdict>,
    /// How many times the file was read, for the log.
    reads: u32,
}

impl ClaimCheck {
    pub fn new(task_dir: PathBuf) -> ClaimCheck {
        ClaimCheck { task_dir, wanted: false, running: None, last: None, reads: 0 }
    }

    /// The agent claimed completion: a check is started, or one more is
    /// wanted after the one under way.
    pub fn claimed(&mut self) {
        self.wanted = true;
        self.start();
    }

    /// The next check's verdict: whether every story passes. Pending while no
    /// check runs. Cancel-safe: its only wait is on the check's handle.
    pub async fn verdict(&mut self) -> bool {
        let Some(running) = &mut self.running else { return std::future::pending().await };
        let verdict = running.await.unwrap_or(Verdict { stamp: None, confirmed: false, read: false });
        self.running = None;
        self.reads += u32::from(verdict.read);
        self.last = Some(verdict);
        self.start();
        verdict.confirmed
    }

    pub fn reads(&self) -> u32 {
        self.reads
    }

    fn start(&mut self) {
        if self.running.is_some() || !self.wanted {
            return;
        }
        self.wanted = false;
        let (task_dir, last) = (self.task_dir.clone(), self.last);
        self.running = Some(tokio::task::spawn_blocking(move || Verdict::check(&task_dir, last)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(passes: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(Prd::path(dir.path()), format!(r#"{{"userStories":[{{"id":"A","passes":{passes}}}]}}"#))
            .unwrap();
        // Older than the racy window, as a file the agent wrote a while ago.
        let old = SystemTime::now() - Duration::from_secs(10);
        std::fs::File::options().write(true).open(Prd::path(dir.path())).unwrap().set_modified(old).unwrap();
        dir
    }

    #[tokio::test]
    async fn a_flood_of_claims_reads_an_unchanged_file_once() {
        let dir = task(false);
        let mut check = ClaimCheck::new(dir.path().to_owned());
        check.claimed();
        for _ in 0..1000 {
            check.claimed();
        }
        assert!(!check.verdict().await);
        // The claims during the read make one more check, of an unchanged file.
        assert!(!check.verdict().await);
        for _ in 0..1000 {
            check.claimed();
            assert!(!check.verdict().await);
        }
        assert_eq!(check.reads(), 1);
    }

    #[tokio::test]
    async fn a_change_of_the_file_is_read_at_the_next_claim() {
        let dir = task(false);
        let mut check = ClaimCheck::new(dir.path().to_owned());
        check.claimed();
        assert!(!check.verdict().await);
        // The agent marks its story (sed -i: a new file of another size).
        let passing = task(true);
        std::fs::rename(Prd::path(passing.path()), Prd::path(dir.path())).unwrap();
        check.claimed();
        assert!(check.verdict().await);
        assert_eq!(check.reads(), 2);
    }
}
