//! `method_now` handlers, which the read loop runs inline (no future, no
//! per-call context): every JSON-RPC rule still holds for them, on all three
//! framings, and a pipelined burst is answered whole and in order.

use crate::common;
use common::{FRAMINGS, connect};
use rpc_core::PeerConfig;
use serde_json::json;

#[tokio::test]
async fn inline_handlers_answer_fail_and_refuse_params_like_async_ones() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc":"2.0","method":"now_subtract","params":[42,23],"id":1}"#).await;
        assert_eq!(r, json!({"jsonrpc":"2.0","id":1,"result":19}), "{framing:?}");
        let r = c.call(r#"{"jsonrpc":"2.0","method":"now_subtract","params":{"minuend":1},"id":"b"}"#).await;
        assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (json!("b"), json!(-32602)), "{framing:?}");
        let r = c.call(r#"{"jsonrpc":"2.0","method":"now_fail","id":2}"#).await;
        assert_eq!(r, json!({"jsonrpc":"2.0","id":2,"error":{"code":-32043,"message":"now error"}}), "{framing:?}");
        let r = c.call(r#"{"jsonrpc":"2.0","method":"now_later","params":[20],"id":3}"#).await;
        assert_eq!(r, json!({"jsonrpc":"2.0","id":3,"result":20}), "{framing:?}");
    }
}

#[tokio::test]
async fn an_inline_handler_that_panics_fails_only_its_request() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        let r = c.call(r#"{"jsonrpc":"2.0","method":"now_panic","id":7}"#).await;
        assert_eq!((r["id"].clone(), r["error"]["code"].clone()), (json!(7), json!(-32603)), "{framing:?}");
        let r = c.call(r#"{"jsonrpc":"2.0","method":"now_subtract","params":[2,1],"id":8}"#).await;
        assert_eq!(r["result"], 1, "{framing:?}: the connection goes on");
    }
}

#[tokio::test]
async fn inline_notifications_run_unanswered_and_batches_answer_inline_handlers_too() {
    for framing in FRAMINGS {
        let mut c = connect(framing, PeerConfig::default()).await;
        c.send(r#"{"jsonrpc":"2.0","method":"now_note","params":[1]}"#).await;
        c.assert_no_reply_before_marker().await;
        let seen = c.call(r#"{"jsonrpc":"2.0","method":"seen","id":9}"#).await;
        assert_eq!(seen["result"], json!([["now_note", [1]]]), "{framing:?}");
        let r = c
            .call(
                r#"[{"jsonrpc":"2.0","method":"now_subtract","params":[5,1],"id":"x"},
                    {"jsonrpc":"2.0","method":"subtract","params":[5,2],"id":"y"},
                    {"jsonrpc":"2.0","method":"now_note","params":[2]}]"#,
            )
            .await;
        let mut results: Vec<_> =
            r.as_array().unwrap().iter().map(|r| (r["id"].clone(), r["result"].clone())).collect();
        results.sort_by_key(|(id, _)| id.to_string());
        assert_eq!(results, [(json!("x"), json!(4)), (json!("y"), json!(3))], "{framing:?}");
    }
}

#[tokio::test]
async fn a_pipelined_burst_of_inline_calls_over_tcp_is_answered_whole_and_in_order() {
    let mut c = connect(common::Framing::Ndjson, PeerConfig::default()).await;
    let burst: String = (0..500)
        .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"method\":\"now_subtract\",\"params\":[{i},1],\"id\":{i}}}\n"))
        .collect();
    c.send_bytes(burst.as_bytes()).await;
    for i in 0..500 {
        assert_eq!(c.recv().await, json!({"jsonrpc":"2.0","id":i,"result":i - 1}));
    }
}
