//! File tools and the path policy over the wire.

use std::os::unix::fs::{FileTypeExt, PermissionsExt, symlink};

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

/// Control characters take six bytes each in JSON: the cap is on the reply
/// as written, not on the bytes read, and reading on from `offset + length`
/// still gives the whole file.
#[test]
fn a_read_of_control_characters_is_cut_where_the_written_reply_reaches_the_cap() {
    let Some(bridge) = Bridge::start_with(&[("SUPEX_MAX_MESSAGE", "65536")]) else {
        return;
    };
    let mut client = bridge.client();
    let text: String = (0..100_000).map(|i| if i % 10 == 0 { 'a' } else { '\u{1}' }).collect();
    std::fs::write(bridge.root.join("ctl.txt"), &text).unwrap();
    let mut read = String::new();
    let mut replies = 0;
    loop {
        client.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "read_file", "arguments": {"path": "ctl.txt", "offset": read.len()}}}));
        let line = client.recv_line().unwrap();
        // Uncut, 32 KiB read are a 180 KiB reply.
        assert!(line.len() < 32 * 1024 + 1024, "a reply of {} bytes", line.len());
        let result = serde_json::from_str::<serde_json::Value>(&line).unwrap()["result"].clone();
        assert_eq!(result["encoding"], "utf-8");
        let content = result["content"].as_str().unwrap();
        assert_eq!(result["length"].as_u64(), Some(content.len() as u64));
        read.push_str(content);
        replies += 1;
        if result["truncated"] == false {
            break;
        }
        assert!(!content.is_empty() && replies < 100, "{result}");
    }
    assert!(read == text, "read {} bytes of {}", read.len(), text.len());
    assert!(replies > 10, "{replies} replies");
}

#[test]
fn with_explicit_roots_a_workspace_must_lie_inside_them() {
    if !integration_tests::require_tool("ruby") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    for sub in ["shared/inner", "elsewhere"] {
        std::fs::create_dir_all(base.join(sub)).unwrap();
    }
    std::fs::write(base.join("shared/inner/x.txt"), "inner").unwrap();
    std::fs::write(base.join("elsewhere/secret.txt"), "secret").unwrap();
    let bridge = Bridge::start_with(&[("SUPEX_ALLOWED_ROOTS", base.join("shared").to_str().unwrap())]).unwrap();
    let hello = |workspace: &std::path::Path| {
        let mut client = integration_tests::LineClient::connect(bridge.bridge);
        let mut hello = crate::support::hello_params();
        hello["workspace"] = json!(workspace);
        let reply = client.call(1, "hello", hello);
        (client, reply)
    };
    for outside in [base.join("elsewhere"), "/etc".into(), base.clone()] {
        let (_, reply) = hello(&outside);
        let err = error(&reply);
        assert_eq!(err["code"], -32002, "{}: {reply}", outside.display());
        assert_eq!(err["message"], "Path access denied");
        assert_eq!(err["data"]["path"], outside.to_str().unwrap());
    }
    // Inside the roots, a workspace is the base of relative paths and widens nothing.
    let (mut client, reply) = hello(&base.join("shared/inner"));
    assert_eq!(reply["result"]["success"], true, "{reply}");
    assert_eq!(ok(&mut client, "read_file", json!({"path": "x.txt"}))["content"], "inner");
    let reply = tool(&mut client, "read_file", json!({"path": "../../elsewhere/secret.txt"}));
    assert_eq!(error(&reply)["code"], -32002);
    // The project root is a root too.
    let (_, reply) = hello(&bridge.root);
    assert_eq!(reply["result"]["success"], true, "{reply}");
}

/// A local process swaps a directory inside the root for a symlink to the
/// outside, over and over, while the file tools run: the kernel, not an
/// earlier check, decides where each open lands, so nothing gets out.
#[test]
fn swapping_a_directory_for_a_symlink_during_file_tools_never_escapes_the_root() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};

    const TRIES: u64 = 2000;
    const PIPELINE: u64 = 50;
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let outside = bridge.base().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("f"), "SECRET").unwrap();
    std::fs::write(outside.join("outside-marker"), "").unwrap();
    let (dir, swap) = (bridge.root.join("dir"), bridge.root.join("swap"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("f"), "inside").unwrap();
    symlink(&outside, &swap).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // `dir` is always there: a directory one moment, a symlink out the next.
                renameat2(AT_FDCWD, &dir, AT_FDCWD, &swap, RenameFlags::RENAME_EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let mut client = bridge.client();
    let mut outcomes = std::collections::BTreeMap::<String, u64>::new();
    let mut escapes = Vec::new();
    let tools = [
        ("read_file", json!({"path": "dir/f"})),
        ("list_dir", json!({"path": "dir"})),
        ("write_file", json!({"path": "dir/w.txt", "content": "x"})),
        ("write_file", json!({"path": "dir/made/deep/w.txt", "content": "x", "create_dirs": true})),
    ];
    for (name, args) in &tools {
        for round in 0..TRIES / PIPELINE {
            // The swapper has moved since the last round: on a loaded machine
            // it can be kept off the CPU for a whole tool's calls, which then
            // all meet one side (a release run saw 2000 list_dir all "ok").
            // Bounded: a swapper that died fails the test instead of hanging it.
            let (seen, since) = (swaps.load(Ordering::Relaxed), std::time::Instant::now());
            while swaps.load(Ordering::Relaxed) == seen {
                assert!(since.elapsed() < std::time::Duration::from_secs(10), "the swapper stopped");
                std::thread::yield_now();
            }
            for i in 0..PIPELINE {
                let id = round * PIPELINE + i;
                client.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                    "params": {"name": name, "arguments": args}}));
            }
            for _ in 0..PIPELINE {
                let reply = client.recv();
                let outcome = match (&reply["result"], &reply["error"]["code"]) {
                    (result, _) if result["content"] == "SECRET" => "escaped".to_owned(),
                    (result, _) if result["entries"].to_string().contains("outside-marker") => "escaped".to_owned(),
                    (result, _) if result.is_object() => "ok".to_owned(),
                    (_, code) => format!("error {code}"),
                };
                if outcome == "escaped" {
                    escapes.push(reply);
                }
                *outcomes.entry(format!("{name}: {outcome}")).or_default() += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let written_outside: Vec<_> =
        std::fs::read_dir(&outside).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    eprintln!("{} swaps; outcomes: {outcomes:?}", swaps.load(Ordering::Relaxed));
    assert!(escapes.is_empty(), "{} escapes, e.g. {}", escapes.len(), escapes[0]);
    assert!(
        !written_outside.iter().any(|name| name != "f" && name != "outside-marker"),
        "writes landed outside the root: {written_outside:?}"
    );
    // The race really ran: some calls met the directory, some the symlink.
    for name in ["read_file", "list_dir"] {
        assert!(outcomes.get(&format!("{name}: ok")).is_some_and(|n| *n > 0), "{outcomes:?}");
        assert!(outcomes.keys().any(|k| k.starts_with(name) && k.contains("error")), "{outcomes:?}");
    }
}

#[test]
fn a_fifo_is_neither_written_nor_replaced_and_never_holds_the_bridge() {
    let Some(mut bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let fifo = bridge.root.join("pipe");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Appending would block in open() for a reader that never comes; writing
    // would rename a regular file over the FIFO. Both are refused at once.
    for append in [true, false] {
        let reply = tool(&mut client, "write_file", json!({"path": "pipe", "content": "x", "append": append}));
        let refused = error(&reply);
        assert_eq!(refused["code"], -32602, "{reply}");
        assert!(refused["message"].as_str().unwrap().contains("not a regular file"), "{reply}");
    }
    let reply = tool(&mut client, "read_file", json!({"path": "pipe"}));
    assert_eq!(error(&reply)["code"], -32602, "{reply}");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO is still there");
    // The same through a symlink inside the root.
    symlink("pipe", bridge.root.join("to-pipe")).unwrap();
    let reply = tool(&mut client, "write_file", json!({"path": "to-pipe", "content": "x", "append": true}));
    assert_eq!(error(&reply)["code"], -32602, "{reply}");
    // Nothing is left blocked: the bridge stops on SIGTERM like any other.
    assert_eq!(bridge.daemon.terminate().code(), Some(0));
}

#[test]
fn a_name_too_long_is_a_bad_argument_and_console_log_keeps_its_range() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    let reply = tool(&mut client, "write_file", json!({"path": "n".repeat(300), "content": "x"}));
    assert_eq!(error(&reply)["code"], -32602, "{reply}");
    for lines in [0, 10_001, 999_999_999_999u64] {
        let reply = tool(&mut client, "console_log", json!({ "lines": lines }));
        assert!(error(&reply)["message"].as_str().unwrap().contains("1 to 10000"), "{reply}");
    }
    assert!(ok(&mut client, "console_log", json!({"lines": 10_000}))["success"] == true);
}

/// As `realpath` reads them: a path ending in `/` names a directory.
#[test]
fn a_path_ending_in_a_slash_must_name_a_directory() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    std::fs::write(bridge.root.join("a.txt"), "inside").unwrap();
    std::fs::create_dir(bridge.root.join("sub")).unwrap();
    for path in ["a.txt/", "a.txt/."] {
        let reply = tool(&mut client, "read_file", json!({ "path": path }));
        let err = error(&reply);
        assert_eq!(err["code"], -32602, "{path}: {reply}");
        assert!(err["message"].as_str().unwrap().contains("not a directory"), "{path}: {reply}");
    }
    let reply = tool(&mut client, "write_file", json!({"path": "newdir/", "content": "x", "create_dirs": true}));
    assert_eq!(error(&reply)["code"], -32602, "{reply}");
    assert!(!bridge.root.join("newdir").exists(), "a file or directory named newdir was made");
    let reply = tool(&mut client, "write_file", json!({"path": "a.txt/", "content": "x"}));
    assert_eq!(error(&reply)["code"], -32602, "{reply}");
    assert_eq!(std::fs::read_to_string(bridge.root.join("a.txt")).unwrap(), "inside");
    assert!(ok(&mut client, "list_dir", json!({"path": "sub/"}))["entries"].is_array());
    assert_eq!(ok(&mut client, "write_file", json!({"path": "sub/new.txt", "content": "x"}))["bytes_written"], 1);
}
