//! The path policy's rules, each on real files and symlinks in a temporary directory.

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

#[test]
fn a_path_ending_in_a_slash_names_a_directory_as_realpath_reads_it() {
    let f = fixture();
    for through_a_file in ["a.txt/", "a.txt/.", "a.txt/..", "a.txt/b", "a.txt/../a.txt"] {
        match f.policy.check(through_a_file, None) {
            Err(PathRefusal::Invalid(why)) => assert!(why.contains("not a directory"), "{through_a_file}: {why}"),
            other => panic!("{through_a_file}: {other:?}"),
        }
    }
    // Outside the roots it is a denial like any other: no sign of what exists there.
    assert!(denied(f.policy.check("../outside/secret/", None)).is_some());
    let new_dir = f.policy.check("newdir/", None).unwrap();
    assert!(new_dir.names_a_directory() && new_dir.parent_and_name().is_none());
    assert_eq!(new_dir.resolved(), f.root.join("newdir"));
    assert!(f.policy.check("sub/", None).unwrap().names_a_directory());
    assert!(!f.policy.check("a.txt", None).unwrap().names_a_directory());
    std::os::unix::fs::symlink(f.root.join("a.txt"), f.root.join("alias")).unwrap();
    assert!(matches!(f.policy.check("alias/", None), Err(PathRefusal::Invalid(_))));
}
