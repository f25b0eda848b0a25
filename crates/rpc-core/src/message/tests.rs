//! The parser, the scanner and the writers, against the specification.

use super::error::RpcError;
use super::id::Id;
use super::parse::{
    Invalid, Message, Outcome, Parsed, check_id_kept, check_scanner, members_by_serde, message_from, parse,
    parse_object, refused_object,
};
use super::scan::{compact, scan};
use super::write::*;
use serde_json::value::RawValue;

fn single(text: &str) -> Result<Message<'_>, Invalid> {
    match parse(text.as_bytes(), 1000) {
        Parsed::Single(m) => m,
        other => panic!("expected a single message, got {other:?}"),
    }
}

fn rejected(text: &str) -> RpcError {
    match parse(text.as_bytes(), 1000) {
        Parsed::Rejected(e) => *e,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn request_with_positional_params() {
    let Ok(Message::Request { id, method, params }) =
        single(r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#)
    else {
        panic!("not a request")
    };
    assert_eq!(id.to_string(), "1");
    assert_eq!(method, "subtract");
    assert_eq!(params.unwrap().get(), "[42,23]");
}

#[test]
fn absent_id_is_a_notification_but_null_id_is_a_request() {
    assert!(matches!(single(r#"{"jsonrpc":"2.0","method":"n"}"#), Ok(Message::Notification { .. })));
    assert!(matches!(single(r#"{"jsonrpc":"2.0","method":"n","id":null}"#), Ok(Message::Request { id: Id::Null, .. })));
}

#[test]
fn number_ids_keep_their_exact_text() {
    for text in ["-7", "1.50", "1e400", "123456789012345678901234567890", "-0", "2.0E-3"] {
        let msg = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{text}}}"#);
        let Ok(Message::Request { id, .. }) = single(&msg) else { panic!("{text}") };
        let mut out = Vec::new();
        id.write_json(&mut out);
        assert_eq!(String::from_utf8(out).unwrap(), text);
    }
}

#[test]
fn plain_integers_are_ints_and_everything_else_keeps_its_text() {
    let id = |text: &str| Id::from_raw(&RawValue::from_string(text.to_owned()).unwrap()).unwrap();
    assert_eq!(id("42"), Id::Int(42));
    assert_eq!(id("0"), Id::Int(0));
    assert!(matches!(id("18446744073709551616"), Id::Number(_)), "past u64::MAX");
    assert_eq!(id("18446744073709551615"), Id::Int(u64::MAX));
    assert_eq!(id("9999999999999999999"), Id::Int(9_999_999_999_999_999_999));
    assert!(matches!(id("-1"), Id::Number(_)));
    assert!(matches!(id("1.0"), Id::Number(_)));
    assert_ne!(id("1.0"), id("1"), "different texts are different ids");
    assert_eq!(id("7").as_u64(), Some(7));
    assert_eq!(id("7.0").as_u64(), None);
}

#[test]
fn string_ids_are_decoded_and_reencoded() {
    let Ok(Message::Request { id, .. }) = single(r#"{"jsonrpc":"2.0","method":"m","id":"a\"b\u00e9"}"#) else {
        panic!()
    };
    assert_eq!(id, Id::from("a\"bé"));
    let mut out = Vec::new();
    id.write_json(&mut out);
    assert_eq!(String::from_utf8(out).unwrap(), r#""a\"bé""#);
}

#[test]
fn object_array_and_boolean_ids_are_invalid_with_null_id() {
    for id in ["{}", "[1]", "true", "false"] {
        let msg = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
        let Err(invalid) = single(&msg) else { panic!("{id} accepted") };
        assert_eq!(invalid.id, Id::Null);
        assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
    }
}

#[test]
fn jsonrpc_must_be_exactly_2_0() {
    for v in [r#""1.0""#, "2.0", r#""2.0 ""#, "null"] {
        let msg = format!(r#"{{"jsonrpc":{v},"method":"m","id":3}}"#);
        let Err(invalid) = single(&msg) else { panic!("{v} accepted") };
        assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
        assert_eq!(invalid.id.to_string(), "3", "the readable id is kept");
    }
    let Err(invalid) = single(r#"{"method":"m","id":3}"#) else { panic!() };
    assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
    // An escaped spelling of "2.0" is still "2.0".
    assert!(single(r#"{"jsonrpc":"2\u002e0","method":"m"}"#).is_ok());
}

#[test]
fn method_must_be_a_string() {
    let Err(invalid) = single(r#"{"jsonrpc":"2.0","method":1,"params":"bar"}"#) else { panic!() };
    assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
    assert_eq!(invalid.id, Id::Null);
}

#[test]
fn params_must_be_structured_and_null_means_none() {
    for p in ["1", r#""x""#, "true"] {
        let msg = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{p},"id":1}}"#);
        assert_eq!(single(&msg).unwrap_err().error.code, RpcError::INVALID_REQUEST, "{p}");
    }
    let Ok(Message::Request { params, .. }) = single(r#"{"jsonrpc":"2.0","method":"m","params":null,"id":1}"#) else {
        panic!()
    };
    assert!(params.is_none());
}

#[test]
fn escaped_method_names_are_decoded() {
    let Ok(Message::Notification { method, .. }) = single(r#"{"jsonrpc":"2.0","method":"to\u006fls/list"}"#) else {
        panic!()
    };
    assert_eq!(method, "tools/list");
}

#[test]
fn invalid_json_is_a_parse_error_even_after_a_shape_error() {
    assert_eq!(rejected(r#"{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]"#).code, -32700);
    assert_eq!(rejected(r#"{"id":1,"id":2,"#).code, -32700);
    assert_eq!(rejected("\u{feff}").code, -32700);
}

#[test]
fn duplicate_members_are_an_invalid_request() {
    let Err(invalid) = single(r#"{"jsonrpc":"2.0","method":"a","method":"b","id":1}"#) else { panic!() };
    assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
    // The id is there once: the error carries it, and says what is wrong.
    assert_eq!(invalid.id, Id::Int(1));
    assert_eq!(invalid.error.message, r#"Invalid Request: member "method" given more than once"#);
    // An id given twice is no id to answer with.
    let Err(invalid) = single(r#"{"jsonrpc":"2.0","method":"a","id":1,"id":2}"#) else { panic!() };
    assert_eq!((invalid.id, invalid.error.code), (Id::Null, RpcError::INVALID_REQUEST));
}

#[test]
fn parse_errors_never_name_the_engine_s_own_types() {
    let Parsed::Batch(items) = parse(br#"[1,"x",{"jsonrpc":"2.0","id":"a","id":"b","method":"m"}]"#, 1000) else {
        panic!()
    };
    for item in items {
        let message = item.unwrap_err().error.message;
        assert!(!message.contains("RawMessage") && !message.contains("struct"), "{message}");
    }
}

#[test]
fn top_level_scalars_are_invalid_requests() {
    assert_eq!(rejected("1").code, -32600);
    assert_eq!(rejected(r#""x""#).code, -32600);
    assert_eq!(rejected("nul").code, -32700);
}

#[test]
fn batches_follow_the_spec() {
    assert_eq!(rejected("[]").code, -32600);
    let Parsed::Batch(items) = parse(b"[1,2,3]", 1000) else { panic!() };
    assert_eq!(items.len(), 3);
    assert!(items.iter().all(|i| i.as_ref().unwrap_err().error.code == -32600));
    assert_eq!(rejected(r#"[{"jsonrpc":"2.0","method":"sum"},{"jsonrpc":"2.0""#).code, -32700);
    assert_eq!(parse(b"[1,2,3]", 2).rejected_code(), Some(-32600));
}

#[test]
fn responses_are_recognised_with_every_outcome() {
    let Ok(Message::Response { id, outcome: Outcome::Result(r) }) = single(r#"{"jsonrpc":"2.0","result":19,"id":7}"#)
    else {
        panic!()
    };
    assert_eq!((id.as_u64(), r.get()), (Some(7), "19"));
    let Ok(Message::Response { outcome: Outcome::Error(e), .. }) =
        single(r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"x","data":[1]},"id":"a"}"#)
    else {
        panic!()
    };
    assert_eq!(e.data, Some(serde_json::json!([1])));
    assert!(matches!(
        single(r#"{"jsonrpc":"2.0","result":{},"error":{"code":1,"message":"m"},"id":1}"#),
        Ok(Message::Response { outcome: Outcome::Both(..), .. })
    ));
    assert!(matches!(
        single(r#"{"jsonrpc":"2.0","error":"bad","id":1}"#),
        Ok(Message::Response { outcome: Outcome::Malformed(_), .. })
    ));
    assert!(single(r#"{"jsonrpc":"2.0","result":1}"#).is_err());
}

#[test]
fn an_id_that_does_not_decode_is_refused_not_taken_for_a_notification() {
    // Found by the `legacy` fuzz target: a lone surrogate in a string id.
    for text in
        [r#"{"jsonrpc":"2.0","id":"sr\udb1501e","method":"m"}"#, r#"{"jsonrpc":"2.0","id":"\ud800","method":"m"}"#]
    {
        let Err(invalid) = single(text) else { panic!("{text} was accepted") };
        assert_eq!(invalid.error.code, RpcError::INVALID_REQUEST);
        check_id_kept(text);
    }
}

#[test]
fn the_scanner_reads_common_messages_and_leaves_the_rest_to_serde() {
    let fast = [
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}"#,
        " {\t\"jsonrpc\" : \"2.0\" ,\r\n\"method\":\"a/b\", \"id\": \"x-1\", \"params\": [1, {\"k\": [true, null]}] } ",
        r#"{"jsonrpc":"2.0","id":-1.5e+3,"result":{"a":"\u00e9\n"}}"#,
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}"#,
        r#"{"id":0,"jsonrpc":"2.0","method":"m","extra":{"method":1},"params":null}"#,
        r#"{"jsonrpc":"2.0","method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"é"}"#,
        r#"{}"#,
        r#"{"jsonrpc":1,"id":2}"#,
        r#"{"jsonrpc":"2.0","idx":5,"i":1,"methods":2,"method":"m","":1}"#,
        "{\"jsonrpc\":\"2.0\", \"method\" :\"m\",\n\"id\":\t7}",
        r#"{"jsonrpc":"2.0","jsonrpcx":"2.0","method":"m"}"#,
    ];
    for text in fast {
        assert!(scan(text).is_some(), "{text:?} should take the fast path");
        check_scanner(text);
    }
    let slow = [
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","params":[],"params":{},"method":"m"}"#,
        r#"{"jsonrpc":"2.0","method":"p\u0069ng"}"#,
        r#"{"jsonrpc":"2.0","\u0069d":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","\"":0,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":01,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1.,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":-,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1e,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":nul,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":nullx,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","method":"m",}"#,
        r#"{"jsonrpc":"2.0","method":"m"} x"#,
        r#"{"jsonrpc":"2.0","method":"m","params":{"a":}}"#,
        "{\"jsonrpc\":\"2.0\",\"method\":\"a\u{1}b\"}",
        r#"{"jsonrpc":"2.0","method":"m""#,
        r#"[{"jsonrpc":"2.0","method":"m"}]"#,
        r#"{"jsonrpc" "2.0"}"#,
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"m"}"#,
        r#"{"jsonrpc":"2.0","method":"m","jsonrpc":"1.0"}"#,
        r#"{"jsonrpc":"2.0",}"#,
        r#"{"jsonrpc":"2.0","#,
        "",
    ];
    for text in slow {
        assert!(scan(text).is_none(), "{text:?} should be left to serde");
    }
    // Whichever path a message takes, it reads the same.
    for text in fast.iter().chain(&slow) {
        let via_serde = match members_by_serde(text) {
            Ok(members) => message_from(members),
            Err(e) => Err(refused_object(text, e)),
        };
        let (via_parse, via_serde) = (format!("{:?}", parse_object(text)), format!("{via_serde:?}"));
        assert_eq!(via_parse, via_serde, "{text:?}");
    }
}

/// The compact layouts are read in one step, and exactly as the general
/// loop and serde read them; a near miss goes the general way and still
/// reads the same.
#[test]
fn the_compact_layouts_read_as_serde_reads_them() {
    let compact_ones = [
        r#"{"jsonrpc":"2.0","id":77,"method":"ping","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"echo","arguments":{"a":[1,"}"]}}}"#,
        r#"{"jsonrpc":"2.0","id":"a-1","method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"m","params":[]}"#,
        r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":9999999999999999999,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
        r#"{"jsonrpc":"2.0","method":"note","params":[1,2]}"#,
        r#"{"jsonrpc":"2.0","method":"note"}"#,
        r#"{"jsonrpc":"2.0","method":"m","params":{},"id":5}"#,
        r#"{"jsonrpc":"2.0","method":"m","id":"x"}"#,
        r#"{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"é"}]}}"#,
        r#"{"jsonrpc":"2.0","id":12,"result":null}"#,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"m","params":null}"#,
        // Read in one step, refused as the general way refuses it.
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":1}"#,
    ];
    let general_ones = [
        r#"{"jsonrpc":"2.0","id":01,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":-1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":"a\"b","method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"p\u0069ng"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","id":2}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{},"params":[]}"#,
        r#"{"jsonrpc":"2.0","method":"m","params":{},"id":1,"id":2}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","jsonrpc":"1.0"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m"} "#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m",}"#,
        r#"{"jsonrpc":"2.0","id":1 ,"method":"m"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"m""#,
        r#"{"jsonrpc":"2.0","id":1,"method":"#,
        r#"{"jsonrpc":"2.0","id":1"#,
        r#"{"jsonrpc":"2.0","id":"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","method":1}"#,
        r#"{"jsonrpc":"2.0","params":{},"method":"m","id":1}"#,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\u{1}b\"}",
    ];
    let whole = |text: &str| compact(text).is_some_and(|(_, len)| len == text.len());
    for text in compact_ones {
        assert!(whole(text), "{text:?} should be read in one step");
    }
    for text in general_ones {
        assert!(!whole(text), "{text:?} should go the general way");
    }
    for text in compact_ones.iter().chain(&general_ones) {
        check_scanner(text);
        let via_serde = match members_by_serde(text) {
            Ok(members) => message_from(members),
            Err(e) => Err(refused_object(text, e)),
        };
        assert_eq!(format!("{:?}", parse_object(text)), format!("{via_serde:?}"), "{text:?}");
    }
}

#[test]
fn serialised_messages_are_exact() {
    let id = Id::from(5);
    assert_eq!(response_ok(&id, b"{\"a\":1}"), br#"{"jsonrpc":"2.0","id":5,"result":{"a":1}}"#);
    let err = response_err(&Id::Null, &RpcError::new(-32600, "Invalid Request"));
    assert_eq!(err, br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}"#);
    let req = request(Some(&Id::from("x")), "ping", &()).unwrap();
    assert_eq!(req, br#"{"jsonrpc":"2.0","id":"x","method":"ping"}"#);
    let note = request(None, "event", &serde_json::json!({"a": 1})).unwrap();
    assert_eq!(note, br#"{"jsonrpc":"2.0","method":"event","params":{"a":1}}"#);
}

impl Parsed<'_> {
    fn rejected_code(&self) -> Option<i64> {
        match self {
            Parsed::Rejected(e) => Some(e.code),
            _ => None,
        }
    }
}

/// What serde's map reading sees in an object: every member, in order,
/// duplicates too.
struct Pairs(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = map.next_entry()? {
                    pairs.push(pair);
                }
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Where [`object_members`] answers, serde's map reading sees the same
/// members; it declines only objects of the rare kind.
#[test]
fn object_members_read_an_object_as_serde_does() {
    let members = |text: &str| {
        let mut seen = Vec::new();
        super::object_members(text, |key, value| seen.push((key.to_owned(), value.get().to_owned()))).map(|()| seen)
    };
    let cases = [
        r#"{"name":"echo","arguments":{}}"#,
        " { \"name\" : \"say \\\"hi\\\"\" ,\n\t\"arguments\" : {\"a\": [1, 2.5e3, {\"deep\": null}]}, \"timeout\": 250 } ",
        r#"{"name":"x","name":"y","other":[true,false,null],"timeout":null}"#,
        r#"{}"#,
        r#"{ }"#,
        r#"{"é🦀":"ü","":""}"#,
    ];
    for text in cases {
        let serde: Pairs = serde_json::from_str(text).unwrap();
        let serde: Vec<_> = serde.0.into_iter().map(|(k, v)| (k, v.get().to_owned())).collect();
        assert_eq!(members(text), Some(serde), "{text}");
    }
    // The rare kind: serde reads it instead.
    let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(65), "]".repeat(65));
    for text in [r#"{"na\u006de":"x"}"#, r#"{"a\"b":1}"#, "[1, 2]", "\"text\"", "null", deep.as_str()] {
        assert_eq!(members(text), None, "{text}");
    }
}

/// A line's message is read where it lies only when a `\n` ends it right
/// after its `}`, with none before it; it then reads as the line does on its
/// own. Everything else is left to the line's own reading.
#[test]
fn a_message_is_read_where_it_lies_only_when_its_line_ends_with_it() {
    let ping = r#"{"jsonrpc":"2.0","id":77,"method":"ping","params":{}}"#;
    let read_here = [
        format!("{ping}\n{ping}\n"),
        format!("{ping}\n"),
        "{\"jsonrpc\":\"2.0\",\"method\":\"note\",\"params\":[1,2]}\nrest".to_owned(),
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"text\":\"a\\nb\"}}\n".to_owned(),
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":1,\"message\":\"x\"}}\n".to_owned(),
        "{\"jsonrpc\":\"2.0\",\"id\":123456789012,\"method\":\"m\",\"params\":{\"a\":[1,{}]}}\n".to_owned(),
    ];
    let left_to_the_line = [
        format!("{ping}\r\n"),
        format!("{ping} \n"),
        ping.to_owned(),
        format!("\n{ping}\n"),
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"a\":\n1}}\n".to_owned(),
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":[\n]}\n".to_owned(),
        "{\"jsonrpc\":\"2.0\", \"id\":1,\"method\":\"m\"}\n".to_owned(),
        // Read in one step, but invalid: the line's reading answers it.
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":1}\n".to_owned(),
    ];
    for text in &read_here {
        let (_, len) =
            super::parse::parse_leading(text).unwrap_or_else(|| panic!("{text:?} should be read where it lies"));
        assert_eq!(len, text.find('\n').unwrap(), "{text:?}");
        super::parse::check_leading(text);
    }
    for text in &left_to_the_line {
        assert!(super::parse::parse_leading(text).is_none(), "{text:?} should be left to the line's reading");
    }
}
