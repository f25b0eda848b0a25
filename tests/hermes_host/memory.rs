//! What a message costs the host in memory, measured on the real daemon: the
//! shapes that cost the most per byte of text (a million short segments, four
//! million delimiters of one kind), each `message/set` and read back in a
//! daemon of its own, with its resident memory read from /proc before and at
//! its peak after. And the element bound (`--max-elements`), past which a
//! message is refused from every door: control, extension, file.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use integration_tests::require_tool;
use serde_json::{Value, json};

use crate::LONG;
use crate::support::{ADT, Host, py_extension};

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

/// The most a tree given to `message/set` costs per value (counted as the
/// host counts them, see docs/hermes-host.md) while it is read.
const MAX_BYTES_PER_TREE_VALUE: u64 = 400;

/// A tree given to `message/set` is read whole first (serde_json's values,
/// toml's document: the costliest per value), so it is held to an eighth of
/// the element bound in values: at the bound, its cost is in proportion.
#[test]
fn a_tree_read_costs_memory_in_proportion_to_its_values() {
    let values = 200_000;
    let bound = (8 * values).to_string();
    let items = vec![""; values - 20];
    let trees = [
        ("json", json!({"segments": [{"segment": "MSH"}, {"segment": "ZZZ", "fields": {"3": items}}]}).to_string()),
        (
            "toml",
            format!(
                "[[segments]]\nsegment = \"MSH\"\n\n[[segments]]\nsegment = \"ZZZ\"\n\n[segments.fields]\n3 = {}\n",
                json!(items)
            ),
        ),
    ];
    let mut failures = Vec::new();
    for (format, tree) in trees {
        let growth = growth_of(&["--max-elements", &bound], |client| {
            succeeded(&client.call("message/set", json!({"message": tree, "format": format})), format);
        });
        let per_value = growth.peak_growth() as f64 / values as f64;
        eprintln!("MEMORY a {format} tree of {values} values: {}: {per_value:.1} bytes per value", growth.describe());
        if growth.peak_growth() > MAX_BYTES_PER_TREE_VALUE * values as u64 {
            failures.push(format!("{format}: {per_value:.1} bytes per value"));
        }
    }
    assert!(failures.is_empty(), "over {MAX_BYTES_PER_TREE_VALUE} bytes per value: {failures:?}");
}

/// The bound the element tests set: small, so that a message past it is small too.
const BOUND: &str = "200";

/// `ADT` (35 elements: its 2 segments and 33 delimiters) and 150 `NTE|1`
/// segments (2 each): 335, past 200.
fn past_the_bound() -> String {
    format!("{ADT}{}", "\rNTE|1".repeat(150))
}

/// The refusal names the limit and the setting that moves it.
fn assert_refused_for_elements(response: &Value, what: &str) {
    assert_eq!(response["error"]["code"], -32004, "{what}: {response}");
    let message = response["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("elements") && message.contains(BOUND) && message.contains("HERMES_HOST_MAX_ELEMENTS"),
        "{what}: {message}"
    );
}

/// Past `--max-elements`, `message/set` (in hl7 or a tree), `message/new`
/// and `message/open` are refused -32004 naming the limit and the setting,
/// and the message held before stays.
#[test]
fn past_the_element_bound_a_control_client_or_a_file_is_refused() {
    let host = Host::start_with("", &["--max-elements", BOUND]);
    host.result("message/set", json!({"message": ADT}));
    let big = past_the_bound();
    assert_refused_for_elements(&host.call("message/set", json!({"message": big})), "message/set");
    let tree = host.result("message/get", json!({"format": "json"}))["message"].as_str().unwrap().to_owned();
    let mut tree: Value = serde_json::from_str(&tree).unwrap();
    let nte = json!({"segment": "NTE", "fields": {"1": "1"}});
    tree["segments"].as_array_mut().unwrap().extend(std::iter::repeat_n(nte, 150));
    // A tree is held to an eighth of the bound in values before it is read.
    let as_json = host.call("message/set", json!({"message": tree.to_string(), "format": "json"}));
    assert_eq!(as_json["error"]["code"], -32004, "{as_json}");
    let message = as_json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at most 25 values") && message.contains("HERMES_HOST_MAX_ELEMENTS"), "{message}");
    assert_refused_for_elements(&host.call("message/new", json!({"message": big})), "message/new");
    let file = host.dir.path().join("big.hl7");
    std::fs::write(&file, &big).unwrap();
    assert_refused_for_elements(&host.call("message/open", json!({"path": file})), "message/open");
    assert_eq!(host.result("message/get", json!({}))["message"], ADT, "the message held before stays");
    // At the bound exactly, it is taken: 35 + 2 × 82 + 1.
    let at = format!("{ADT}{}|", "\rNTE|1".repeat(82));
    host.result("message/set", json!({"message": at}));
    assert_eq!(host.result("message/get", json!({}))["message"], at);
}

/// An extension's `editor/setMessage` past the bound is refused -32004;
/// a patch that would take the message past it is reported in `errors`
/// with the limit and the setting, and the other patches apply.
#[test]
fn past_the_element_bound_an_extension_edit_is_refused() {
    if !require_tool("python3") {
        return;
    }
    let config = py_extension("py", &[("EXT_CALL_FILE", "call.json")]);
    let host = Host::start_with(&config, &["--max-elements", BOUND]);
    host.wait_state("py", "running", LONG);
    host.result("message/set", json!({"message": ADT}));
    let set = host.ext_call("py", "editor/setMessage", json!({"message": past_the_bound(), "format": "hl7"}));
    assert_refused_for_elements(&set, "editor/setMessage");
    let patched = host.ext_call(
        "py",
        "editor/patchMessage",
        json!({"patches": [{"path": "NTE[150]", "create": true}, {"path": "PID.5.1", "value": "ROE"}]}),
    );
    let result = &patched["result"];
    assert_eq!((&result["success"], &result["patchesApplied"]), (&json!(false), &json!(1)), "{patched}");
    let refusal = result["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(refusal.contains(BOUND) && refusal.contains("HERMES_HOST_MAX_ELEMENTS"), "{refusal}");
    let now = host.result("message/get", json!({}))["message"].as_str().unwrap().to_owned();
    assert_eq!(now, ADT.replace("DOE^JOHN", "ROE^JOHN"));
    assert_eq!(host.extension("py")["state"], "running");
}

/// Ten control clients each pipeline 60 `message/get` of a 2.3 MB message
/// and never read: each holds about one write budget (8 MiB) and a reply,
/// not 128 MiB (twice the largest message) and 32 replies being made. A
/// client that reads still gets the message whole.
#[test]
fn clients_that_never_read_their_replies_hold_about_one_budget_each() {
    let host = Host::start("");
    let segment = format!("\rOBX|1|ST|X||{}", "v".repeat(40));
    let big = format!("MSH|^~\\&|A{}", segment.repeat(40_000));
    host.result("message/set", json!({"message": big}));
    let pid = host.daemon.pid();
    let before = integration_tests::rss_bytes(pid);
    let request =
        |id: usize| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"message/get\",\"params\":{{}}}}\n");
    let mut deaf = Vec::new();
    for _ in 0..10 {
        let mut stream = UnixStream::connect(&host.socket).unwrap();
        let pipelined: String = (0..60).map(request).collect();
        stream.write_all(pipelined.as_bytes()).unwrap();
        deaf.push(stream);
    }
    let mut peak = before;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(200));
        peak = peak.max(integration_tests::rss_bytes(pid));
    }
    let grown = peak.saturating_sub(before);
    eprintln!("10 clients x 60 unread message/get of {} bytes: +{} MiB at the peak", big.len(), grown / MIB);
    assert!(grown < 320 * MIB, "grew by {} MiB", grown / MIB);
    let got = host.result("message/get", json!({}));
    assert_eq!(got["message"].as_str().unwrap().len(), big.len());
    drop(deaf);
}
