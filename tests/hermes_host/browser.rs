//! Headless Chromium driven through the DevTools protocol (a WebSocket, one
//! JSON message a frame), for the editor page's tests: navigate, evaluate,
//! click with the mouse, type with the keyboard, wait for the DOM, take
//! screenshots. Chromium itself is the tests' shared one
//! (`integration_tests::browser`: its own profile and temporary directory,
//! its own process group, killed with all its helpers when dropped).
//!
//! Waiting is always for a state the page shows (the DOM polled), never a
//! sleep: the machine's load changes how long things take, not whether.

use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use integration_tests::bin_path;
use integration_tests::browser::Chromium;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message, WebSocket, stream::MaybeTlsStream};

pub const WIDTH: u32 = 1280;
pub const HEIGHT: u32 = 800;

pub struct Browser {
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
    /// Dropped last: its process group killed, its profile removed.
    _chromium: Chromium,
}

impl Browser {
    /// Starts Chromium on `about:blank` and connects to its page.
    pub fn launch() -> Browser {
        let chromium = Chromium::with_devtools("about:blank");
        let page = chromium.page_socket("about:blank");
        let (ws, _) = tungstenite::connect(page.as_str()).unwrap_or_else(|e| panic!("{page}: {e}"));
        let mut browser = Browser { ws, next: 1, _chromium: chromium };
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": false}),
        );
        browser
    }

    /// Sends a DevTools command and returns its result (events are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let text = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(text)).expect("devtools socket");
        loop {
            let message = self.ws.read().expect("devtools socket");
            let Message::Text(text) = message else { continue };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply["id"] == id {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }

    /// The value of a JavaScript expression (promises awaited); a thrown error fails the test.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}));
        assert!(result.get("exceptionDetails").is_none(), "{expression}: {result}");
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it is truthy; returns its value.
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.eval(&format!("(() => {{ try {{ return {expression}; }} catch {{ return null; }} }})()"));
            let truthy = !matches!(&value, Value::Null | Value::Bool(false)) && value != json!("") && value != json!(0);
            if truthy {
                return value;
            }
            if Instant::now() > deadline {
                // What is on top (a dialog, a window), else the start of the page.
                let body = self.eval(
                    "(document.querySelector('.backdrop, .window, #toasts:not(:empty)') || document.body)?.innerText.slice(0, 3000)",
                );
                panic!("not within {timeout:?}: {expression}\nthe page shows:\n{}", body.as_str().unwrap_or(""));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Clicks the middle of the element `selector` finds, with the mouse.
    pub fn click(&mut self, selector: &str) {
        let quoted = serde_json::to_string(selector).unwrap();
        let at = self.wait_for(
            &format!(
                "(() => {{ const el = document.querySelector({quoted}); if (!el) return null; \
                 el.scrollIntoView({{block: 'center'}}); const r = el.getBoundingClientRect(); \
                 return r.width > 0 ? [r.x + r.width / 2, r.y + r.height / 2] : null; }})()"
            ),
            Duration::from_secs(20),
        );
        let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Types `text` into whatever has the focus.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text}));
    }

    /// Presses a key: `Enter`, `Escape`, `ArrowDown`, ... (`ctrl` held or not).
    pub fn press(&mut self, key: &str, ctrl: bool) {
        let (code, keycode, text) = match key {
            "Enter" => ("Enter", 13, Some("\r")),
            "Escape" => ("Escape", 27, None),
            "ArrowDown" => ("ArrowDown", 40, None),
            "ArrowUp" => ("ArrowUp", 38, None),
            "ArrowLeft" => ("ArrowLeft", 37, None),
            "ArrowRight" => ("ArrowRight", 39, None),
            "s" => ("KeyS", 83, if ctrl { None } else { Some("s") }),
            other => panic!("no key {other} in the driver"),
        };
        let modifiers = if ctrl { 2 } else { 0 };
        let mut down = json!({"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": keycode,
            "nativeVirtualKeyCode": keycode, "modifiers": modifiers});
        if let Some(text) = text {
            down["text"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down);
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": keycode,
                   "nativeVirtualKeyCode": keycode, "modifiers": modifiers}),
        );
    }

    /// A PNG of the page at 1280×800, kept as `target/screenshots/hermes-web/<name>.png`.
    pub fn screenshot(&mut self, name: &str) -> PathBuf {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = decode_base64(shot["data"].as_str().unwrap());
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }
}

/// `target/screenshots/hermes-web/`, beside the binaries under test.
pub fn screenshot_dir() -> PathBuf {
    let profile = bin_path("hermes-host").parent().unwrap().to_owned();
    profile.parent().unwrap().join("screenshots/hermes-web")
}

/// Standard base64, as DevTools sends screenshots.
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &c)| n | (u32::from(value(c)) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

#[test]
fn base64_decodes_as_devtools_sends_it() {
    assert_eq!(decode_base64("aGVybWVz"), b"hermes");
    assert_eq!(decode_base64("aGVybQ=="), b"herm");
    assert_eq!(decode_base64("aGVybWU="), b"herme");
}
