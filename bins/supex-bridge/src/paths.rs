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

    /// The directory part of [`AllowedPath::beneath`] and the final name, or
    /// `None` for the root itself (it names no file).
    pub fn parent_and_name(&self) -> Option<(&Path, &OsStr)> {
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
        let resolved = resolve(&joined).map_err(|e| match e.raw_os_error() {
            // Nothing could be named by it: a bad argument, not a denial.
            Some(nix::libc::ENAMETOOLONG) => PathRefusal::Invalid(format!("cannot resolve the path: {e}")),
            _ => PathRefusal::Denied { resolved: None, reason: format!("cannot resolve the path: {e}") },
        })?;
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
        match root {
            Some(root) => {
                let rest = resolved.strip_prefix(root).unwrap_or(Path::new(""));
                let beneath = if rest.as_os_str().is_empty() { PathBuf::from(".") } else { rest.to_owned() };
                Ok(AllowedPath { root: root.to_owned(), beneath, resolved })
            }
            None => Err(PathRefusal::Denied { resolved: Some(resolved), reason: "outside the allowed roots".into() }),
        }
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
    let mut resolved = PathBuf::from("/");
    // Components still to walk; a symlink's target is pushed in front of the rest.
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, path);
    // How many trailing components of `resolved` do not exist.
    let mut missing = 0usize;
    let mut links = 0usize;
    while let Some(part) = pending.pop_front() {
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
            Ok(_) => resolved = next,
            // Nothing there (or a file where a directory would be): nothing below
            // can exist either, so the rest is appended as it is.
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                resolved = next;
                missing = 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(resolved)
}

fn push_front(pending: &mut VecDeque<OsString>, path: &Path) {
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
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        /// Canonical temp directory holding `root/`, `rootbad/`, `outside/`.
        base: PathBuf,
        root: PathBuf,
        policy: PathPolicy,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for sub in ["root/sub", "rootbad", "outside"] {
            std::fs::create_dir_all(base.join(sub)).unwrap();
        }
        std::fs::write(base.join("root/a.txt"), "a").unwrap();
        std::fs::write(base.join("outside/secret"), "s").unwrap();
        let root = base.join("root");
        let policy = PathPolicy::new(AllowedRoots::Only(vec![]), root.clone());
        Fixture { _dir: dir, base, root, policy }
    }

    fn denied(result: Result<AllowedPath, PathRefusal>) -> Option<PathBuf> {
        match result {
            Err(PathRefusal::Denied { resolved, .. }) => resolved,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn relative_paths_resolve_against_the_project_root() {
        let f = fixture();
        assert_eq!(f.policy.check("a.txt", None).unwrap().resolved(), f.root.join("a.txt"));
        assert_eq!(f.policy.check("sub/new.txt", None).unwrap().resolved(), f.root.join("sub/new.txt"));
        assert_eq!(f.policy.check(".", None).unwrap().resolved(), f.root);
    }

    #[test]
    fn a_name_too_long_for_the_system_is_a_bad_argument_not_a_denial() {
        let f = fixture();
        let long = "n".repeat(300);
        match f.policy.check(&long, None) {
            Err(PathRefusal::Invalid(why)) => assert!(why.contains("too long"), "{why}"),
            other => panic!("expected an invalid path, got {other:?}"),
        }
    }

    #[test]
    fn absolute_paths_outside_are_denied_with_the_resolved_path() {
        let f = fixture();
        let outside = f.base.join("outside/secret");
        assert_eq!(denied(f.policy.check(outside.to_str().unwrap(), None)), Some(outside));
        assert!(denied(f.policy.check("/etc/passwd", None)).is_some());
    }

    #[test]
    fn dotdot_inside_a_root_is_fine_and_out_of_it_is_denied() {
        let f = fixture();
        assert_eq!(f.policy.check("sub/../a.txt", None).unwrap().resolved(), f.root.join("a.txt"));
        assert_eq!(f.policy.check("nonexistent/../a.txt", None).unwrap().resolved(), f.root.join("a.txt"));
        assert_eq!(denied(f.policy.check("../outside/secret", None)), Some(f.base.join("outside/secret")));
        assert!(denied(f.policy.check("sub/../../outside/new", None)).is_some());
        assert!(denied(f.policy.check("nothere/../../outside", None)).is_some());
    }

    #[test]
    fn a_sibling_with_the_root_as_prefix_is_not_inside() {
        let f = fixture();
        let bad = f.base.join("rootbad/x");
        assert_eq!(denied(f.policy.check(bad.to_str().unwrap(), None)), Some(bad));
        assert!(denied(f.policy.check("../rootbad", None)).is_some());
    }

    #[test]
    fn symlinked_files_are_judged_by_their_target() {
        let f = fixture();
        symlink(f.base.join("outside/secret"), f.root.join("leak")).unwrap();
        symlink(f.root.join("a.txt"), f.root.join("alias")).unwrap();
        assert_eq!(denied(f.policy.check("leak", None)), Some(f.base.join("outside/secret")));
        assert_eq!(f.policy.check("alias", None).unwrap().resolved(), f.root.join("a.txt"));
    }

    #[test]
    fn a_symlinked_parent_of_a_new_file_cannot_escape() {
        let f = fixture();
        symlink(f.base.join("outside"), f.root.join("door")).unwrap();
        assert_eq!(denied(f.policy.check("door/new.txt", None)), Some(f.base.join("outside/new.txt")));
        assert!(denied(f.policy.check("door/deeper/new.txt", None)).is_some());
    }

    #[test]
    fn dangling_symlinks_are_followed_to_where_a_write_would_land() {
        let f = fixture();
        symlink(f.base.join("outside/not-yet"), f.root.join("dangling")).unwrap();
        symlink(f.base.join("outside/no-dir"), f.root.join("dangling-dir")).unwrap();
        assert_eq!(denied(f.policy.check("dangling", None)), Some(f.base.join("outside/not-yet")));
        assert!(denied(f.policy.check("dangling-dir/file", None)).is_some());
        assert!(denied(f.policy.check("missing/../dangling", None)).is_some());
    }

    #[test]
    fn symlink_loops_are_denied_not_followed_forever() {
        let f = fixture();
        symlink(f.root.join("loop2"), f.root.join("loop1")).unwrap();
        symlink(f.root.join("loop1"), f.root.join("loop2")).unwrap();
        assert!(denied(f.policy.check("loop1/x", None)).is_none());
    }

    #[test]
    fn a_symlinked_root_works_once_canonicalised() {
        let f = fixture();
        let link = f.base.join("root-link");
        symlink(&f.root, &link).unwrap();
        // What config.rs does with a root given through a symlink (macOS /tmp).
        let policy = PathPolicy::new(AllowedRoots::Only(vec![]), std::fs::canonicalize(&link).unwrap());
        let through_link = link.join("a.txt");
        assert_eq!(policy.check(through_link.to_str().unwrap(), None).unwrap().resolved(), f.root.join("a.txt"));
        assert_eq!(policy.check("new.txt", None).unwrap().resolved(), f.root.join("new.txt"));
    }

    #[test]
    fn a_workspace_is_an_extra_root_and_the_base_of_relative_paths() {
        let f = fixture();
        let ws = f.base.join("outside");
        assert_eq!(f.policy.check("secret", Some(&ws)).unwrap().resolved(), ws.join("secret"));
        let in_root = f.root.join("a.txt");
        assert_eq!(f.policy.check(in_root.to_str().unwrap(), Some(&ws)).unwrap().resolved(), in_root);
        assert!(denied(f.policy.check("../rootbad", Some(&ws))).is_some());
    }

    #[test]
    fn the_root_itself_and_extra_roots_are_allowed() {
        let f = fixture();
        let policy = PathPolicy::new(AllowedRoots::Only(vec![f.base.join("rootbad")]), f.root.clone());
        assert_eq!(policy.check(f.root.to_str().unwrap(), None).unwrap().resolved(), f.root);
        assert!(policy.check("../rootbad/new", None).is_ok());
        assert!(denied(policy.check("../outside", None)).is_some());
        let anywhere = PathPolicy::new(AllowedRoots::Anywhere, f.root.clone());
        assert!(anywhere.check("/etc/passwd", None).is_ok());
    }

    #[test]
    fn an_allowed_path_carries_its_root_and_the_rest_of_the_way() {
        let f = fixture();
        let allowed = f.policy.check("sub/new.txt", None).unwrap();
        assert_eq!(allowed.beneath(), Path::new("sub/new.txt"));
        assert_eq!(allowed.parent_and_name(), Some((Path::new("sub"), OsStr::new("new.txt"))));
        let top = f.policy.check("a.txt", None).unwrap();
        assert_eq!(top.parent_and_name(), Some((Path::new("."), OsStr::new("a.txt"))));
        let root = f.policy.check(".", None).unwrap();
        assert_eq!((root.beneath(), root.parent_and_name()), (Path::new("."), None));
        let bytes = root.open_root().unwrap().read(top.beneath()).unwrap();
        assert_eq!(bytes, b"a");
        // Without a check, the root is `/`.
        let anywhere = PathPolicy::new(AllowedRoots::Anywhere, f.root.clone());
        let secret = f.base.join("outside/secret");
        let allowed = anywhere.check(secret.to_str().unwrap(), None).unwrap();
        assert_eq!(allowed.open_root().unwrap().read(allowed.beneath()).unwrap(), b"s");
    }

    #[test]
    fn a_workspace_is_a_root_only_when_no_roots_were_named() {
        let f = fixture();
        assert!(f.policy.workspace_is_a_root());
        let named = PathPolicy::new(AllowedRoots::Only(vec![f.base.join("rootbad")]), f.root.clone());
        assert!(!named.workspace_is_a_root());
        assert!(PathPolicy::new(AllowedRoots::Anywhere, f.root.clone()).workspace_is_a_root());
    }

    /// The race the handle closes, played out in order: the check passes on a
    /// real directory, then the directory becomes a symlink to the outside.
    #[test]
    fn a_symlink_swapped_in_after_the_check_is_refused_at_the_open() {
        let f = fixture();
        std::fs::write(f.root.join("sub/f"), "inside").unwrap();
        std::fs::write(f.base.join("outside/f"), "SECRET").unwrap();
        let allowed = f.policy.check("sub/f", None).unwrap();
        let root = allowed.open_root().unwrap();
        assert_eq!(root.read(allowed.beneath()).unwrap(), b"inside");
        std::fs::rename(f.root.join("sub"), f.base.join("moved")).unwrap();
        symlink(f.base.join("outside"), f.root.join("sub")).unwrap();
        let error = root.read(allowed.beneath()).unwrap_err();
        assert!(is_escape(&error), "{error:?}");
        let error = root.read_dir(Path::new("sub")).unwrap_err();
        assert!(is_escape(&error), "{error:?}");
        let error = root.create_dir_all(Path::new("sub/new/deeper")).unwrap_err();
        assert!(is_escape(&error), "{error:?}");
        assert!(!f.base.join("outside/new").exists());
        // A relative symlink that stays inside the root is followed as usual.
        std::fs::remove_file(f.root.join("sub")).unwrap();
        symlink("../moved", f.root.join("sub")).unwrap();
        assert!(is_escape(&root.read(allowed.beneath()).unwrap_err()), "../moved is outside the root");
        std::fs::rename(f.base.join("moved"), f.root.join("moved")).unwrap();
        std::fs::remove_file(f.root.join("sub")).unwrap();
        symlink("moved", f.root.join("sub")).unwrap();
        assert_eq!(root.read(allowed.beneath()).unwrap(), b"inside");
        assert!(!is_escape(&root.read("missing").unwrap_err()));
    }

    #[test]
    fn empty_and_nul_paths_are_invalid() {
        let f = fixture();
        assert!(matches!(f.policy.check("", None), Err(PathRefusal::Invalid(_))));
        assert!(matches!(f.policy.check("a\0b", None), Err(PathRefusal::Invalid(_))));
    }
}
