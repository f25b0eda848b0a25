//! What an evaluation prints, captured: bounded on the way (not only in the
//! reply), and the standard streams the code redirects itself.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Bridge, ok, runtime_pid, start_eval};

/// Bytes in the regular files a process holds open (the capture, if it is
/// one, unlinked or not), each file counted once however many fds it has.
fn open_file_bytes(pid: u32) -> u64 {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    let files: HashMap<(u64, u64), u64> = fds
        .flatten()
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .filter(|meta| meta.is_file())
        .map(|meta| ((meta.dev(), meta.ino()), meta.len()))
        .collect();
    files.values().sum()
}

/// 16 MB printed (by Ruby and by a subprocess) keeps no more than a little
/// past the 1 MiB reply cap anywhere on the way, and the reply says how much
/// there was.
#[test]
fn a_flood_of_output_is_bounded_before_it_reaches_the_reply() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    if !std::path::Path::new("/proc/self/fd").exists() {
        integration_tests::skip("/proc", "runs on Linux");
        return;
    }
    let mut probe = bridge.client();
    let pid = runtime_pid(&mut probe);
    let mut client = bridge.client();
    let flood = "200.times { $stdout.write('x' * 65536) }; system('head -c 3000000 /dev/zero'); sleep 1.5; :done";
    start_eval(&bridge, &mut client, flood);
    let (started, mut most) = (Instant::now(), 0);
    while started.elapsed() < Duration::from_millis(1200) {
        most = most.max(open_file_bytes(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let reply = client.recv();
    let output = reply["result"]["output"].as_str().unwrap_or_else(|| panic!("{reply}"));
    assert_eq!(reply["result"]["result"], "done");
    assert!(output.ends_with("\n[output truncated: 16107200 bytes in all, 1048576 shown]\n"), "{}", &output[1 << 20..]);
    assert!(most <= 2 << 20, "the runtime held {most} bytes of files while the evaluation printed");
    // And the next one is fast and clean.
    let started = Instant::now();
    assert_eq!(ok(&mut client, "eval_ruby", json!({"code": "print 1; 2"}))["output"], "1");
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
}

/// `STDOUT.reopen('/dev/null')` inside an evaluation does what it says (what
/// follows on stdout is discarded, stderr is still captured), in any write
/// mode, without naming anything of the daemon's; the next evaluation's
/// streams are captured again.
#[test]
fn reopening_stdout_inside_an_evaluation_works_and_the_next_one_is_captured() {
    let Some(bridge) = Bridge::start() else {
        return;
    };
    let mut client = bridge.client();
    for (code, output) in [
        ("STDOUT.reopen('/dev/null'); puts 'gone'; system('echo gone too'); $stderr.puts 'kept'; :ok", "kept\n"),
        ("STDOUT.reopen(File::NULL, 'w'); puts 'gone'; $stderr.puts 'kept'; :ok", "kept\n"),
        ("STDOUT.reopen(File::NULL, 'a'); STDERR.reopen(File::NULL, 'w'); puts 'gone'; warn 'gone'; :ok", ""),
        ("STDERR.reopen(File.open(File::NULL, 'w')); warn 'gone'; $stdout.print 'kept'; :ok", "kept"),
    ] {
        let reply = client.call(1, "tools/call", json!({"name": "eval_ruby", "arguments": {"code": code}}));
        assert!(!reply.to_string().contains("supex-capture"), "{code}: {reply}");
        assert_eq!(reply["result"]["result"], "ok", "{code}: {reply}");
        assert_eq!(reply["result"]["output"], output, "{code}");
        let next = ok(&mut client, "eval_ruby", json!({"code": "puts 'back'; system('echo child >&2'); 1"}));
        assert_eq!(next["output"], "back\nchild\n", "after {code}");
    }
}
