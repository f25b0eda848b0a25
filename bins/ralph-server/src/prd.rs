//! The task's `prd.json`: read-only for the loop (the agent edits it), typed
//! where the loop needs it and keeping every other field as it was.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Why `prd.json` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PrdError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a valid PRD: {detail}")]
    Invalid { path: PathBuf, detail: String },
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Prd {
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub branch_name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    pub user_stories: Vec<Story>,
    /// Fields this version does not know, kept as they were.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Story {
    pub id: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub acceptance_criteria: Vec<Value>,
    /// Lower runs first; a story without one runs after those with one.
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub passes: bool,
    #[serde(default)]
    pub notes: Option<String>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The most of `prd.json` that is read: four times the 2 MiB that `mcp`
/// serves, far beyond any plan of stories; past it the file is refused
/// like an invalid one.
pub const MAX_PRD: usize = 8 * 1024 * 1024;

impl Prd {
    pub fn path(task_dir: &Path) -> PathBuf {
        task_dir.join("prd.json")
    }

    pub fn load(task_dir: &Path) -> Result<Prd, PrdError> {
        let path = Prd::path(task_dir);
        // Only a regular file: the agent may leave a FIFO there, whose read
        // would hold the loop, and its signals, for good.
        let text = rpc_core::files::read_regular(&path, MAX_PRD)
            .map_err(|source| PrdError::Read { path: path.clone(), source })?;
        Prd::parse(&text).map_err(|detail| PrdError::Invalid { path, detail })
    }

    /// Reads the bytes of a `prd.json`. The agent writes that file, so
    /// anything may be in it; the error says what is wrong, without the path.
    pub fn parse(text: &[u8]) -> Result<Prd, String> {
        let mut de = serde_json::Deserializer::from_slice(text);
        let prd = serde_path_to_error(&mut de)?;
        if let Some(dup) = prd.duplicate_id() {
            return Err(format!("story id {dup:?} appears twice"));
        }
        // The id goes to the agent in RALPH_STORY_ID, and no environment
        // value can hold a NUL: such a story could never be started.
        if let Some((n, story)) = prd.user_stories.iter().enumerate().find(|(_, s)| s.id.contains('\0')) {
            let shown = story.id.replace('\0', "\\u0000");
            return Err(format!(
                "userStories[{n}]: story id \"{shown}\" holds a NUL byte, which cannot be passed to the agent \
                 (RALPH_STORY_ID); give the story an id without it"
            ));
        }
        Ok(prd)
    }

    /// The story to work on: not passing, lowest priority, first in the file on a tie.
    pub fn next_story(&self) -> Option<&Story> {
        self.user_stories.iter().filter(|s| !s.passes).min_by_key(|s| (s.priority.is_none(), s.priority))
    }

    pub fn all_pass(&self) -> bool {
        self.user_stories.iter().all(|s| s.passes)
    }

    fn duplicate_id(&self) -> Option<&str> {
        let mut seen = std::collections::HashSet::new();
        self.user_stories.iter().map(|s| s.id.as_str()).find(|id| !seen.insert(*id))
    }
}

/// serde_json's error with the path of the field that was wrong.
fn serde_path_to_error(de: &mut serde_json::Deserializer<serde_json::de::SliceRead<'_>>) -> Result<Prd, String> {
    let prd = Prd::deserialize(&mut *de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(prd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Prd, PrdError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("prd.json"), text).unwrap();
        Prd::load(dir.path())
    }

    #[test]
    fn unknown_fields_are_kept_and_the_lowest_priority_failing_story_is_next() {
        let prd = load(
            r#"{"project":"p","branchName":"b","team":"x","userStories":[
            {"id":"US-1","priority":2,"passes":false,"estimate":3,"acceptanceCriteria":["a",{"description":"b","passes":true}]},
            {"id":"US-2","priority":1,"passes":true},
            {"id":"US-3","priority":1,"passes":false}]}"#,
        )
        .unwrap();
        assert_eq!(prd.other["team"], "x");
        assert_eq!(prd.user_stories[0].other["estimate"], 3);
        assert_eq!(prd.next_story().unwrap().id, "US-3");
        let back = serde_json::to_value(&prd).unwrap();
        assert_eq!(back["team"], "x");
        assert_eq!(back["userStories"][0]["estimate"], 3);
    }

    #[test]
    fn bad_files_give_clear_errors() {
        let err = load("{not json").unwrap_err().to_string();
        assert!(err.contains("prd.json: not a valid PRD: key must be a string"), "{err}");
        let err = load(r#"{"project":"p"}"#).unwrap_err().to_string();
        assert!(err.contains("missing field `userStories`"), "{err}");
        let err = load(r#"{"userStories":[{"id":"A"},{"id":"A"}]}"#).unwrap_err().to_string();
        assert!(err.contains("appears twice"), "{err}");
        let err = load(r#"{"userStories":[{"id":"A"},{"id":"B\u00001"}]}"#).unwrap_err().to_string();
        assert!(err.contains(r#"userStories[1]: story id "B\u00001" holds a NUL byte"#), "{err}");
        let dir = tempfile::tempdir().unwrap();
        assert!(Prd::load(dir.path()).unwrap_err().to_string().contains("cannot read"));
    }

    #[test]
    fn a_fifo_or_a_file_past_the_limit_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = Prd::path(dir.path());
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = Prd::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("prd.json: cannot read: not a regular file"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let big = format!(r#"{{"userStories": [], "pad": "{}"}}"#, "x".repeat(MAX_PRD));
        std::fs::write(&path, big).unwrap();
        let err = Prd::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("prd.json: cannot read: larger than {MAX_PRD} bytes")), "{err}");
    }

    #[test]
    fn no_failing_story_means_done() {
        let prd = load(r#"{"userStories":[{"id":"A","passes":true}]}"#).unwrap();
        assert!(prd.next_story().is_none() && prd.all_pass());
    }
}
