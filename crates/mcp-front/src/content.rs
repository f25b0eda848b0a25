//! Daemon JSON to MCP shapes: tools, tool results, resource contents.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};

/// A tool from a fixed table: name, description, and its input schema.
pub fn tool(name: &'static str, description: &'static str, input_schema: Value) -> Tool {
    let schema = match input_schema {
        Value::Object(map) => map,
        _ => JsonObject::from_iter([("type".to_owned(), json!("object"))]),
    };
    let mut tool = Tool::default();
    tool.name = name.into();
    tool.description = Some(description.into());
    tool.input_schema = Arc::new(schema);
    tool
}

/// A tool as a daemon lists it (`{name, description?, inputSchema?}`, the
/// shape Supex and BTCP share with MCP). `None` for an entry without a
/// usable name; a missing or non-object schema becomes `{"type": "object"}`
/// (MCP requires one).
pub fn tool_from_json(entry: &Value) -> Option<Tool> {
    let name = entry.get("name")?.as_str().filter(|n| !n.is_empty())?;
    let mut tool = Tool::default();
    tool.name = name.to_owned().into();
    tool.description = entry.get("description").and_then(Value::as_str).map(|d| d.to_owned().into());
    tool.title = entry.get("title").and_then(Value::as_str).map(str::to_owned);
    let mut schema = match entry.get("inputSchema") {
        Some(Value::Object(map)) => map.clone(),
        _ => JsonObject::new(),
    };
    if !schema.contains_key("type") {
        schema.insert("type".into(), json!("object"));
    }
    tool.input_schema = Arc::new(schema);
    Some(tool)
}

/// A successful result: the value as text (a string as it is, anything else
/// as pretty JSON, which is what a model reads best) and, when it is an
/// object, as `structuredContent` for clients that use it.
pub fn success(value: Value) -> CallToolResult {
    let text = match &value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    };
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    if value.is_object() {
        result.structured_content = Some(value);
    }
    result
}

/// A result that is already MCP-shaped (`{content, isError?,
/// structuredContent?}`, what BTCP browsers answer) passed on as it is;
/// anything else is shown as [`success`] would.
pub fn passed_on(result: Value) -> CallToolResult {
    match serde_json::from_value::<CallToolResult>(result.clone()) {
        Ok(mut shaped) => {
            // The browser speaks an era without `resultType`; the client's may require it.
            shaped.result_type = CallToolResult::default().result_type;
            shaped
        }
        Err(_) => success(result),
    }
}

/// A successful result written for reading (a message, log lines) rather
/// than as JSON: each text its own content block, and the whole value as
/// `structuredContent` for clients that use it.
pub fn success_text(texts: impl IntoIterator<Item = String>, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(texts.into_iter().map(ContentBlock::text).collect());
    if structured.is_object() {
        result.structured_content = Some(structured);
    }
    result
}

/// A failed call the model should see: `isError: true` with the message,
/// and the daemon's error data (a Ruby backtrace, the denied path) below it.
pub fn failure(message: impl Into<String>, data: Option<&Value>) -> CallToolResult {
    let mut text = message.into();
    if let Some(data) = data.filter(|d| !d.is_null()) {
        text.push('\n');
        text.push_str(&serde_json::to_string_pretty(data).unwrap_or_else(|_| data.to_string()));
    }
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// One text `ResourceContents` object.
pub fn resource_text(uri: &str, mime_type: &str, text: String) -> Value {
    json!({"uri": uri, "mimeType": mime_type, "text": text})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_tool_keeps_its_schema_and_gets_a_type_when_it_has_none() {
        let t = tool_from_json(&json!({"name": "eval_ruby", "description": "d",
            "inputSchema": {"type": "object", "properties": {"code": {"type": "string"}}}}))
        .unwrap();
        assert_eq!(t.input_schema["properties"]["code"]["type"], "string");
        let bare = tool_from_json(&json!({"name": "x"})).unwrap();
        assert_eq!(bare.input_schema["type"], "object");
        assert!(tool_from_json(&json!({"name": ""})).is_none());
        assert!(tool_from_json(&json!({"description": "no name"})).is_none());
    }

    #[test]
    fn mcp_shaped_results_pass_on_with_a_result_type() {
        let r = passed_on(json!({"content": [{"type": "text", "text": "hi"}], "isError": true}));
        assert_eq!(r.is_error, Some(true));
        assert!(r.result_type.is_some(), "2026-07-28 clients require resultType");
        let other = passed_on(json!({"answer": 42}));
        assert_eq!(other.structured_content, Some(json!({"answer": 42})));
    }

    #[test]
    fn objects_are_structured_and_strings_are_plain_text() {
        let r = success(json!({"result": "42"}));
        assert_eq!(r.structured_content, Some(json!({"result": "42"})));
        assert_eq!(r.is_error, Some(false));
        let s = success(json!("plain"));
        assert!(s.structured_content.is_none());
        assert_eq!(serde_json::to_value(&s.content[0]).unwrap()["text"], "plain");
        let t = success_text(["MSH|^~\\&".to_owned(), "not saved".to_owned()], json!({"hasFile": false}));
        assert_eq!(t.content.len(), 2);
        assert_eq!(serde_json::to_value(&t.content[1]).unwrap()["text"], "not saved");
        assert_eq!(t.structured_content, Some(json!({"hasFile": false})));
        let f = failure("Ruby error: boom", Some(&json!({"backtrace": ["x"]})));
        assert_eq!(f.is_error, Some(true));
        assert!(serde_json::to_value(&f.content[0]).unwrap()["text"].as_str().unwrap().contains("backtrace"));
    }
}
