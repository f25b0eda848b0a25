//! `files/list {path?}`: one directory on the host, for a UI's file picker
//! (the editor page browses the host's files, not the browser's), within
//! the directories the config file allows (`[ui] file_roots`, by default
//! the home directory). Symbolic links are followed before the check, so
//! none leads out of them.

use std::path::{Path, PathBuf};

use rpc_core::{Ctx, RpcError};
use serde::{Deserialize, Serialize};

use crate::errors;
use crate::state::ControlSession;

/// Most entries one listing returns: a picker shows a person a directory.
const MOST_ENTRIES: usize = 5000;

#[derive(Deserialize)]
pub struct ListParams {
    /// The directory (or a file in it) [default: the first allowed root].
    path: Option<PathBuf>,
}

#[derive(Serialize)]
pub struct Entry {
    name: String,
    dir: bool,
}

#[derive(Serialize)]
pub struct Listing {
    path: String,
    /// The directory above, when it is still within the roots.
    parent: Option<String>,
    entries: Vec<Entry>,
    /// Whether entries past [`MOST_ENTRIES`] were left out.
    truncated: bool,
    roots: Vec<String>,
}

pub async fn list(ctx: Ctx<ControlSession>, params: ListParams) -> Result<Listing, RpcError> {
    let settings = ctx.state.host.settings();
    let roots = browsable_roots(&settings.ui.file_roots, settings.base_dir.as_deref());
    tokio::task::spawn_blocking(move || list_within(&roots, params.path))
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?
}

/// `[ui] file_roots` as real directories (`~/` the home directory, a
/// relative path from the config file's directory; none given: the home
/// directory); those that do not exist are left out.
fn browsable_roots(file_roots: &[PathBuf], base: Option<&Path>) -> Vec<PathBuf> {
    let home = dirs::home_dir();
    let roots: Vec<PathBuf> = if file_roots.is_empty() {
        home.into_iter().collect()
    } else {
        file_roots
            .iter()
            .filter_map(|root| match (root.strip_prefix("~"), &home) {
                (Ok(rest), Some(home)) => Some(home.join(rest)),
                (Ok(_), None) => None,
                (Err(_), _) => Some(base.map_or_else(|| root.clone(), |base| base.join(root))),
            })
            .collect()
    };
    roots.iter().filter_map(|r| r.canonicalize().ok()).collect()
}

fn list_within(roots: &[PathBuf], path: Option<PathBuf>) -> Result<Listing, RpcError> {
    let first = roots.first().ok_or_else(|| RpcError::new(errors::INVALID_PATH, "no directory may be browsed"))?;
    let asked = path.unwrap_or_else(|| first.clone());
    let mut dir =
        asked.canonicalize().map_err(|e| RpcError::new(errors::PATH_NOT_FOUND, format!("{}: {e}", asked.display())))?;
    if !dir.is_dir() {
        dir = dir.parent().map(Path::to_owned).unwrap_or(dir);
    }
    let within = |p: &Path| roots.iter().any(|root| p.starts_with(root));
    if !within(&dir) {
        return Err(RpcError::new(
            errors::INVALID_PATH,
            format!("{} is outside the directories a UI may browse ([ui] file_roots)", dir.display()),
        ));
    }
    let read = std::fs::read_dir(&dir)
        .map_err(|e| RpcError::new(errors::PATH_NOT_FOUND, format!("{}: {e}", dir.display())))?;
    let mut entries: Vec<Entry> = read
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let dir = std::fs::metadata(entry.path()).ok()?.is_dir();
            (!name.starts_with('.')).then_some(Entry { name, dir })
        })
        .take(MOST_ENTRIES + 1)
        .collect();
    let truncated = entries.len() > MOST_ENTRIES;
    entries.truncate(MOST_ENTRIES);
    entries.sort_by(|a, b| b.dir.cmp(&a.dir).then_with(|| a.name.cmp(&b.name)));
    let parent = dir.parent().filter(|p| within(p)).map(|p| p.display().to_string());
    Ok(Listing {
        path: dir.display().to_string(),
        parent,
        entries,
        truncated,
        roots: roots.iter().map(|r| r.display().to_string()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_stay_within_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("a.hl7"), "MSH|^~\\&").unwrap();
        std::os::unix::fs::symlink("/", root.join("out")).unwrap();
        let roots = [root.clone()];
        let listing = list_within(&roots, None).unwrap();
        let names: Vec<(&str, bool)> = listing.entries.iter().map(|e| (e.name.as_str(), e.dir)).collect();
        assert_eq!(names, [("out", true), ("sub", true), ("a.hl7", false)]);
        assert!(listing.parent.is_none());
        assert_eq!(
            list_within(&roots, Some(root.join("sub"))).unwrap().parent.as_deref(),
            Some(&*root.display().to_string())
        );
        assert_eq!(list_within(&roots, Some(root.join("a.hl7"))).unwrap().path, root.display().to_string());
        assert_eq!(list_within(&roots, Some(root.join("out"))).err().unwrap().code, errors::INVALID_PATH);
        assert_eq!(list_within(&roots, Some(root.join("sub/.."))).unwrap().path, root.display().to_string());
    }
}
