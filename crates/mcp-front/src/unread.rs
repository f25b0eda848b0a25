//! The answer to a request for a method MCP defines whose params do not fit
//! it. rmcp reads such a request as a custom one (its typed variant failed),
//! and would answer -32601 "method not found", which sends a client looking
//! for a method that exists; this says which param is wrong (-32602).

use rmcp::model::{
    CallToolRequestParams, ErrorCode, PaginatedRequestParams, ReadResourceRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::McpError;

/// -32602 naming what is wrong with `params` when `method` is one rmcp types;
/// else -32601 as rmcp answers an unknown method.
pub(crate) fn unread_request(method: &str, params: Option<Value>) -> McpError {
    let why = match method {
        "tools/call" => why_not::<CallToolRequestParams>(params),
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
            why_not::<Option<PaginatedRequestParams>>(params)
        }
        "resources/read" => why_not::<ReadResourceRequestParams>(params),
        "resources/subscribe" => why_not::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => why_not::<UnsubscribeRequestParams>(params),
        _ => return McpError::new(ErrorCode::METHOD_NOT_FOUND, method.to_owned(), None),
    };
    McpError::invalid_params(format!("invalid params for {method}: {why}"), None)
}

/// Why `params` are not a `T`, with the path to the offending field.
fn why_not<T: DeserializeOwned>(params: Option<Value>) -> String {
    let Some(params) = params else {
        return "params are required".to_owned();
    };
    if !params.is_object() {
        return format!("params must be an object, not {}", kind(&params));
    }
    match serde_path_to_error::deserialize::<_, T>(params) {
        Err(e) => e.to_string(),
        // rmcp refused them for a reason its param type alone does not show.
        Ok(_) => "they do not fit the method".to_owned(),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(method: &str, params: Option<Value>) -> (i32, String) {
        let e = unread_request(method, params);
        (e.code.0, e.message.into_owned())
    }

    #[test]
    fn a_tools_call_without_a_good_name_or_arguments_is_invalid_params() {
        let (code, text) = message("tools/call", Some(json!({})));
        assert_eq!((code, text.as_str()), (-32602, "invalid params for tools/call: missing field `name`"));
        let (code, text) = message("tools/call", Some(json!({"name": 5})));
        assert_eq!(code, -32602);
        assert!(text.contains("name: invalid type: integer `5`, expected a string"), "{text}");
        let (_, text) = message("tools/call", Some(json!({"name": "x", "arguments": [1]})));
        assert!(text.contains("arguments: invalid type: sequence"), "{text}");
        let (_, text) = message("tools/call", None);
        assert!(text.ends_with("params are required"), "{text}");
    }

    #[test]
    fn an_unknown_method_is_still_method_not_found() {
        assert_eq!(message("nope/x", Some(json!({}))).0, -32601);
    }
}
