//! The editor page (`HERMES_HOST_HTTP`) in a real browser: headless
//! Chromium ([`browser`](crate::browser)) opens the page with its token and
//! a person's actions are played on it with the mouse and the keyboard: a
//! field edited by typing in the tree, the raw view edited, a dialog
//! answered, a window frame opened and closed, an edit over MCP appearing
//! live. And, without a browser, what the page refuses: no token, another
//! site's Origin, another Host.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use integration_tests::{bin_path, eventually, on_free_ports, require_tool};
use serde_json::{Value, json};

use crate::browser::Browser;
use crate::support::{ADT, Host, py_extension};

const LONG: Duration = Duration::from_secs(30);

/// A schema in Hermes' field-list shape: the page names PID.5 and PID.5.1.
const SCHEMA: &str = r#"{"segments": {"PID": {"fields": [{"field": 5, "name": "Patient Name"}, {"field": 5, "component": 1, "name": "Family Name"}]}}}"#;

/// A host with ext.py (`py`) serving the page on a port of its own, its
/// file picker rooted in the fixture's directory; the page's URL.
fn page_host() -> (Host, String) {
    let extension = py_extension("py", &[("EXT_CALL_FILE", "call.json"), ("EXT_SCHEMA", SCHEMA)]);
    host_with_page(&format!("[ui]\nfile_roots = [\".\"]\n\n{extension}"))
}

fn host_with_page(config: &str) -> (Host, String) {
    on_free_ports(|[port]| Host::try_start_with_page(config, port))
}

/// The host with ADT open from a file, and a browser on the page, ready.
fn open_page() -> (Host, String, Browser, std::path::PathBuf) {
    let (host, url) = page_host();
    host.wait_state("py", "running", LONG);
    let file = host.dir.path().join("adt.hl7");
    std::fs::write(&file, ADT).unwrap();
    host.result("message/open", json!({"path": file}));
    let mut browser = Browser::launch();
    browser.navigate(&url);
    // The token traded for the cookie and gone from the address bar; the tree drawn.
    browser.wait_for(
        "document.body.dataset.ready === 'yes' && location.search === '' && document.querySelector('[data-path=\"PID.5.1\"]')",
        LONG,
    );
    (host, url, browser, file)
}

/// Has `py` send `method` to the host without waiting for the answer (a
/// person answers it in the page); the number of answers it logged before,
/// for [`answer_to`].
fn ext_sends(host: &Host, method: &str, params: Value) -> usize {
    let before = host.logs("py").iter().filter(|l| l.starts_with("RESULT ")).count();
    std::fs::write(host.call_file(), json!({"method": method, "params": params}).to_string()).unwrap();
    host.result("command/execute", json!({"command": "test/call"}));
    before
}

/// The whole response `py` got to what it sent after `before` answers.
fn answer_to(host: &Host, before: usize) -> Value {
    serde_json::from_str(&host.wait_log("py", "RESULT ", before, LONG)).unwrap()
}

fn value_of(path: &str) -> String {
    format!("document.querySelector('[data-path=\"{path}\"] .value').textContent")
}

fn raw_view_has(text: &str) -> String {
    format!("document.querySelector('pre.raw').textContent.includes({})", json!(text))
}

fn ctl_get(host: &Host) -> String {
    let socket = host.socket.display().to_string();
    let (status, stdout, stderr) = integration_tests::run("hermes-host", &["ctl", "--socket", &socket, "get"], &[]);
    assert!(status.success(), "{stderr}");
    stdout
}

/// A page port another process holds stops the host with a clear error,
/// which the harness tells from any other failure (and chooses again).
#[test]
fn a_page_port_another_process_holds_stops_the_host() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    assert!(Host::try_start_with_page("", port).is_err(), "the host served a port it did not hold");
}

#[test]
fn a_field_typed_in_the_tree_reaches_the_raw_view_and_ctl_get() {
    if !require_tool("chromium") || !require_tool("python3") {
        return;
    }
    let (host, _url, mut page, file) = open_page();
    // The schema's names beside the paths.
    page.wait_for("document.querySelector('[data-path=\"PID.5.1\"] .name').textContent === 'Family Name'", LONG);
    assert_eq!(page.eval(&value_of("PID.5.1")), "DOE");
    page.screenshot("opened");

    // Click the value, type, Enter.
    page.click("[data-path=\"PID.5.1\"] .value");
    page.wait_for("document.activeElement.classList.contains('edit')", LONG);
    page.type_text("SMITH");
    page.press("Enter", false);
    page.wait_for(&raw_view_has("SMITH^JOHN"), LONG);
    assert!(ctl_get(&host).contains("PID|1||12345^^^HOSP^MR~999^^^SSA^SS||SMITH^JOHN||"), "{}", ctl_get(&host));
    page.wait_for("document.querySelector('.dirty').textContent === '●'", LONG);

    // The keyboard alone: down to PID.5.2, Enter edits, Escape cancels, Enter applies.
    page.click("[data-path=\"PID.5.1\"] .path");
    page.press("ArrowDown", false);
    page.wait_for("document.activeElement.dataset.path === 'PID.5.2'", LONG);
    page.press("Enter", false);
    page.wait_for("document.activeElement.classList.contains('edit')", LONG);
    page.type_text("NOBODY");
    page.press("Escape", false);
    page.wait_for(
        &format!("{} === 'JOHN' && document.activeElement.dataset.path === 'PID.5.2'", value_of("PID.5.2")),
        LONG,
    );
    page.press("Enter", false);
    page.wait_for("document.activeElement.classList.contains('edit')", LONG);
    page.type_text("JANE");
    page.press("Enter", false);
    page.wait_for(&raw_view_has("SMITH^JANE"), LONG);
    assert!(!ctl_get(&host).contains("NOBODY"));

    // Ctrl-S saves to the file, and the page shows it clean.
    page.press("s", true);
    page.wait_for("document.querySelector('.dirty').textContent === ''", LONG);
    assert!(std::fs::read_to_string(&file).unwrap().contains("SMITH^JANE"));

    // The raw view, edited as a whole, is applied as message/set.
    page.click("button.edit-raw");
    page.wait_for("document.querySelector('textarea.raw-edit')", LONG);
    page.eval("(() => { const a = document.querySelector('textarea.raw-edit'); a.value = a.value.replace('19800101', '19800102'); return true; })()");
    page.click("button.apply-raw");
    page.wait_for(&raw_view_has("19800102"), LONG);
    assert!(ctl_get(&host).contains("19800102"));

    // A segment added from the tree.
    page.click("input.segment-name");
    page.type_text("NTE");
    page.press("Enter", false);
    page.wait_for("document.querySelector('[data-path=\"NTE\"]')", LONG);
    assert!(ctl_get(&host).lines().any(|l| l.starts_with("NTE")), "{}", ctl_get(&host));
    page.screenshot("edited");
}

#[test]
fn files_are_made_uploaded_saved_as_opened_and_downloaded_from_the_page() {
    if !require_tool("chromium") || !require_tool("python3") {
        return;
    }
    let (host, _url, mut page, _) = open_page();
    let dir = host.dir.path().canonicalize().unwrap();
    page.click("button[data-action=\"new\"]");
    page.wait_for("document.querySelector('.file-name').textContent.startsWith('new message')", LONG);

    // A file from this computer becomes a new message with no file.
    page.eval(
        "(() => { const input = document.querySelector('input.upload'); const files = new DataTransfer(); \
         files.items.add(new File(['MSH|^~\\\\&|UP\\rPID|1||77||UPLOADED^ONE'], 'up.hl7')); \
         input.files = files.files; input.dispatchEvent(new Event('change')); return true; })()",
    );
    page.wait_for(&raw_view_has("UPLOADED^ONE"), LONG);
    page.wait_for("document.querySelector('.dirty').textContent === '●'", LONG);

    // Save as…: a name typed in the host's file picker.
    page.click("button[data-action=\"save-as\"]");
    page.wait_for(
        &format!("document.querySelector('.picker-where code')?.textContent === {}", json!(dir.display().to_string())),
        LONG,
    );
    page.eval("(() => { const name = document.querySelector('.picker-name'); name.value = ''; name.focus(); return true; })()");
    page.type_text("saved.hl7");
    page.press("Enter", false);
    let saved = dir.join("saved.hl7");
    page.wait_for(
        &format!("document.querySelector('.file-name').textContent === {}", json!(saved.display().to_string())),
        LONG,
    );
    page.wait_for("document.querySelector('.dirty').textContent === ''", LONG);
    assert!(std::fs::read_to_string(&saved).unwrap().contains("UPLOADED^ONE"));

    // Open…: a file on the host, picked in the page.
    page.click("button[data-action=\"open\"]");
    page.click(".picker-entry[data-path$='/adt.hl7']");
    page.click(".modal button[data-answer=\"Open\"]");
    page.wait_for(&raw_view_has("DOE^JOHN"), LONG);

    // Download: the message as this browser's file.
    let downloads = tempfile::tempdir().unwrap();
    page.call("Page.setDownloadBehavior", json!({"behavior": "allow", "downloadPath": downloads.path()}));
    page.click("button[data-action=\"download\"]");
    let downloaded = downloads.path().join("adt.hl7");
    assert!(eventually(LONG, || std::fs::read_to_string(&downloaded).is_ok_and(|t| t == ADT)), "no download");

    // A segment removed with its ×.
    page.click("[data-path=\"PID\"] button.icon");
    page.wait_for("document.querySelector('[data-path=\"PID\"]') === null", LONG);
    assert!(!ctl_get(&host).contains("PID|"), "{}", ctl_get(&host));
}

#[test]
fn a_toolbar_button_s_confirm_is_answered_in_the_page_and_its_window_closes_for_it() {
    if !require_tool("chromium") || !require_tool("python3") {
        return;
    }
    let (host, url, mut page, _) = open_page();
    // A second tab, opened later: it is the one that answers; the first shows the dialog as pending there.
    let mut newest = Browser::launch();
    newest.navigate(&url);
    newest.wait_for("document.body.dataset.ready === 'yes'", LONG);

    page.click("button.tool[data-command=\"test/button\"]");
    newest.wait_for("document.querySelector('.modal .dialog-message')?.textContent === 'Proceed with the test?'", LONG);
    assert_eq!(newest.eval("document.querySelector('.modal .asker').textContent"), "py asks");
    page.wait_for("document.querySelector('#elsewhere .pending')?.textContent.includes('Test confirm')", LONG);
    assert_eq!(page.eval("document.querySelector('.modal') === null"), true);
    newest.screenshot("confirm");
    newest.click(".modal button[data-answer=\"Yes\"]");
    let answer: Value = serde_json::from_str(&host.wait_log("py", "CONFIRMED ", 0, LONG)).unwrap();
    assert_eq!(answer["result"], json!({"confirmed": true}), "{answer}");
    page.wait_for("document.querySelector('#elsewhere').hidden", LONG);
    drop(newest);

    // The newest tab gone, the first answers again (once the host has seen
    // the other's connection close): a window opens in it as a frame.
    let params =
        json!({"url": "http://127.0.0.1:9/wizard", "title": "Wizard", "width": 520, "height": 320, "modal": true});
    let deadline = Instant::now() + LONG;
    let opened = loop {
        let result = answer_to(&host, ext_sends(&host, "ui/openWindow", params.clone()));
        if result.get("result").is_some() || Instant::now() > deadline {
            break result;
        }
    };
    let window = opened["result"]["windowId"].as_str().unwrap_or_else(|| panic!("{opened}")).to_owned();
    page.wait_for(
        &format!("document.querySelector('.window[data-window-id=\"{window}\"] .window-title')?.textContent.includes('Wizard')"),
        LONG,
    );
    page.screenshot("window");
    page.click(".close-window");
    page.wait_for("document.querySelector('.window') === null", LONG);
    let closed_by = |window: &str, reason: &str| {
        let (window, reason) = (window.to_owned(), format!("\"reason\": \"{reason}\""));
        eventually(LONG, || {
            host.logs("py")
                .iter()
                .any(|l| l.contains("\"window/closed\"") && l.contains(&window) && l.contains(&reason))
        })
    };
    assert!(closed_by(&window, "user"), "no window/closed from the user: {:?}", host.logs("py"));

    // One the extension closes itself.
    let second =
        answer_to(&host, ext_sends(&host, "ui/openWindow", json!({"url": "http://127.0.0.1:9/x", "title": "Second"})));
    let second = second["result"]["windowId"].as_str().unwrap_or_else(|| panic!("{second}")).to_owned();
    page.wait_for(&format!("document.querySelector('.window[data-window-id=\"{second}\"]')"), LONG);
    assert_eq!(host.ext_call("py", "ui/closeWindow", json!({"windowId": second}))["result"]["success"], true);
    page.wait_for("document.querySelector('.window') === null", LONG);
    assert!(closed_by(&second, "extension"), "no window/closed from the extension: {:?}", host.logs("py"));

    // A file dialog browses the host's files (within [ui] file_roots), filtered.
    let asked = ext_sends(
        &host,
        "ui/openFile",
        json!({"title": "Pick a message", "filters": [{"name": "HL7", "extensions": ["hl7"]}]}),
    );
    page.wait_for("[...document.querySelectorAll('.picker-entry')].some(e => e.textContent === 'adt.hl7')", LONG);
    assert_eq!(
        page.eval("[...document.querySelectorAll('.picker-entry')].some(e => e.textContent === 'config.toml')"),
        false
    );
    page.screenshot("file-dialog");
    page.click(".picker-entry[data-path$='/adt.hl7']");
    page.click(".modal button[data-answer=\"Open\"]");
    let picked = answer_to(&host, asked);
    let expected = host.dir.path().canonicalize().unwrap().join("adt.hl7");
    assert_eq!(picked["result"]["path"], expected.display().to_string(), "{picked}");

    // The extension's log, live and coloured by level.
    host.result("command/execute", json!({"command": "test/stderr"}));
    page.wait_for("document.querySelector('#log .level-error')?.textContent.includes('an error')", LONG);
    page.wait_for("document.querySelector('#log .level-warn')?.textContent.includes('a warning')", LONG);
}

#[test]
fn the_shipped_example_runs_from_its_button_and_its_confirm_is_answered_in_the_page() {
    if !require_tool("chromium") || !require_tool("python3") {
        return;
    }
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned();
    let example = repo.join("config/examples/hermes");
    let config = format!(
        "[[extensions]]\nname = \"uppercase-names\"\ncommand = {}\n",
        json!(format!("python3 {}", example.join("uppercase-names.py").display()))
    );
    let (host, url) = host_with_page(&config);
    host.wait_state("uppercase-names", "running", LONG);
    let file = host.dir.path().join("adt-a01.hl7");
    std::fs::copy(example.join("adt-a01.hl7"), &file).unwrap();
    host.result("message/open", json!({"path": file}));
    let mut page = Browser::launch();
    page.navigate(&url);
    page.wait_for("document.body.dataset.ready === 'yes' && document.querySelector('[data-path=\"PID.5.1\"] .name')?.textContent === 'Family Name'", LONG);

    // The sample's names are in mixed case, so the command's effect shows.
    page.wait_for(&raw_view_has("Everyman^Adam"), LONG);

    page.click("button.tool[data-command=\"names/uppercase\"]");
    page.wait_for("document.querySelector('.modal .dialog-message')?.textContent === 'Change Everyman, Adam?'", LONG);
    page.screenshot("example-confirm");
    page.click(".modal button[data-answer=\"Yes\"]");
    page.wait_for(&format!("{} === 'EVERYMAN'", value_of("PID.5.1")), LONG);
    assert!(ctl_get(&host).contains("EVERYMAN^ADAM^A^III"), "{}", ctl_get(&host));
    page.screenshot("example-done");
}

/// `hermes-host mcp` on stdio, spoken to directly (newline-delimited JSON-RPC).
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(host: &Host) -> Mcp {
        let mut child = Command::new(bin_path("hermes-host"))
            .args(["mcp", "--socket", &host.socket.display().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Mcp { child, stdin, stdout, next: 1 };
        let init = mcp.call(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "web-test", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "{init}");
        writeln!(mcp.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        mcp
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "hermes-host mcp exited");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0
}

/// Has the page note (in its own clock, the machine's) when PID.5.1 first shows `want`.
fn watch_for(page: &mut Browser, want: &str) {
    page.eval(&format!(
        "(() => {{ window.__seenAt = null; const want = {}; if (window.__watch) window.__watch.disconnect(); \
         const check = () => {{ const el = document.querySelector('[data-path=\"PID.5.1\"] .value'); \
         if (el && el.textContent === want && window.__seenAt === null) window.__seenAt = Date.now(); }}; \
         window.__watch = new MutationObserver(check); \
         window.__watch.observe(document.body, {{subtree: true, childList: true, characterData: true}}); return true; }})()",
        json!(want)
    ));
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
fn an_edit_over_mcp_or_the_control_socket_appears_in_the_open_page_at_once() {
    if !require_tool("chromium") || !require_tool("python3") {
        return;
    }
    let (host, _url, mut page, _) = open_page();
    let mut mcp = Mcp::start(&host);
    let mut control = host.client();
    let (mut over_mcp, mut over_socket) = (Vec::new(), Vec::new());
    for i in 0..7 {
        let want = format!("MCP{i}");
        watch_for(&mut page, &want);
        let sent = now_ms();
        let reply = mcp.call(
            "tools/call",
            json!({"name": "patch_message", "arguments": {"patches": [{"path": "PID.5.1", "value": want}]}}),
        );
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        let seen = page.wait_for("window.__seenAt", LONG).as_f64().unwrap();
        over_mcp.push(seen - sent);

        let want = format!("CTL{i}");
        watch_for(&mut page, &want);
        let sent = now_ms();
        let reply = control.call("message/patch", json!({"patches": [{"path": "PID.5.1", "value": want}]}));
        assert_eq!(reply["result"]["success"], true, "{reply}");
        let seen = page.wait_for("window.__seenAt", LONG).as_f64().unwrap();
        over_socket.push(seen - sent);
    }
    let report = |values: &[f64]| {
        format!("median {:.0} ms, max {:.0} ms", median(values.to_vec()), values.iter().copied().fold(0.0, f64::max))
    };
    // The figure the spec's 100 ms is about, printed for the record.
    let line = format!(
        "remote edit → open page: over MCP (tool call sent → page shows it) {}; over the control socket {}\n",
        report(&over_mcp),
        report(&over_socket)
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    let _ = std::fs::write(crate::browser::screenshot_dir().join("latency.txt"), &line);
    page.screenshot("after-remote-edits");
    // A generous bound: the machine's load must not fail the test, only a page that does not follow.
    assert!(median(over_mcp) < 2000.0 && median(over_socket) < 2000.0, "{line}");
}

/// One HTTP/1.1 request; the status and the response's head.
fn http(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(LONG)).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request += &format!("Host: 127.0.0.1:{port}\r\n");
    }
    for (k, v) in headers {
        request += &format!("{k}: {v}\r\n");
    }
    stream.write_all(format!("{request}\r\n").as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    // The head only: a WebSocket answer never ends.
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head:?}"));
    (status, head)
}

#[test]
fn the_page_wants_its_token_its_own_origin_and_its_own_host() {
    use std::os::unix::fs::PermissionsExt;
    let (host, url) = page_host();
    let port: u16 = url.split(':').nth(2).unwrap().split('/').next().unwrap().parse().unwrap();
    let token = url.split("token=").nth(1).unwrap().to_owned();
    let with_token = format!("/?token={token}");

    // The URL: once in the log, in a 0600 file, from `ctl web`.
    assert!(host.daemon.wait_for_log("editor page", LONG), "{}", host.daemon.stderr());
    assert_eq!(host.daemon.stderr().matches(&token).count(), 1, "{}", host.daemon.stderr());
    let file = host.socket.with_extension("url");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let socket = host.socket.display().to_string();
    let (status, stdout, _) = integration_tests::run("hermes-host", &["ctl", "--socket", &socket, "web"], &[]);
    assert!(status.success());
    assert_eq!(stdout.trim(), url);

    assert_eq!(http(port, "/", &[]).0, 401);
    assert_eq!(http(port, "/?token=wrong", &[]).0, 401);
    assert_eq!(http(port, "/assets/main.js", &[]).0, 401);
    let (status, head) = http(port, &with_token, &[]);
    assert_eq!(status, 303, "{head}");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("location: /\r\n"), "{head}");
    let cookie_line = head.lines().find(|l| l.starts_with("set-cookie:")).unwrap().to_owned();
    assert!(cookie_line.contains("httponly") && cookie_line.contains("samesite=strict"), "{cookie_line}");
    let cookie = format!("hermes-host-{port}={token}");
    let (status, head) = http(port, "/", &[("Cookie", &cookie)]);
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-security-policy"), "{head}");
    assert_eq!(http(port, "/assets/main.js", &[("Cookie", &cookie)]).0, 200);

    // Another site's page, through the user's browser (which sends the cookie on its own only to the same site anyway).
    assert_eq!(http(port, &with_token, &[("Origin", "http://evil.example")]).0, 403);
    let upgrade = [
        ("Cookie", cookie.as_str()),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    let mut foreign = upgrade.to_vec();
    foreign.push(("Origin", "http://evil.example"));
    assert_eq!(http(port, "/ws", &foreign).0, 403);
    let own_origin = format!("http://127.0.0.1:{port}");
    let mut own = upgrade.to_vec();
    own.push(("Origin", &own_origin));
    assert_eq!(http(port, "/ws", &own).0, 101);
    assert_eq!(http(port, "/ws", &upgrade[1..]).0, 401);
    // Nothing the page was refused or given put the token in the log again.
    assert_eq!(host.daemon.stderr().matches(&token).count(), 1, "{}", host.daemon.stderr());

    // DNS rebinding: a name that now points here is still not our name.
    assert_eq!(http(port, &with_token, &[("Host", &format!("evil.example:{port}"))]).0, 421);
    assert_eq!(http(port, &with_token, &[("Host", &format!("localhost:{port}"))]).0, 303);
}

#[test]
fn a_page_beyond_loopback_needs_a_token_set_and_off_serves_none() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "").unwrap();
    let (status, _, stderr) = integration_tests::run(
        "hermes-host",
        &["serve", "--config", &config.display().to_string(), "--http", "0.0.0.0:0"],
        &[("HERMES_HOST_HTTP_TOKEN", "")],
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HERMES_HOST_HTTP") && stderr.contains("HERMES_HOST_HTTP_TOKEN"), "{stderr}");
    let host = Host::start_with("", &["--http", "off"]);
    assert!(!host.socket.with_extension("url").exists());
}

#[test]
fn a_large_message_opens_with_its_segments_closed_and_follows_edits() {
    if !require_tool("chromium") || !require_tool("python3") {
        return;
    }
    let (host, url) = page_host();
    let mut text = String::from("MSH|^~\\&|APP|FAC|||20231215120000||ORU^R01|1|P|2.5.1\rPID|1||12345||DOE^JOHN");
    for i in 1..=20_000 {
        text += &format!("\rOBX|{i}|NM|GLU^Glucose||{}|mg/dL", 80 + i % 40);
    }
    host.result("message/new", json!({"message": text}));
    let mut page = Browser::launch();
    let started = Instant::now();
    page.navigate(&url);
    page.wait_for("document.querySelector('[data-path=\"OBX[2998]\"]')", LONG);
    let shown = started.elapsed();
    // Drawn 3000 rows at a time.
    assert_eq!(page.eval("document.querySelector('[data-path=\"OBX[2999]\"]') === null"), true);
    page.click("button.show-more");
    page.wait_for("document.querySelector('[data-path=\"OBX[5998]\"]')", LONG);
    // Closed: a row a segment, not one a field.
    assert_eq!(page.eval("document.querySelector('[data-path=\"OBX[20].5\"]') === null"), true);
    page.click("[data-path=\"PID\"] .toggle");
    page.wait_for(&format!("{} === 'DOE'", value_of("PID.5.1")), LONG);
    let started = Instant::now();
    host.result("message/patch", json!({"patches": [{"path": "OBX[2000].5", "value": "123"}]}));
    page.wait_for(&raw_view_has("OBX|2000|NM|GLU^Glucose||123|"), LONG);
    let line = format!(
        "a 20 000-segment message: shown {shown:?} after navigating (drawing it: {} ms); an edit redrawn in {:?}\n",
        page.eval("document.body.dataset.drawMs"),
        started.elapsed()
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    page.screenshot("large");
}
