//! File tools and the path policy over the wire.

use std::os::unix::fs::{PermissionsExt, symlink};

use serde_json::json;

use crate::support::{Bridge, error, ok, tool};

#[test]
fn write_read_append_and_list_round_trip() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let written =
        ok(&mut client, "write_file", json!({"path": "notes/a.txt", "content": "héllo\n", "create_dirs": true}));
    let target = bridge.root.join("notes/a.txt");
    assert_eq!(written, json!({"success": true, "path": target.to_str().unwrap(), "bytes_written": 7}));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "héllo\n");
    ok(&mut client, "write_file", json!({"path": "notes/a.txt", "content": "more\n", "append": true}));
    let read = ok(&mut client, "read_file", json!({"path": "notes/a.txt"}));
    assert_eq!(read["content"], "héllo\nmore\n");
    assert_eq!(read["encoding"], "utf-8");
    assert_eq!(read["size"], 12);
    assert_eq!(read["path"], target.to_str().unwrap());
    let part = ok(&mut client, "read_file", json!({"path": "notes/a.txt", "offset": 7, "length": 4}));
    assert_eq!(part["content"], "more");
    assert_eq!(part["size"], 12);

    // Binary content goes both ways as base64.
    ok(&mut client, "write_file", json!({"path": "notes/bin", "content": "AP8Q", "encoding": "base64"}));
    assert_eq!(std::fs::read(bridge.root.join("notes/bin")).unwrap(), [0x00, 0xff, 0x10]);
    let read = ok(&mut client, "read_file", json!({"path": "notes/bin"}));
    assert_eq!((read["content"].as_str(), read["encoding"].as_str()), (Some("AP8Q"), Some("base64")));

    std::fs::create_dir(bridge.root.join("notes/sub")).unwrap();
    symlink("a.txt", bridge.root.join("notes/link")).unwrap();
    let listing = ok(&mut client, "list_dir", json!({"path": "notes"}));
    assert_eq!(
        listing["entries"],
        json!([
            {"name": "a.txt", "type": "file", "size": 12},
            {"name": "bin", "type": "file", "size": 3},
            {"name": "link", "type": "symlink", "size": 5},
            {"name": "sub", "type": "dir", "size": listing["entries"][3]["size"]},
        ])
    );
}

#[test]
fn writes_are_atomic_keep_permissions_and_need_create_dirs_for_new_directories() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let target = bridge.root.join("config.txt");
    std::fs::write(&target, "old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    let inode_before = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&target).unwrap());
    ok(&mut client, "write_file", json!({"path": "config.txt", "content": "new"}));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    let meta = std::fs::metadata(&target).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert_ne!(std::os::unix::fs::MetadataExt::ino(&meta), inode_before, "replaced by rename, not rewritten in place");
    let leftovers: Vec<_> = std::fs::read_dir(&bridge.root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".supex-write-"))
        .collect();
    assert!(leftovers.is_empty());

    let reply = tool(&mut client, "write_file", json!({"path": "new/dir/file", "content": "x"}));
    assert_eq!(error(&reply)["code"], -32602);
    assert!(error(&reply)["message"].as_str().unwrap().contains("create_dirs"));
    assert!(!bridge.root.join("new").exists());
    let reply = tool(&mut client, "write_file", json!({"path": ".", "content": "x"}));
    assert_eq!(error(&reply)["code"], -32602);
    let reply = tool(&mut client, "write_file", json!({"path": "b64", "content": "%%%", "encoding": "base64"}));
    assert_eq!(error(&reply)["code"], -32602);
    let reply = tool(&mut client, "read_file", json!({"path": "missing.txt"}));
    assert_eq!(error(&reply)["code"], -32602);
    let reply = tool(&mut client, "read_file", json!({"path": "."}));
    assert!(error(&reply)["message"].as_str().unwrap().contains("list_dir"));
}

#[test]
fn paths_outside_the_roots_are_denied_with_minus_32002() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let base = bridge.base().to_owned();
    std::fs::write(base.join("secret.txt"), "secret").unwrap();
    std::fs::create_dir(base.join("projectbad")).unwrap();
    std::fs::write(base.join("projectbad/x"), "x").unwrap();
    std::fs::create_dir(base.join("elsewhere")).unwrap();

    let denied = |client: &mut integration_tests::LineClient, name: &str, args: serde_json::Value| {
        let reply = tool(client, name, args.clone());
        let err = error(&reply).clone();
        assert_eq!(err["code"], -32002, "{name} {args}: {reply}");
        assert_eq!(err["message"], "Path access denied");
        assert_eq!(err["data"]["path"], args["path"].as_str().or(args["file_path"].as_str()).unwrap());
        err["data"]["resolved"].as_str().map(str::to_owned)
    };
    // An absolute path outside.
    let secret = base.join("secret.txt");
    assert_eq!(denied(&mut client, "read_file", json!({"path": secret})), Some(secret.display().to_string()));
    assert!(denied(&mut client, "read_file", json!({"path": "/etc/passwd"})).is_some());
    // `..` that leaves the root; `..` that stays inside is fine.
    assert_eq!(denied(&mut client, "read_file", json!({"path": "../secret.txt"})), Some(secret.display().to_string()));
    std::fs::create_dir(bridge.root.join("sub")).unwrap();
    std::fs::write(bridge.root.join("inside.txt"), "in").unwrap();
    assert_eq!(ok(&mut client, "read_file", json!({"path": "sub/../inside.txt"}))["content"], "in");
    // A sibling whose name starts with the root's.
    let sibling = base.join("projectbad/x");
    assert_eq!(denied(&mut client, "read_file", json!({"path": sibling})), Some(sibling.display().to_string()));
    assert!(denied(&mut client, "list_dir", json!({"path": "../projectbad"})).is_some());
    // A symlinked file pointing outside is judged by its target.
    symlink(&secret, bridge.root.join("innocent.txt")).unwrap();
    assert_eq!(denied(&mut client, "read_file", json!({"path": "innocent.txt"})), Some(secret.display().to_string()));
    // A symlinked parent of a file that does not exist yet cannot escape.
    symlink(base.join("elsewhere"), bridge.root.join("door")).unwrap();
    assert_eq!(
        denied(&mut client, "write_file", json!({"path": "door/planted.txt", "content": "x"})),
        Some(base.join("elsewhere/planted.txt").display().to_string())
    );
    assert!(
        denied(&mut client, "write_file", json!({"path": "door/a/b.txt", "content": "x", "create_dirs": true}))
            .is_some()
    );
    assert!(!base.join("elsewhere/planted.txt").exists() && !base.join("elsewhere/a").exists());
    // A dangling symlink cannot be used to create a file outside either.
    symlink(base.join("elsewhere/new.txt"), bridge.root.join("dangling")).unwrap();
    assert!(denied(&mut client, "write_file", json!({"path": "dangling", "content": "x", "append": true})).is_some());
    assert!(!base.join("elsewhere/new.txt").exists());
}

#[test]
fn a_symlinked_project_root_and_extra_roots_work() {
    if !integration_tests::require_tool("ruby") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(base.join("real/project")).unwrap();
    std::fs::create_dir_all(base.join("shared")).unwrap();
    std::fs::write(base.join("real/project/a.txt"), "through the link").unwrap();
    std::fs::write(base.join("shared/b.txt"), "extra root").unwrap();
    symlink(base.join("real"), base.join("link")).unwrap();
    let via_link = base.join("link/project");
    let roots = format!("{}:{}", base.join("shared").display(), base.join("link/project").display());
    let bridge =
        Bridge::start_with(&[("SUPEX_PROJECT_ROOT", via_link.to_str().unwrap()), ("SUPEX_ALLOWED_ROOTS", &roots)])
            .unwrap();
    let mut client = bridge.client();
    let read = ok(&mut client, "read_file", json!({"path": via_link.join("a.txt")}));
    assert_eq!(read["content"], "through the link");
    assert_eq!(read["path"], base.join("real/project/a.txt").to_str().unwrap());
    assert_eq!(ok(&mut client, "read_file", json!({"path": "a.txt"}))["content"], "through the link");
    assert_eq!(ok(&mut client, "read_file", json!({"path": base.join("shared/b.txt")}))["content"], "extra root");
    let reply = tool(&mut client, "list_dir", json!({"path": base}));
    assert_eq!(error(&reply)["code"], -32002);
}

#[test]
fn a_hello_workspace_is_an_extra_root_and_the_base_of_relative_paths() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let ws = bridge.base().join("workspace");
    std::fs::create_dir(&ws).unwrap();
    let mut client = integration_tests::LineClient::connect(bridge.bridge);
    let mut hello = crate::support::hello_params();
    hello["workspace"] = json!(ws);
    assert_eq!(client.call(1, "hello", hello)["result"]["success"], true);
    ok(&mut client, "write_file", json!({"path": "made-here.txt", "content": "ws"}));
    assert_eq!(std::fs::read_to_string(ws.join("made-here.txt")).unwrap(), "ws");
    std::fs::write(bridge.root.join("p.txt"), "project").unwrap();
    assert_eq!(ok(&mut client, "read_file", json!({"path": bridge.root.join("p.txt")}))["content"], "project");
    // Only for this connection.
    let mut other = bridge.client();
    let reply = tool(&mut other, "read_file", json!({"path": ws.join("made-here.txt")}));
    assert_eq!(error(&reply)["code"], -32002);
    // A workspace must be an existing directory, and not /.
    for bad in [json!("/definitely/not/here"), json!("/")] {
        let mut client = integration_tests::LineClient::connect(bridge.bridge);
        let mut hello = crate::support::hello_params();
        hello["workspace"] = bad;
        let reply = client.call(1, "hello", hello);
        assert_eq!(error(&reply)["code"], -32602, "{reply}");
    }
}

#[test]
fn a_large_read_is_cut_at_half_the_message_limit_and_says_so() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_MAX_MESSAGE", "4096")]) else {
        return;
    };
    let mut client = bridge.client();
    let text: String = (0..10_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    std::fs::write(bridge.root.join("big.txt"), &text).unwrap();
    let first = ok(&mut client, "read_file", json!({"path": "big.txt"}));
    assert_eq!((first["length"].as_u64(), first["truncated"].as_bool()), (Some(2048), Some(true)));
    assert_eq!(first["size"], 10_000);
    assert_eq!(first["content"], &text[..2048]);
    let last = ok(&mut client, "read_file", json!({"path": "big.txt", "offset": 8192}));
    assert_eq!((last["length"].as_u64(), last["truncated"].as_bool()), (Some(1808), Some(false)));
    assert_eq!(last["content"], &text[8192..]);
    let past = ok(&mut client, "read_file", json!({"path": "big.txt", "offset": 20_000}));
    assert_eq!((past["content"].as_str(), past["truncated"].as_bool()), (Some(""), Some(false)));
}
