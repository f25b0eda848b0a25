//! HL7 text the host refuses, through its control socket and an extension's
//! `editor/setMessage`: the error says what is wrong with which segment.

use integration_tests::require_tool;
use serde_json::json;

use crate::support::{ADT, Host, py_extension};

const BARE_PID: &str = "segment 2 (PID) has no field separator after its name; \
                        a segment with no fields is written PID|";

/// A segment name alone on its line (`PID`, every field left out) is refused
/// -32004 naming the segment and how to write it, not "does not read back
/// the same (at byte 10)"; the message held stays, and `PID|` is accepted.
#[test]
fn a_segment_name_alone_is_refused_naming_it_and_how_to_write_it() {
    let host = Host::start("");
    host.result("message/set", json!({"message": ADT}));
    for text in ["MSH|^~\\&|A\rPID\rPV1|1", "MSH|^~\\&|A\nPID\n", "MSH|^~\\&|A\r\nPID"] {
        let refused = host.call("message/set", json!({"message": text, "format": "hl7"}));
        assert_eq!(refused["error"]["code"], -32004, "{text:?}: {refused}");
        assert_eq!(refused["error"]["message"], format!("invalid message: {BARE_PID}"), "{text:?}");
    }
    let blank = host.call("message/set", json!({"message": "MSH|^~\\&|A\rPID|1\r\rPV1|1"}));
    let why = blank["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("segment 3 is empty"), "{blank}");
    assert_eq!(host.result("message/get", json!({}))["message"], ADT, "the message held stays");
    host.result("message/set", json!({"message": "MSH|^~\\&|A\rPID|\rPV1|1"}));
    assert_eq!(host.result("message/get", json!({}))["message"], "MSH|^~\\&|A\rPID|\rPV1|1");
}

/// The same through an extension's `editor/setMessage`.
#[test]
fn an_extension_setting_a_segment_name_alone_is_told_what_is_wrong() {
    if !require_tool("python3") {
        return;
    }
    let host = Host::start(&py_extension("py", &[("EXT_CALL_FILE", "call.json")]));
    host.wait_state("py", "running", crate::LONG);
    let refused = host.ext_call("py", "editor/setMessage", json!({"message": "MSH|^~\\&|A\rPID", "format": "hl7"}));
    assert_eq!(refused["error"]["code"], -32004, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains(BARE_PID), "{refused}");
}
