//! The broker's demo page as a newcomer sees it at 1280 px: the commands it
//! offers, with a 36-character session id in them, fit the page rather than
//! hiding their ends behind a scrollbar. Headless Chromium lays the page out;
//! the test reads the layout over the DevTools protocol.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use integration_tests::browser::Chromium;
use integration_tests::{Daemon, on_free_ports, require_tool};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// What the page shows in its "try it" box, and whether it overflows.
const LAYOUT: &str = r#"(() => {
  const box = document.getElementById("try");
  return JSON.stringify({
    session: document.body.dataset.sessionId || null,
    text: box.textContent,
    scrollWidth: box.scrollWidth,
    clientWidth: box.clientWidth,
    innerWidth: window.innerWidth,
  });
})()"#;

#[tokio::test]
async fn the_demo_page_shows_whole_commands_with_a_long_session_id_at_1280_px() {
    if !require_tool("chromium") {
        return;
    }
    let (broker, port) = on_free_ports(|[port]| {
        let mut broker = Daemon::start("btcp-broker", &["serve", "--port", &port.to_string()], &[]);
        broker.listening_on(([127, 0, 0, 1], port).into())?;
        Ok((broker, port))
    });
    let session = "5f0c6a1e-9b2d-4c7a-8e31-d4b2a9f07c65";
    assert_eq!(session.len(), 36);
    let chromium = Chromium::with_devtools(&format!("http://127.0.0.1:{port}/?sessionId={session}"));
    let socket = chromium.page_socket(session);
    let (mut devtools, _) = tokio_tungstenite::connect_async(&socket).await.unwrap_or_else(|e| panic!("{socket}: {e}"));

    let deadline = Instant::now() + Duration::from_secs(30);
    let mut id = 0;
    let layout = loop {
        id += 1;
        let request = json!({"id": id, "method": "Runtime.evaluate",
                             "params": {"expression": LAYOUT, "returnByValue": true}});
        devtools.send(Message::text(request.to_string())).await.unwrap();
        let reply = loop {
            let message = tokio::time::timeout(Duration::from_secs(10), devtools.next()).await;
            let text = match message {
                Ok(Some(Ok(Message::Text(text)))) => text,
                Ok(Some(Ok(_))) => continue,
                other => panic!("DevTools went away: {other:?}"),
            };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply["id"] == id {
                break reply;
            }
        };
        let layout: Value =
            reply["result"]["result"]["value"].as_str().and_then(|v| serde_json::from_str(v).ok()).unwrap_or(json!({}));
        // Connected: the page has put the session id into its commands.
        if layout["session"] == session {
            break layout;
        }
        assert!(Instant::now() < deadline, "the page did not connect within 30 s: {reply}\n{}", broker.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(layout["text"].as_str().unwrap().contains(&format!("btcp-broker call {session} click")), "{layout}");
    assert!(layout["innerWidth"].as_u64().unwrap() <= 1280, "{layout}");
    assert!(
        layout["scrollWidth"].as_u64() <= layout["clientWidth"].as_u64(),
        "the commands overflow their box at 1280 px (hidden behind a scrollbar): {layout}"
    );
}
