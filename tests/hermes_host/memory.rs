//! What a message costs the host in memory, measured on the real daemon: the
//! shapes that cost the most per byte of text (a million short segments, four
//! million delimiters of one kind), each `message/set` and read back in a
//! daemon of its own, with its resident memory read from /proc before and at
//! its peak after; and the same for the message as a tree.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::Host;

const MIB: u64 = 1024 * 1024;

/// The most a held message may cost per byte of its text, peak included
/// (docs/hermes-host.md states the measured figures, well under this).
const MAX_BYTES_PER_BYTE: u64 = 20;

/// The shapes the issue measured (240 to 750 bytes per byte before), and
/// the other delimiters flooded the same way.
fn shapes() -> Vec<(&'static str, String)> {
    const FOUR_MIB: usize = 4 * 1024 * 1024;
    let header = "MSH|^~\\&|";
    let flood = |c: &str| format!("{header}{}", c.repeat(FOUR_MIB));
    vec![
        ("10^6 segments of 8 bytes", format!("MSH|^~\\&{}", "\rNTE|123".repeat(1_000_000))),
        ("4 MiB of `|` (one segment)", flood("|")),
        ("4 MiB of `^` (one field)", flood("^")),
        ("4 MiB of `~` (one field)", flood("~")),
        ("4 MiB of `&` (one component)", flood("&")),
        ("4 MiB of `x|` (fields with a value)", flood("x|")[..header.len() + FOUR_MIB].to_owned()),
    ]
}

/// A `/proc/<pid>/status` figure in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')).unwrap();
    line.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
}

/// Resets the process's peak (`VmHWM`) to its current RSS; false where the
/// kernel does not allow it (then the peak since start is read, which can
/// only overstate the growth).
fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// A control connection for messages of many MiB: no read timeout short
/// enough to cut a slow (debug) build off.
struct BigClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next: u64,
}

impl BigClient {
    fn connect(host: &Host) -> BigClient {
        let stream = UnixStream::connect(&host.socket).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        BigClient { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream, next: 1 }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let mut line =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        line.push(b'\n');
        self.writer.write_all(&line).unwrap();
        drop(line);
        loop {
            let mut text = String::new();
            assert!(self.reader.read_line(&mut text).unwrap() > 0, "the host closed the connection");
            let message: Value = serde_json::from_str(&text).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }
}

/// What a daemon grew by while doing some work.
struct Growth {
    /// RSS when the work began.
    before: u64,
    /// Its peak during the work (and the debounced events after it).
    peak: u64,
    /// RSS after it.
    after: u64,
    /// Whether the kernel let the peak be reset at the start; if not, the
    /// peak is since the daemon started, which can only overstate the growth.
    reset: bool,
}

impl Growth {
    fn peak_growth(&self) -> u64 {
        self.peak.saturating_sub(self.before)
    }

    fn describe(&self) -> String {
        format!(
            "RSS {} MiB before, peak +{} MiB, after +{} MiB{}",
            self.before / MIB,
            self.peak_growth() / MIB,
            self.after.saturating_sub(self.before) / MIB,
            if self.reset { "" } else { " (peak since start)" }
        )
    }
}

/// Starts a daemon of its own with `args`, lets it allocate what any first
/// message makes it keep, runs `work` on a control connection and measures.
fn growth_of(args: &[&str], work: impl FnOnce(&mut BigClient)) -> Growth {
    let host = Host::start_with("", args);
    let pid = host.daemon.pid();
    let mut client = BigClient::connect(&host);
    let warm = client.call("message/set", json!({"message": "MSH|^~\\&|WARM\rPID|1||2^3~4&5"}));
    assert!(warm.get("error").is_none(), "{warm}");
    for format in ["hl7", "json", "yaml", "toml"] {
        client.call("message/get", json!({"format": format}));
    }
    let before = status_bytes(pid, "VmRSS");
    let reset = reset_peak(pid);
    work(&mut client);
    // The debounced message/changed (500 ms) runs in this window too; the
    // figure is a peak, so whether it ran first only makes it smaller.
    std::thread::sleep(Duration::from_millis(1200));
    Growth { before, peak: status_bytes(pid, "VmHWM"), after: status_bytes(pid, "VmRSS"), reset }
}

fn succeeded(response: &Value, what: &str) {
    if let Some(error) = response.get("error") {
        panic!("{what}: {error}");
    }
}

/// `message/set` of each shape in a fresh daemon, then `message/get` of it:
/// the daemon's growth at its peak stays under 20 bytes per byte of text.
#[test]
fn a_held_message_costs_memory_in_proportion_to_its_text() {
    let mut failures = Vec::new();
    for (shape, text) in shapes() {
        let growth = growth_of(&[], |client| {
            succeeded(&client.call("message/set", json!({"message": text})), shape);
            let got = client.call("message/get", json!({}));
            assert_eq!(got["result"]["message"].as_str().map(str::len), Some(text.len()), "{shape}");
        });
        let per_byte = growth.peak_growth() as f64 / text.len() as f64;
        eprintln!(
            "MEMORY {shape}: {:.1} MiB of text; {}: {per_byte:.2} bytes per byte at the peak",
            text.len() as f64 / MIB as f64,
            growth.describe()
        );
        if growth.peak_growth() > MAX_BYTES_PER_BYTE * text.len() as u64 {
            failures.push(format!("{shape}: {per_byte:.1} bytes per byte"));
        }
    }
    assert!(failures.is_empty(), "over {MAX_BYTES_PER_BYTE} bytes per byte of text: {failures:?}");
}

/// The most a message's tree costs per element at the peak of writing it
/// (docs/hermes-host.md states the measured figure: its output is up to 30
/// bytes an element, and it is sent as a JSON string).
const MAX_TREE_BYTES_PER_ELEMENT: u64 = 100;

/// `message/get` in each tree format of a message dense in every kind of
/// element costs memory in proportion to its elements: the trees are
/// written as they go, nothing is built per element first.
#[test]
fn a_message_as_a_tree_costs_memory_in_proportion_to_its_elements() {
    // 1 Mi elements: `^`, `&` and `~` in turn between one-letter values.
    let text = format!("MSH|^~\\&|{}", "x^x&x~".repeat(349_525));
    let elements = 5 + 1 + 3 * 349_525;
    let mut failures = Vec::new();
    for format in ["json", "yaml", "toml"] {
        let growth = growth_of(&[], |client| {
            succeeded(&client.call("message/set", json!({"message": text})), format);
            let got = client.call("message/get", json!({"format": format}));
            assert!(got["result"]["message"].as_str().is_some_and(|tree| tree.len() > text.len()), "{format}");
        });
        let per_element = growth.peak_growth() as f64 / elements as f64;
        eprintln!("MEMORY {format} of {elements} elements: {}: {per_element:.1} bytes per element", growth.describe());
        if growth.peak_growth() > MAX_TREE_BYTES_PER_ELEMENT * elements as u64 {
            failures.push(format!("{format}: {per_element:.1} bytes per element"));
        }
    }
    assert!(failures.is_empty(), "over {MAX_TREE_BYTES_PER_ELEMENT} bytes per element: {failures:?}");
}
