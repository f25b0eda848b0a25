//! Entry points of the `path_policy` and `legacy` fuzz targets, kept here so
//! that plain tests run them too.
//!
//! `path_policy`: a path argument as a client sends it, checked against a
//! directory tree full of symlinks that lead in, out, nowhere and in circles.
//! Beyond "no panic" it asserts that an allowed path lies under a root and
//! that the kernel, where the path exists, resolves it to the same place.
//!
//! `legacy`: a frame in the old `{command, parameters}` dialect; what the
//! adapter makes of it is a valid `tools/call` request with the frame's id.

use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use rpc_core::message::{self, Id, Message, Parsed};
use serde_json::value::RawValue;

use crate::methods::bridge::legacy;
use crate::paths::{AllowedRoots, PathPolicy, PathRefusal};

/// A directory tree under a canonical base:
///
/// ```text
/// root/            the project root
///   a.txt  sub/deeper/  in -> sub  back -> ../root/sub  self -> .
///   alias -> <base>/root/a.txt   leak -> <base>/outside/secret
///   door -> ../outside  up -> ..  dangling -> <base>/outside/not-yet
///   loop1 -> loop2  loop2 -> loop1  sub/top -> ../..
/// rootbad/x        a sibling whose name starts with the root's
/// outside/secret  outside/dir/
/// ws/              a workspace: w.txt  home -> ../root  out -> ../outside/dir
/// ```
#[derive(Debug)]
pub struct PathFixture {
    base: PathBuf,
}

impl PathFixture {
    /// Builds the tree in `dir`, an empty directory.
    pub fn create(dir: &Path) -> std::io::Result<PathFixture> {
        let base = std::fs::canonicalize(dir)?;
        for sub in ["root/sub/deeper", "rootbad", "outside/dir", "ws"] {
            std::fs::create_dir_all(base.join(sub))?;
        }
        for file in ["root/a.txt", "rootbad/x", "outside/secret", "ws/w.txt"] {
            std::fs::write(base.join(file), file)?;
        }
        let links: [(&str, PathBuf); 15] = [
            ("root/in", "sub".into()),
            ("root/back", "../root/sub".into()),
            ("root/self", ".".into()),
            ("root/alias", base.join("root/a.txt")),
            ("root/leak", base.join("outside/secret")),
            ("root/door", "../outside".into()),
            ("root/up", "..".into()),
            ("root/dangling", base.join("outside/not-yet")),
            ("root/loop1", "loop2".into()),
            ("root/loop2", "loop1".into()),
            ("root/sub/top", "../..".into()),
            ("root/sub/abs", base.join("root")),
            ("ws/home", "../root".into()),
            ("ws/out", "../outside/dir".into()),
            ("outside/dir/in", base.join("root/sub")),
        ];
        for (link, target) in links {
            symlink(target, base.join(link))?;
        }
        Ok(PathFixture { base })
    }
}

/// The first byte picks the policy: bit 0 a `hello` workspace (`ws/`, an
/// extra root; `root/sub/` with named roots), bit 1 SUPEX_ALLOWED_ROOTS
/// naming `rootbad/` as well. The rest
/// is the path; a leading `@` stands for the fixture's base directory, so
/// absolute paths into the tree can be written.
pub fn path_policy(fixture: &PathFixture, data: &[u8]) {
    let Some((&how, path)) = data.split_first() else { return };
    let Ok(path) = std::str::from_utf8(path) else { return };
    let base = &fixture.base;
    let given = match path.strip_prefix('@') {
        Some(rest) => format!("{}{rest}", base.display()),
        None => path.to_owned(),
    };
    let project = base.join("root");
    // With roots named, `hello` only takes a workspace inside them.
    let named_roots = how & 2 != 0;
    let workspace = (how & 1 != 0).then(|| base.join(if named_roots { "root/sub" } else { "ws" }));
    let extra = if named_roots { vec![base.join("rootbad")] } else { Vec::new() };
    let mut roots = extra.clone();
    roots.push(project.clone());
    roots.extend(workspace.clone());
    let policy = PathPolicy::new(AllowedRoots::Only(extra), project.clone());

    let under_a_root = |p: &Path| roots.iter().any(|root| p.starts_with(root));
    // Where the kernel says the path leads, when all of it exists.
    let kernel = std::fs::canonicalize(workspace.as_deref().unwrap_or(&project).join(&given)).ok();
    match policy.check(&given, workspace.as_deref()) {
        Ok(allowed) => {
            let resolved = allowed.resolved();
            assert!(under_a_root(resolved), "{given:?} allowed as {resolved:?}, outside {roots:?}");
            assert!(
                resolved.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
                "{given:?}: {resolved:?} is not a plain absolute path"
            );
            if let Some(kernel) = &kernel {
                assert_eq!(kernel, resolved, "{given:?}: the kernel resolves it elsewhere");
            }
            // The part that exists holds no symlink: a file made there lands where checked.
            let existing = resolved.ancestors().find(|p| p.symlink_metadata().is_ok()).unwrap_or(Path::new("/"));
            assert_eq!(std::fs::canonicalize(existing).ok().as_deref(), Some(existing), "{given:?}");
            let beneath = allowed.beneath();
            let rebuilt = roots.iter().find(|root| root.join(beneath) == resolved || **root == resolved);
            assert!(rebuilt.is_some(), "{given:?}: {beneath:?} under no root is {resolved:?}");
        }
        Err(PathRefusal::Denied { resolved: Some(resolved), .. }) => {
            assert!(!under_a_root(&resolved), "{given:?} denied, yet {resolved:?} is under a root");
            if let Some(kernel) = &kernel {
                assert_eq!(kernel, &resolved, "{given:?}: the kernel resolves it elsewhere");
            }
        }
        // Could not be resolved (a symlink loop, a permission): then neither can the kernel.
        Err(PathRefusal::Denied { resolved: None, .. }) => {
            if let Some(kernel) = &kernel {
                assert!(!under_a_root(kernel), "{given:?} refused, yet it exists at {kernel:?} under a root");
            }
        }
        // Empty or holding a NUL byte: not a path at all, whatever the kernel makes of it.
        Err(PathRefusal::Invalid(_)) => {}
    }
}

/// A frame the engine could not take as JSON-RPC, as the bridge hands it to
/// the legacy adapter: a rewrite is a `tools/call` request carrying the
/// frame's id or, without one (or with `null`), a notification of the
/// bridge's own method for id-less calls; `command` is the tool name and
/// `parameters` the arguments either way.
pub fn legacy(data: &[u8]) {
    #[derive(serde::Deserialize)]
    struct Frame<'a> {
        command: String,
        #[serde(default, borrow)]
        parameters: Option<&'a RawValue>,
        #[serde(default, borrow)]
        id: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        name: String,
        #[serde(borrow)]
        arguments: &'a RawValue,
    }
    let Some(rewritten) = legacy::adapt(data) else { return };
    let frame: Frame<'_> = serde_json::from_slice(data).expect("only a {command} frame is adapted");
    let parsed = message::parse(&rewritten, 1);
    let params = match frame.id.filter(|id| id.get() != "null").map(Id::from_raw) {
        None => {
            let Parsed::Single(Ok(Message::Notification { method, params })) = parsed else {
                panic!("{:?} is not a notification", String::from_utf8_lossy(&rewritten));
            };
            assert_eq!(method, legacy::unnumbered_method());
            params
        }
        // Not an id the engine takes (a string with a lone surrogate): the
        // request is refused as a JSON-RPC one with that id would be.
        Some(None) => {
            assert!(matches!(parsed, Parsed::Single(Err(_))), "{parsed:?}");
            return;
        }
        Some(Some(expected)) => {
            let Parsed::Single(Ok(Message::Request { id, method, params })) = parsed else {
                panic!("{:?} is not a request", String::from_utf8_lossy(&rewritten));
            };
            assert_eq!(method, "tools/call");
            assert_eq!(id, expected, "the id changed");
            params
        }
    };
    let params: Params<'_> = serde_json::from_str(params.expect("params").get()).expect("name and arguments");
    assert_eq!(params.name, frame.command);
    let arguments = frame.parameters.map(RawValue::get).filter(|p| *p != "null").unwrap_or("{}");
    assert_eq!(params.arguments.get(), arguments);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legacy_seeds_pass() {
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/legacy");
        let entries = std::fs::read_dir(&seeds).unwrap_or_else(|e| panic!("{}: {e}", seeds.display()));
        for entry in entries {
            legacy(&std::fs::read(entry.unwrap().path()).unwrap());
        }
    }

    /// The committed seeds (fuzz/seeds/path_policy/): a cheap stand-in for
    /// the fuzzer in every test run.
    #[test]
    fn the_seed_corpus_passes() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = PathFixture::create(dir.path()).unwrap();
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/path_policy");
        let entries = std::fs::read_dir(&seeds).unwrap_or_else(|e| panic!("{}: {e}", seeds.display()));
        for entry in entries {
            path_policy(&fixture, &std::fs::read(entry.unwrap().path()).unwrap());
        }
    }
}
