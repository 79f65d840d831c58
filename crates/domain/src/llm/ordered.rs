//! A JSON value written with a schema's properties in the order its `propertyOrdering`
//! lists (the keyword Gemini's structured output defines). Endpoints that turn a schema
//! into a grammar (llama.cpp) or generate structured output (OpenAI) produce properties in
//! the order they are written, and serde_json's maps are sorted by name; the order
//! matters to small models (a citation written before the text it justifies).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// The keyword naming the order of a schema object's `properties`.
pub const PROPERTY_ORDERING: &str = "propertyOrdering";

/// `value`, serialized with every `properties` object in its sibling
/// `propertyOrdering`'s order (names it does not list follow, sorted).
pub struct Ordered(pub Value);

struct Node<'a> {
    value: &'a Value,
    order: Option<&'a [Value]>,
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Node {
            value: &self.0,
            order: None,
        }
        .serialize(serializer)
    }
}

impl Serialize for Node<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.value {
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Node {
                        value: item,
                        order: None,
                    })?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let listed: Vec<&str> = self
                    .order
                    .unwrap_or_default()
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|name| map.contains_key(*name))
                    .collect();
                let rest = map
                    .keys()
                    .map(String::as_str)
                    .filter(|k| !listed.contains(k));
                let properties_order = map
                    .get(PROPERTY_ORDERING)
                    .and_then(Value::as_array)
                    .map(Vec::as_slice);
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for key in listed.iter().copied().chain(rest) {
                    let order = (key == "properties").then_some(properties_order).flatten();
                    out.serialize_entry(
                        key,
                        &Node {
                            value: &map[key],
                            order,
                        },
                    )?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn properties_follow_their_ordering_at_every_depth() {
        let schema = json!({
            "type": "object",
            "propertyOrdering": ["z", "a"],
            "properties": {
                "a": {"type": "string"},
                "m": {"type": "string"},
                "z": {"type": "object", "propertyOrdering": ["y", "b"],
                      "properties": {"b": {}, "y": {}}}
            }
        });
        let text = serde_json::to_string(&Ordered(schema.clone())).unwrap();
        assert_eq!(
            text,
            r#"{"properties":{"z":{"properties":{"y":{},"b":{}},"propertyOrdering":["y","b"],"type":"object"},"a":{"type":"string"},"m":{"type":"string"}},"propertyOrdering":["z","a"],"type":"object"}"#
        );
        // The same value when read back: only the order differs.
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), schema);
        // Without the keyword, serde_json's own order.
        let plain = json!({"properties": {"b": 1, "a": 2}});
        assert_eq!(
            serde_json::to_string(&Ordered(plain.clone())).unwrap(),
            plain.to_string()
        );
    }
}
