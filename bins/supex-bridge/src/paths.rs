//! The path policy: which files the file-taking tools (`read_file`,
//! `write_file`, `list_dir`, `eval_ruby_file`) may touch.
//!
//! A path is allowed when, with every symlink resolved, it is one of the allowed
//! roots or lies under one. It is a guardrail for tool arguments, not a sandbox:
//! the Ruby code the same clients may evaluate can open any file it likes.
//!
//! The spec's six steps, and where they happen:
//! 1. relative paths join the connection's workspace or the project root: [`PathPolicy::check`];
//! 2. roots are canonical from the start: [`PathPolicy::new`] and `config.rs`;
//! 3. and 4. existing components are resolved through their symlinks, and a
//!    path that does not exist yet through its nearest existing ancestor: [`resolve`];
//! 5. containment compares whole components, so `/rootbad` is not under `/root`;
//! 6. `..` is applied to the resolved path, so it may wander inside a root but
//!    not out of it.
//!
//! The check alone would leave a race: between it and the open, a local
//! process could swap a directory on the way for a symlink to the outside.
//! So the tools never open the checked path by name: [`AllowedPath`] carries
//! the root it lies under, and they open it through a handle on that root
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` (cap-std, which
//! walks the components with `O_NOFOLLOW` on kernels without `openat2`). The
//! kernel then refuses whatever leads out of the root at the moment of the open.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::Dir;

/// Where file tools may go.
#[derive(Clone, Debug)]
pub enum AllowedRoots {
    /// `SUPEX_ALLOWED_ROOTS='*'`: no check at all.
    Anywhere,
    /// These canonical directories (the project root is always added).
    Only(Vec<PathBuf>),
}

#[derive(Clone, Debug)]
pub struct PathPolicy {
    roots: AllowedRoots,
    project_root: PathBuf,
    /// SUPEX_ALLOWED_ROOTS named directories: a `hello` workspace must then
    /// lie inside them instead of becoming a root of its own.
    explicit_roots: bool,
}

/// A path the policy allowed, with the root it lies under. Open it only
/// through [`AllowedPath::open_root`] and [`AllowedPath::beneath`]: opening
/// [`AllowedPath::resolved`] by name would follow whatever symlink a local
/// process put on the way since the check.
#[derive(Clone, Debug, PartialEq)]
pub struct AllowedPath {
    resolved: PathBuf,
    root: PathBuf,
    beneath: PathBuf,
    /// It ends in `/` (or `/.`, `/..`): it can only name a directory.
    names_a_directory: bool,
}

impl AllowedPath {
    /// What the path named when it was checked (symlinks resolved).
    pub fn resolved(&self) -> &Path {
        &self.resolved
    }

    /// The path relative to its root (`.` for the root itself).
    pub fn beneath(&self) -> &Path {
        &self.beneath
    }

    /// Whether it ends in `/` (or `/.`, `/..`), so that it names a directory
    /// or nothing, as the kernel reads it: `newdir/` is never a file.
    pub fn names_a_directory(&self) -> bool {
        self.names_a_directory
    }

    /// The directory part of [`AllowedPath::beneath`] and the final name, or
    /// `None` for the root itself or a path that names a directory (neither
    /// names a file).
    pub fn parent_and_name(&self) -> Option<(&Path, &OsStr)> {
        if self.names_a_directory {
            return None;
        }
        let name = self.beneath.file_name()?;
        let parent = self.beneath.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        Some((parent, name))
    }

    /// A handle on the root: everything opened through it stays beneath it.
    pub fn open_root(&self) -> io::Result<Dir> {
        Dir::open_ambient_dir(&self.root, cap_std::ambient_authority())
    }
}

/// Whether an error from opening beneath a root means the path led out of it
/// (a symlink swapped in after the check): cap-std's own error, or the
/// kernel's `EXDEV` from `openat2(RESOLVE_BENEATH)`.
pub fn is_escape(error: &io::Error) -> bool {
    error.raw_os_error() == Some(nix::libc::EXDEV)
        || (error.kind() == io::ErrorKind::PermissionDenied
            && error.get_ref().is_some_and(|inner| inner.to_string().contains("outside of the filesystem")))
}

/// Why a path argument was refused.
#[derive(Debug, PartialEq)]
pub enum PathRefusal {
    /// Outside every allowed root (-32002). `resolved` is what the path really names.
    Denied { resolved: Option<PathBuf>, reason: String },
    /// Not a usable path at all (empty, NUL byte): -32602.
    Invalid(String),
}

/// Symlinks followed while resolving one path before giving up (Linux's own limit).
const MAX_SYMLINKS: usize = 40;

impl PathPolicy {
    /// `project_root` and the roots must already be canonical.
    pub fn new(roots: AllowedRoots, project_root: PathBuf) -> Self {
        let explicit_roots = matches!(&roots, AllowedRoots::Only(list) if !list.is_empty());
        let roots = match roots {
            AllowedRoots::Anywhere => AllowedRoots::Anywhere,
            AllowedRoots::Only(mut list) => {
                if !list.contains(&project_root) {
                    list.push(project_root.clone());
                }
                AllowedRoots::Only(list)
            }
        };
        PathPolicy { roots, project_root, explicit_roots }
    }

    pub fn project_root(&self) -> &Path {
        &self.project_root
    }

    /// The canonical roots, for logs and `runtime_info`; `None` means anywhere.
    pub fn roots(&self) -> Option<&[PathBuf]> {
        match &self.roots {
            AllowedRoots::Anywhere => None,
            AllowedRoots::Only(list) => Some(list),
        }
    }

    /// Whether a `hello` workspace becomes a root of its own for the
    /// connection: only when no roots were named. With SUPEX_ALLOWED_ROOTS
    /// set, a client must not widen them by naming `/etc` as its workspace;
    /// one inside them is only the base of relative paths.
    pub fn workspace_is_a_root(&self) -> bool {
        !self.explicit_roots
    }

    /// Resolves `given` (relative to `workspace`, else the project root) and
    /// checks it against the roots plus `workspace`. Blocking: call it off the
    /// async threads.
    pub fn check(&self, given: &str, workspace: Option<&Path>) -> Result<AllowedPath, PathRefusal> {
        if given.is_empty() {
            return Err(PathRefusal::Invalid("the path is empty".into()));
        }
        if given.contains('\0') {
            return Err(PathRefusal::Invalid("the path contains a NUL byte".into()));
        }
        let base = workspace.unwrap_or(&self.project_root);
        let joined = base.join(given);
        let Resolution { path: resolved, through_a_file } =
            resolve_all(&joined).map_err(|e| match e.raw_os_error() {
                // Nothing could be named by it: a bad argument, not a denial.
                Some(nix::libc::ENAMETOOLONG) => PathRefusal::Invalid(format!("cannot resolve the path: {e}")),
                _ => PathRefusal::Denied { resolved: None, reason: format!("cannot resolve the path: {e}") },
            })?;
        let names_a_directory =
            given.ends_with('/') || given.ends_with("/.") || given.ends_with("/..") || given == "." || given == "..";
        let root = match &self.roots {
            AllowedRoots::Anywhere => Some(Path::new("/")),
            // The widest root that holds the path: a symlink swapped in later
            // may still point anywhere inside it.
            AllowedRoots::Only(roots) => roots
                .iter()
                .map(PathBuf::as_path)
                .chain(workspace)
                .filter(|root| resolved.starts_with(root))
                .min_by_key(|root| root.as_os_str().len()),
        };
        let Some(root) = root else {
            return Err(PathRefusal::Denied { resolved: Some(resolved), reason: "outside the allowed roots".into() });
        };
        // Only once the path is known to be inside: outside, the difference
        // would tell a client which files exist there.
        if let Some(file) = through_a_file {
            let error = io::Error::from_raw_os_error(nix::libc::ENOTDIR);
            return Err(PathRefusal::Invalid(format!(
                "cannot resolve the path: {} is not a directory ({error})",
                file.display()
            )));
        }
        let rest = resolved.strip_prefix(root).unwrap_or(Path::new(""));
        let beneath = if rest.as_os_str().is_empty() { PathBuf::from(".") } else { rest.to_owned() };
        Ok(AllowedPath { root: root.to_owned(), beneath, resolved, names_a_directory })
    }
}

/// What `path` names once every symlink along it is resolved, like
/// `realpath(3)`, except that the path need not exist: components past the last
/// existing directory are appended as they are (they cannot be symlinks, since
/// nothing is there). A dangling symlink is followed to where it points, so
/// creating a file through it cannot land outside the check. `..` applies to
/// the resolved directory, as the kernel does it.
///
/// `path` must be absolute.
pub fn resolve(path: &Path) -> io::Result<PathBuf> {
    resolve_all(path).map(|resolution| resolution.path)
}

/// What [`resolve`] found.
struct Resolution {
    path: PathBuf,
    /// Something that is not a directory was walked through as one
    /// (`a.txt/`, `a.txt/.`, `a.txt/..`, `a.txt/b`), which `realpath` refuses
    /// with `ENOTDIR`: the first such.
    through_a_file: Option<PathBuf>,
}

fn resolve_all(path: &Path) -> io::Result<Resolution> {
    let mut resolved = PathBuf::from("/");
    let mut through_a_file = None;
    // The last component walked exists and is not a directory.
    let mut at_a_file = false;
    // Components still to walk; a symlink's target is pushed in front of the rest.
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, path);
    // How many trailing components of `resolved` do not exist.
    let mut missing = 0usize;
    let mut links = 0usize;
    while let Some(part) = pending.pop_front() {
        if std::mem::take(&mut at_a_file) && part != "/" {
            through_a_file.get_or_insert_with(|| resolved.clone());
        }
        match part.to_str() {
            Some("/") => {
                resolved = PathBuf::from("/");
                missing = 0;
                continue;
            }
            Some(".") => continue,
            Some("..") => {
                resolved.pop();
                missing = missing.saturating_sub(1);
                continue;
            }
            _ => {}
        }
        let next = resolved.join(&part);
        if missing > 0 {
            resolved = next;
            missing += 1;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(io::Error::other("too many levels of symbolic links"));
                }
                let target = std::fs::read_link(&next)?;
                // A relative target is relative to the link's directory, which
                // `resolved` already is; an absolute one starts again at `/`.
                push_front(&mut pending, &target);
            }
            Ok(meta) => {
                at_a_file = !meta.is_dir();
                resolved = next;
            }
            // Nothing there (or a file where a directory would be): nothing below
            // can exist either, so the rest is appended as it is.
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                resolved = next;
                missing = 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Resolution { path: resolved, through_a_file })
}

fn push_front(pending: &mut VecDeque<OsString>, path: &Path) {
    // `components()` drops a trailing `/` and `/.`, which make the kernel
    // require a directory: kept as a `.` of their own.
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.len() > 1 && (bytes.ends_with(b"/") || bytes.ends_with(b"/.")) {
        pending.push_front(OsString::from("."));
    }
    for component in path.components().rev() {
        let part = match component {
            Component::RootDir => OsString::from("/"),
            Component::CurDir => continue,
            Component::ParentDir => OsString::from(".."),
            Component::Normal(name) => name.to_owned(),
            Component::Prefix(_) => continue,
        };
        pending.push_front(part);
    }
}

#[cfg(test)]
mod tests;
