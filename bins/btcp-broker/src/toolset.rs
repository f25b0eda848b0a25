//! The tools a browser registered: validated once, kept serialised.
//!
//! Agents ask for the list far more often than browsers change it, so the list
//! is stored as the JSON array it is sent as, plus the set of names that
//! `tools/call` checks before bothering the browser.

use std::collections::HashMap;
use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

#[derive(Debug)]
pub struct ToolSet {
    names: HashSet<Box<str>>,
    json: Box<RawValue>,
    /// What the list holds in memory (its JSON and its names), for the budget.
    bytes: usize,
}

impl ToolSet {
    pub fn empty() -> ToolSet {
        ToolSet { names: HashSet::new(), json: RawValue::from_string("[]".into()).expect("[] is JSON"), bytes: 0 }
    }

    /// Checks a `tools/register` list: at most `max` tools, each an object with
    /// a unique non-empty string `name`, an optional string `description` and
    /// an object `inputSchema`. Every problem is reported, not just the first.
    /// Other members (annotations and the like) are kept as they are.
    pub fn validate(tools: Vec<Value>, max: usize) -> Result<ToolSet, Vec<String>> {
        let mut problems = Vec::new();
        if tools.len() > max {
            problems.push(format!("too many tools: {} (at most {max} per session)", tools.len()));
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, tool) in tools.iter().enumerate() {
            let Some(object) = tool.as_object() else {
                problems.push(format!("tools[{i}]: must be an object"));
                continue;
            };
            match object.get("name").and_then(Value::as_str) {
                Some(name) if !name.trim().is_empty() => {
                    if let Some(first) = seen.insert(name, i) {
                        problems.push(format!("tools[{i}].name: duplicate name {name:?} (also tools[{first}])"));
                    }
                }
                _ => problems.push(format!("tools[{i}].name: must be a non-empty string")),
            }
            if object.get("description").is_some_and(|d| !d.is_string() && !d.is_null()) {
                problems.push(format!("tools[{i}].description: must be a string"));
            }
            if !object.get("inputSchema").is_some_and(Value::is_object) {
                problems.push(format!("tools[{i}].inputSchema: must be an object (a JSON Schema)"));
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let names: HashSet<Box<str>> = seen.keys().map(|n| Box::from(*n)).collect();
        let json = serde_json::value::to_raw_value(&tools).map_err(|e| vec![e.to_string()])?;
        let bytes = json.get().len() + names.iter().map(|n| n.len()).sum::<usize>();
        Ok(ToolSet { names, json, bytes })
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The list as the JSON array agents receive.
    pub fn json(&self) -> &RawValue {
        &self.json
    }
}

impl Serialize for ToolSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Value {
        json!({"name": name, "description": "d", "inputSchema": {"type": "object"}})
    }

    #[test]
    fn a_valid_list_keeps_every_member_and_knows_its_names() {
        let mut with_extra = tool("b");
        with_extra["annotations"] = json!({"readOnlyHint": true});
        let set = ToolSet::validate(vec![tool("a"), with_extra.clone()], 10).unwrap();
        assert_eq!(set.len(), 2);
        assert!(set.contains("a") && set.contains("b") && !set.contains("c"));
        let back: Value = serde_json::from_str(set.json().get()).unwrap();
        assert_eq!(back, json!([tool("a"), with_extra]));
    }

    #[test]
    fn every_problem_is_listed() {
        let problems = ToolSet::validate(
            vec![
                tool("a"),
                tool("a"),
                json!({"name": "", "inputSchema": {}}),
                json!({"name": "x", "inputSchema": "object"}),
                json!({"name": "y", "description": 3, "inputSchema": {}}),
                json!(7),
            ],
            3,
        )
        .unwrap_err();
        let text = problems.join("\n");
        for needle in [
            "too many tools: 6",
            "tools[1].name: duplicate name \"a\" (also tools[0])",
            "tools[2].name: must be a non-empty string",
            "tools[3].inputSchema: must be an object",
            "tools[4].description: must be a string",
            "tools[5]: must be an object",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
    }
}
