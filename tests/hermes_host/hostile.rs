//! What neither a hostile extension nor a hostile local client can do to the
//! host: make it read without end (`message/open` of a device or a FIFO),
//! hold events without bound (an extension that never reads), lock a person
//! out of the page (idle sockets), write to the user's terminal (escape
//! sequences through `ctl`) or in the host's name in its log, or stay
//! "running" without a connection.

use std::time::{Duration, Instant};

use integration_tests::rss_bytes;
use serde_json::json;

use crate::support::{ADT, Host};

const MIB: u64 = 1024 * 1024;

/// A device that never ends and a FIFO nobody writes are refused -32006 at
/// once (the FIFO without waiting for a writer), the daemon grows by nothing
/// much, and the message held stays.
#[test]
fn message_open_refuses_devices_and_fifos_at_once() {
    let host = Host::start("");
    host.result("message/set", json!({"message": ADT}));
    let fifo = host.dir.path().join("fifo.hl7");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let before = rss_bytes(host.daemon.pid());
    for path in [std::path::Path::new("/dev/zero"), std::path::Path::new("/dev/urandom"), &fifo] {
        let started = Instant::now();
        let refused = host.call("message/open", json!({"path": path}));
        assert_eq!(refused["error"]["code"], -32006, "{}: {refused}", path.display());
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("not a regular file"), "{message}");
        assert!(started.elapsed() < Duration::from_secs(5), "{}: {:?}", path.display(), started.elapsed());
    }
    let grown = rss_bytes(host.daemon.pid()).saturating_sub(before);
    assert!(grown < 32 * MIB, "grew by {} MiB", grown / MIB);
    assert_eq!(host.result("message/get", json!({}))["message"], ADT);
}
