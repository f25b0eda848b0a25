//! `schema/get`: every extension's `schema` (from its `initialize` result),
//! merged in config order, later ones over earlier ones.

use serde_json::Value;

/// The schemas merged in the order given: later ones override earlier ones
/// property by property; `null` removes.
pub fn merged(schemas: impl Iterator<Item = Value>) -> Value {
    let mut merged = Value::Object(Default::default());
    for schema in schemas {
        merge(&mut merged, schema);
    }
    merged
}

/// Deep merge: objects property by property, `null` deletes, anything else
/// replaces; except Hermes' field lists (`"fields": [{"field": 3,
/// "component": 1, ...}]`), whose entries are matched by field and component
/// and merged property by property, an unmatched one added.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Array(base), Value::Array(over)) if is_field_list(base) && is_field_list(&over) => {
            for entry in over {
                match base.iter_mut().find(|b| same_field(b, &entry)) {
                    Some(existing) => merge(existing, entry),
                    None => base.push(entry),
                }
            }
        }
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                if value.is_null() {
                    base.remove(&key);
                } else {
                    merge(base.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// A list of Hermes schema field entries: objects, each with a `field` number.
fn is_field_list(list: &[Value]) -> bool {
    list.iter().all(|e| e.get("field").is_some_and(Value::is_u64))
}

fn same_field(a: &Value, b: &Value) -> bool {
    a.get("field") == b.get("field") && a.get("component") == b.get("component")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_merge_later_over_earlier_and_null_removes() {
        let mut merged = json!({});
        merge(&mut merged, json!({"PID": {"3": {"note": "a", "pattern": "x"}}, "OBX": {"2": {"values": ["A"]}}}));
        merge(&mut merged, json!({"PID": {"3": {"note": "b", "pattern": null}}, "OBX": {"2": {"values": ["B", "C"]}}}));
        assert_eq!(merged, json!({"PID": {"3": {"note": "b"}}, "OBX": {"2": {"values": ["B", "C"]}}}));
    }

    /// Hermes' own shape: field entries are matched by field and component.
    #[test]
    fn hermes_field_lists_merge_entry_by_entry() {
        let mut merged = json!({});
        merge(
            &mut merged,
            json!({"segments": {"PID": {"fields": [
                {"field": 3, "component": 1, "note": "MRN", "pattern": "^[0-9]{8}$"},
                {"field": 8, "values": {"M": "Male"}}
            ]}}}),
        );
        merge(
            &mut merged,
            json!({"segments": {"PID": {"fields": [
                {"field": 3, "component": 1, "pattern": null, "maxlength": 8},
                {"field": 3, "note": "whole field"}
            ]}, "OBX": {"fields": [{"field": 2, "required": true}]}}}),
        );
        assert_eq!(
            merged,
            json!({"segments": {"PID": {"fields": [
                {"field": 3, "component": 1, "note": "MRN", "maxlength": 8},
                {"field": 8, "values": {"M": "Male"}},
                {"field": 3, "note": "whole field"}
            ]}, "OBX": {"fields": [{"field": 2, "required": true}]}}})
        );
    }
}
