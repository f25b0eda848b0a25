//! `/mcp` answering what it cannot take as JSON-RPC errors, spoken to by
//! hand over raw HTTP (an SDK client never sends these).

use serde_json::{Value, json};

use super::support::{Broker, HttpResponse, http};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");

/// An MCP session on `/mcp?sessionId=…` opened with `initialize` (the
/// 2025 era, so the server keeps the session by its header).
struct RawMcp {
    port: u16,
    path: String,
    session: String,
}

impl RawMcp {
    fn open(broker: &Broker, session: &str) -> RawMcp {
        let path = format!("/mcp?sessionId={session}");
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
        let opened = http(broker.port, "POST", &path, &[JSON, ACCEPT], init.to_string().as_bytes());
        assert_eq!(opened.status, 200, "{}", opened.body);
        let session = opened.header("mcp-session-id").expect("a session id").to_owned();
        let mcp = RawMcp { port: broker.port, path, session };
        let initialized = mcp.post(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(initialized.status, 202, "{}", initialized.body);
        mcp
    }

    fn post(&self, body: &[u8]) -> HttpResponse {
        self.post_as("application/json", body)
    }

    fn post_as(&self, content_type: &str, body: &[u8]) -> HttpResponse {
        let headers = [
            ("Content-Type", content_type),
            ACCEPT,
            ("Mcp-Session-Id", self.session.as_str()),
            ("Mcp-Protocol-Version", "2025-06-18"),
        ];
        http(self.port, "POST", &self.path, &headers, body)
    }

    /// The JSON-RPC reply to request `id`, from a JSON body or an SSE stream.
    fn reply(&self, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = self.post(request.to_string().as_bytes());
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == id)
            .unwrap_or_else(|| panic!("no reply to {id} in {}", answer.body))
    }
}

/// A body that is not JSON is a JSON-RPC parse error (HTTP 400, as the MCP
/// SDKs' servers answer and their clients read); 415 stays for a body that
/// is not declared JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_answers_a_body_that_is_not_json_with_a_parse_error() {
    let broker = Broker::start(&[]);
    let mcp = RawMcp::open(&broker, "mcp-parse");

    let garbage = mcp.post(b"not json");
    assert_eq!(garbage.status, 400, "{}", garbage.body);
    assert!(garbage.header("content-type").is_some_and(|t| t.starts_with("application/json")), "{:?}", garbage.headers);
    let error = garbage.json();
    assert_eq!(error["jsonrpc"], "2.0", "{error}");
    assert_eq!(error["id"], Value::Null, "{error}");
    assert_eq!(error["error"]["code"], -32700, "{error}");

    // JSON, but no JSON-RPC message: invalid request, its id kept.
    let odd = mcp.post(br#"{"jsonrpc":"2.0","id":7}"#);
    assert_eq!(odd.status, 400, "{}", odd.body);
    assert_eq!(odd.json()["error"]["code"], -32600, "{}", odd.body);
    assert_eq!(odd.json()["id"], 7, "{}", odd.body);
    // A known method with params that are no object: invalid params.
    let listed = mcp.post(br#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":[1]}"#);
    assert_eq!(listed.status, 400, "{}", listed.body);
    assert_eq!(listed.json()["error"]["code"], -32602, "{}", listed.body);

    let wrong_type = mcp.post_as("text/plain", br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#);
    assert_eq!(wrong_type.status, 415, "{}", wrong_type.body);

    // The session is none the worse.
    assert_eq!(mcp.reply(10, "ping", json!({}))["result"], json!({}));
}

/// `tools/call` whose params do not fit is -32602 saying what is wrong,
/// not -32601 (the method exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_tools_call_with_bad_params_is_invalid_params() {
    let broker = Broker::start(&[]);
    let mcp = RawMcp::open(&broker, "mcp-params");
    let cases = [
        (json!({}), "missing field `name`"),
        (json!({"name": 5}), "name: invalid type"),
        (json!({"name": "echo", "arguments": [1]}), "arguments: invalid type"),
    ];
    for (id, (params, why)) in (1..).zip(cases) {
        let answer = mcp.reply(id, "tools/call", params.clone());
        let error = &answer["error"];
        assert_eq!(error["code"], -32602, "{params}: {answer}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains("tools/call") && message.contains(why), "{params}: {answer}");
    }
    let unknown = mcp.reply(9, "tools/nope", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
}
