//! `message/save` against what else happens meanwhile and what is at the
//! path: a save that ends after another message was opened or created
//! leaves that message's file alone, and nothing but a regular file (or a
//! symbolic link, replaced) is ever replaced.

use std::os::unix::fs::FileTypeExt;
use std::time::Duration;

use serde_json::json;

use crate::support::{ADT, Control, Host};

/// A message of about `mib` MiB whose save takes a while (written and synced).
fn large_message(mib: usize) -> String {
    let segment = format!("OBX|1|ST|A||{}\r", "a".repeat(1000));
    format!("MSH|^~\\&|AAA\r{}", segment.repeat(mib * 1024))
}

/// Starts a save of the message on `saver` and, while it runs, has `other`
/// do `method` (opening b.hl7 or a new message). Whether the save was still
/// running when `method` was answered: only then did the race happen.
fn save_while(saver: &mut Control, other: &mut Control, method: &str, params: serde_json::Value) -> bool {
    saver.send(&json!({"jsonrpc": "2.0", "id": 77, "method": "message/save", "params": {}}));
    std::thread::sleep(Duration::from_millis(5));
    let answered = other.call(method, params);
    assert!(answered.get("error").is_none(), "{answered}");
    let raced = saver.recv_within(Duration::from_millis(1)).is_none();
    let saved = if raced { saver.recv() } else { saver.recv_within(Duration::from_secs(30)).unwrap() };
    assert!(saved.get("error").is_none(), "{saved}");
    raced
}

/// A save that finishes after another message took the held one's place
/// (`message/open`, `message/new`) wrote the message it started with, and
/// leaves the new one as it was: its own file (or none), so a plain save
/// of it never writes over the file of the message before.
#[test]
fn a_save_that_ends_after_an_open_or_new_leaves_the_new_message_alone() {
    let host = Host::start("");
    let a = host.dir.path().join("a.hl7");
    let b = host.dir.path().join("b.hl7");
    let big = large_message(24);
    std::fs::write(&a, &big).unwrap();
    std::fs::write(&b, ADT).unwrap();
    let (mut saver, mut other) = (host.client(), host.client());
    for method in ["message/open", "message/new"] {
        let mut raced = false;
        for _attempt in 0..5 {
            assert!(saver.call("message/open", json!({"path": a})).get("error").is_none());
            let params = if method == "message/open" { json!({"path": b}) } else { json!({"message": ADT}) };
            if save_while(&mut saver, &mut other, method, params) {
                raced = true;
                break;
            }
        }
        assert!(raced, "{method}: every save ended before it was answered; the race did not happen");
        let held = other.call("message/get", json!({}))["result"].clone();
        assert_eq!(held["message"], ADT, "{method}");
        if method == "message/open" {
            assert_eq!(held["filePath"], b.display().to_string(), "{method}: {held}");
            assert_eq!(held["dirty"], false, "{method}: {held}");
            assert!(other.call("message/save", json!({})).get("error").is_none());
            assert_eq!(std::fs::read_to_string(&b).unwrap(), ADT);
        } else {
            assert_eq!(held["hasFile"], false, "{method}: {held}");
            assert_eq!(other.call("message/save", json!({}))["error"]["code"], -32005, "{method}: a file to save to");
        }
        let size = std::fs::metadata(&a).unwrap().len();
        assert_eq!(
            size,
            big.trim_end_matches('\r').len() as u64,
            "{method}: a.hl7 holds {size} bytes, not the message saved to it"
        );
    }
}

/// A FIFO, a socket (the host's own control socket) and a device node are
/// refused -32006 and stay what they were; a symbolic link to a regular file
/// is replaced by the file, its target untouched.
#[test]
fn message_save_replaces_only_regular_files_and_links() {
    let host = Host::start("");
    let dir = host.dir.path();
    host.result("message/new", json!({"message": ADT}));
    let fifo = dir.join("fifo.hl7");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // A copy of /dev/null's node, in the test's own directory (root only).
    let device = dir.join("null.hl7");
    let have_device = nix::sys::stat::mknod(
        &device,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 3),
    )
    .is_ok();
    let mut targets = vec![fifo.clone(), host.socket.clone()];
    if have_device {
        targets.push(device.clone());
    }
    for target in &targets {
        let refused = host.call("message/save", json!({"path": target}));
        assert_eq!(refused["error"]["code"], -32006, "{}: {refused}", target.display());
        assert!(refused["error"]["message"].as_str().unwrap().contains("not a regular file"), "{refused}");
    }
    let kind = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap().file_type();
    assert!(kind(&fifo).is_fifo());
    assert!(kind(&host.socket).is_socket());
    if have_device {
        assert!(kind(&device).is_char_device());
    }
    assert!(host.call("host/status", json!({})).get("error").is_none(), "the control socket still answers");
    let got = host.result("message/get", json!({}));
    assert_eq!(got["hasFile"], false, "a refused save gives the message no file: {got}");

    let victim = dir.join("victim.hl7");
    std::fs::write(&victim, "old").unwrap();
    let link = dir.join("link.hl7");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    host.result("message/save", json!({"path": link}));
    assert!(kind(&link).is_file());
    assert_eq!(std::fs::read_to_string(&link).unwrap(), ADT);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "old");
}
