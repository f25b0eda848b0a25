//! The JSON-RPC 2.0 specification's section 7 examples, and the edge cases
//! where the engine decides what the specification leaves open, each run on
//! all three framings.

use crate::common;
use common::{FRAMINGS, Framing, connect, shape};
use rpc_core::PeerConfig;
use serde_json::json;

#[tokio::test]
async fn rpc_call_with_positional_parameters() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#).await;
        assert_eq!(r, json!({"jsonrpc": "2.0", "result": 19, "id": 1}), "{framing:?}");
        let r = c.call(r#"{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}"#).await;
        assert_eq!(r, json!({"jsonrpc": "2.0", "result": -19, "id": 2}), "{framing:?}");
    }
}

#[tokio::test]
async fn rpc_call_with_named_parameters() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c
            .call(r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}"#)
            .await;
        assert_eq!(r, json!({"jsonrpc": "2.0", "result": 19, "id": 3}), "{framing:?}");
        let r = c
            .call(r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}"#)
            .await;
        assert_eq!(r, json!({"jsonrpc": "2.0", "result": 19, "id": 4}), "{framing:?}");
    }
}

#[tokio::test]
async fn notifications_are_handled_and_never_answered() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        c.send(r#"{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}"#).await;
        c.send(r#"{"jsonrpc": "2.0", "method": "foobar"}"#).await;
        c.assert_no_reply_before_marker().await;
        let seen = c.call(r#"{"jsonrpc":"2.0","method":"seen","id":9}"#).await;
        assert_eq!(seen["result"], json!([["update", [1, 2, 3, 4, 5]]]), "{framing:?}");
    }
}

#[tokio::test]
async fn rpc_call_of_non_existent_method() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc": "2.0", "method": "foobar", "id": "1"}"#).await;
        assert_eq!(r["error"]["code"], -32601, "{framing:?}");
        assert_eq!(r["id"], "1");
        assert!(r["error"]["message"].as_str().unwrap().contains("foobar"), "the message names the method");
    }
}

#[tokio::test]
async fn rpc_call_with_invalid_json() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#).await;
        assert_eq!(
            shape(&r),
            json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "..."}, "id": null}),
            "{framing:?}"
        );
    }
}

#[tokio::test]
async fn rpc_call_with_invalid_request_object() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#).await;
        assert_eq!(
            shape(&r),
            json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "..."}, "id": null}),
            "{framing:?}"
        );
    }
}

#[tokio::test]
async fn rpc_call_batch_with_invalid_json() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c
            .call(
                r#"[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]"#,
            )
            .await;
        assert_eq!(
            shape(&r),
            json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "..."}, "id": null}),
            "{framing:?}"
        );
    }
}

#[tokio::test]
async fn rpc_call_with_an_empty_array() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call("[]").await;
        assert_eq!(
            shape(&r),
            json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "..."}, "id": null}),
            "{framing:?}"
        );
    }
}

#[tokio::test]
async fn rpc_call_with_an_invalid_batch_but_not_empty() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call("[1]").await;
        let invalid = json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "..."}, "id": null});
        assert_eq!(shape(&r), json!([invalid]), "{framing:?}");
    }
}

#[tokio::test]
async fn rpc_call_with_invalid_batch() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call("[1,2,3]").await;
        let invalid = json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "..."}, "id": null});
        assert_eq!(shape(&r), json!([invalid, invalid, invalid]), "{framing:?}");
    }
}

#[tokio::test]
async fn rpc_call_batch() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c
            .call(
                r#"[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]"#,
            )
            .await;
        let expected = json!([
            {"jsonrpc": "2.0", "result": 7, "id": "1"},
            {"jsonrpc": "2.0", "result": 19, "id": "2"},
            {"jsonrpc": "2.0", "error": {"code": -32600, "message": "..."}, "id": null},
            {"jsonrpc": "2.0", "error": {"code": -32601, "message": "..."}, "id": "5"},
            {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}
        ]);
        assert_eq!(shape(&r), shape(&expected), "{framing:?}");
        let seen = c.call(r#"{"jsonrpc":"2.0","method":"seen","id":1}"#).await;
        assert_eq!(seen["result"], json!([["notify_hello", [7]]]), "the batch's notification ran");
    }
}

#[tokio::test]
async fn rpc_call_batch_all_notifications_gets_nothing_back() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        c.send(
            r#"[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]"#,
        )
        .await;
        c.assert_no_reply_before_marker().await;
    }
}

// ---- the engine's edge cases ----

#[tokio::test]
async fn every_id_form_is_echoed_exactly() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        for id in
            ["0", "-1", "1.5", "1e400", "-0", "123456789012345678901234567890", "2.50E+3", r#""abc""#, r#""""#, "null"]
        {
            c.send(&format!(r#"{{"jsonrpc":"2.0","method":"echo","params":[1],"id":{id}}}"#)).await;
            let text = c.recv_within(std::time::Duration::from_secs(5)).await.unwrap();
            assert!(text.contains(&format!(r#""id":{id}"#)), "{framing:?}: id {id} came back as {text}");
        }
    }
}

#[tokio::test]
async fn structured_and_boolean_ids_are_invalid_with_null_id() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        for id in ["{}", "[1]", "true"] {
            let r = c.call(&format!(r#"{{"jsonrpc":"2.0","method":"echo","id":{id}}}"#)).await;
            assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32600), json!(null)), "{framing:?} {id}");
        }
    }
}

#[tokio::test]
async fn wrong_version_and_bad_params_are_invalid_requests_with_the_id() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        for text in [
            r#"{"jsonrpc":"1.0","method":"echo","id":7}"#,
            r#"{"method":"echo","id":7}"#,
            r#"{"jsonrpc":"2.0","method":"echo","params":5,"id":7}"#,
            r#"{"jsonrpc":"2.0","method":"echo","params":"x","id":7}"#,
            r#"{"jsonrpc":"2.0","id":7}"#,
            r#"{"jsonrpc":"2.0","method":"echo","method":"seen","id":7}"#,
        ] {
            let r = c.call(text).await;
            assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32600), json!(7)), "{framing:?} {text}");
        }
    }
}

#[tokio::test]
async fn null_params_mean_no_params() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc":"2.0","method":"get_data","params":null,"id":1}"#).await;
        assert_eq!(r["result"], json!(["hello", 5]), "{framing:?}");
    }
}

#[tokio::test]
async fn params_of_the_wrong_shape_name_the_field() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":"x","subtrahend":1},"id":1}"#).await;
        assert_eq!(r["error"]["code"], -32602, "{framing:?}");
        assert!(r["error"]["message"].as_str().unwrap().contains("minuend"), "{r}");
        let r = c.call(r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":1},"id":2}"#).await;
        assert!(r["error"]["message"].as_str().unwrap().contains("subtrahend"), "{r}");
    }
}

#[tokio::test]
async fn daemon_error_codes_and_panics_reach_only_that_request() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc":"2.0","method":"fail","id":1}"#).await;
        assert_eq!(r["error"], json!({"code": -32042, "message": "own error"}));
        let r = c.call(r#"{"jsonrpc":"2.0","method":"panic","id":2}"#).await;
        assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32603), json!(2)), "{framing:?}");
        let r = c.call(r#"{"jsonrpc":"2.0","method":"subtract","params":[2,1],"id":3}"#).await;
        assert_eq!(r["result"], 1, "the connection lives on after a panic");
        // A handler that panics once it has waited, among the running ones.
        let r = c.call(r#"{"jsonrpc":"2.0","method":"late_panic","id":4}"#).await;
        assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32603), json!(4)), "{framing:?}");
        let r = c.call(r#"{"jsonrpc":"2.0","method":"subtract","params":[3,1],"id":5}"#).await;
        assert_eq!(r["result"], 2, "the connection lives on after a late panic");
    }
}

#[tokio::test]
async fn notification_for_unknown_method_or_bad_params_is_silent() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        c.send(r#"{"jsonrpc":"2.0","method":"nope"}"#).await;
        c.send(r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":"x"}}"#).await;
        c.send(r#"{"jsonrpc":"2.0","method":"panic"}"#).await;
        c.assert_no_reply_before_marker().await;
    }
}

#[tokio::test]
async fn batch_over_the_cap_is_one_invalid_request() {
    for framing in FRAMINGS {
        let config = PeerConfig { max_batch: 3, ..PeerConfig::default() };
        let mut c = connect(framing, config).await;
        let one = r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#;
        let r = c.call(&format!("[{one},{one},{one},{one}]")).await;
        assert_eq!(
            shape(&r),
            json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"..."}}),
            "{framing:?}"
        );
        let r = c.call(&format!("[{one}]")).await;
        assert_eq!(r[0]["result"], json!([1]));
    }
}

#[tokio::test]
async fn duplicate_ids_inside_one_batch_are_refused() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c
            .call(r#"[{"jsonrpc":"2.0","method":"echo","params":[1],"id":5},{"jsonrpc":"2.0","method":"echo","params":[2],"id":5}]"#)
            .await;
        let mut codes: Vec<String> = r
            .as_array()
            .unwrap()
            .iter()
            .map(|m| if m.get("result").is_some() { "ok".into() } else { m["error"]["code"].to_string() })
            .collect();
        codes.sort();
        assert_eq!(codes, vec!["-32600", "ok"], "{framing:?}");
    }
}

#[tokio::test]
async fn unicode_survives_every_framing() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc":"2.0","method":"echo","params":["Zoë ✓ 🦀 \u0000 \n"],"id":"é"}"#).await;
        assert_eq!(r, json!({"jsonrpc":"2.0","id":"é","result":["Zoë ✓ 🦀 \u{0} \n"]}), "{framing:?}");
    }
}

#[tokio::test]
async fn ndjson_oversized_line_is_answered_and_the_connection_goes_on() {
    let mut c = connect(Framing::Ndjson, PeerConfig::default()).await;
    let mut big = br#"{"jsonrpc":"2.0","method":"echo","params":[""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 2 * 1024 * 1024));
    big.extend_from_slice(b"\"],\"id\":1}\n");
    c.send_bytes(&big).await;
    let r = c.recv().await;
    assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32600), json!(null)));
    assert!(r["error"]["message"].as_str().unwrap().contains("too large"));
    let r = c.call(r#"{"jsonrpc":"2.0","method":"subtract","params":[5,3],"id":2}"#).await;
    assert_eq!(r["result"], 2);
}

#[tokio::test]
async fn ndjson_invalid_utf8_is_a_parse_error_and_the_next_line_works() {
    let mut c = connect(Framing::Ndjson, PeerConfig::default()).await;
    c.send_bytes(b"{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"\xff\xfe\"],\"id\":1}\n").await;
    let r = c.recv().await;
    assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32700), json!(null)));
    c.send_bytes(b"\r\n\n{\"jsonrpc\":\"2.0\",\"method\":\"subtract\",\"params\":[5,3],\"id\":2}\r\n").await;
    assert_eq!(c.recv().await["result"], 2);
    // One bad line among good ones in a single read: only it is refused.
    c.send_bytes(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"subtract\",\"params\":[9,3],\"id\":3}\n\
          {\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"\xc3\x28\"],\"id\":4}\n\
          {\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"\xc3\xa9\"],\"id\":5}\n",
    )
    .await;
    assert_eq!(c.recv().await["result"], 6);
    let r = c.recv().await;
    assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32700), json!(null)));
    assert_eq!(c.recv().await["result"], json!(["é"]));
}

/// A raw line break ends an NDJSON message wherever it is, even inside a
/// value where JSON would take it for whitespace; lines in the same read
/// before and after it are answered as they are. (The common layouts are
/// read where they lie in the read; this is what they must not read past.)
#[tokio::test]
async fn ndjson_a_raw_line_break_inside_a_message_ends_its_line() {
    let mut c = connect(Framing::Ndjson, PeerConfig::default()).await;
    c.send_bytes(
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subtract\",\"params\":[9,3]}\n\
          {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"subtract\",\"params\":[5,\n3]}\n\
          {\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"subtract\",\"params\":[7,3]}\n",
    )
    .await;
    assert_eq!(c.recv().await["result"], 6);
    for _ in 0..2 {
        let r = c.recv().await;
        assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32700), json!(null)), "{r}");
    }
    assert_eq!(c.recv().await["result"], 4);
}

#[tokio::test]
async fn content_length_resynchronises_after_garbage() {
    let mut c = connect(Framing::ContentLength, PeerConfig::default()).await;
    c.send_bytes(b"garbage without a header\r\n\r\n{{{").await;
    let r = c.call(r#"{"jsonrpc":"2.0","method":"subtract","params":[5,3],"id":2}"#).await;
    assert_eq!(r["result"], 2);
}

#[tokio::test]
async fn content_length_oversized_request_is_answered_with_its_id() {
    let mut c = connect(Framing::ContentLength, PeerConfig::default()).await;
    let body = format!(r#"{{"jsonrpc":"2.0","id":77,"method":"echo","params":["{}"]}}"#, "y".repeat(2 * 1024 * 1024));
    c.send(&body).await;
    let r = c.recv().await;
    assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32600), json!(77)));
    assert_eq!(c.call(r#"{"jsonrpc":"2.0","method":"subtract","params":[5,3],"id":2}"#).await["result"], 2);
}

#[tokio::test]
async fn websocket_binary_frame_closes_with_1003() {
    let mut c = connect(Framing::WebSocket, PeerConfig::default()).await;
    c.send_bytes(b"{}").await;
    let common::RawClient::Ws(ws) = &mut c else { unreachable!() };
    use futures_util::StreamExt;
    let msg = tokio::time::timeout(std::time::Duration::from_secs(5), ws.next()).await.unwrap().unwrap().unwrap();
    let tokio_tungstenite::tungstenite::Message::Close(Some(frame)) = msg else { panic!("{msg:?}") };
    assert_eq!(u16::from(frame.code), 1003);
}
