//! The event catalog: every event type, where automations on it live, the
//! variables it fills, and the JSON Schema of its default payload (what an
//! automation with no template sends), for `GET /v1/event-types` and the
//! OpenAPI document's `webhooks`. Written from the variables' table, so
//! it cannot drift from what is sent.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::variables::{self, VARIABLES};
use crate::model::{EventType, Scope};

/// One event type, as the catalog shows it.
#[derive(Debug, Serialize)]
pub struct EventTypeInfo {
    /// Its name.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// What it means.
    pub description: &'static str,
    /// Where automations on it live.
    pub scopes: &'static [&'static str],
    /// The variables it fills; the others render empty.
    pub fields: Vec<&'static str>,
    /// Every variable a template may use (besides the webhook's secrets).
    pub variables: Vec<&'static str>,
    /// A default payload it could send.
    pub example: Value,
    /// The JSON Schema of its default payload.
    pub schema: Value,
}

/// Every event type.
pub fn all() -> Vec<EventTypeInfo> {
    EventType::ALL.into_iter().map(describe).collect()
}

/// One event type.
pub fn describe(event_type: EventType) -> EventTypeInfo {
    EventTypeInfo {
        event_type,
        description: event_type.description(),
        scopes: event_type.scopes(),
        fields: VARIABLES
            .iter()
            .filter(|v| (v.applies)(event_type))
            .map(|v| v.name)
            .collect(),
        variables: VARIABLES.iter().map(|v| v.name).collect(),
        example: example(event_type),
        schema: schema(event_type),
    }
}

/// The default payload of a sample event of `event_type`.
fn example(event_type: EventType) -> Value {
    let scope = match event_type.is_operational() {
        true => Scope::Team {
            team: "acme".into(),
        },
        false => Scope::Project {
            team: "acme".into(),
            project: "vision".into(),
        },
    };
    let sample = variables::sample(&scope, event_type, "ana");
    Value::Object(sample.into_iter().collect())
}

/// The JSON Schema of `event_type`'s default payload: every variable, those
/// it does not fill empty.
pub fn schema(event_type: EventType) -> Value {
    let mut properties = Map::new();
    for v in VARIABLES {
        let property = match (v.applies)(event_type) {
            true if v.name == "event_type" => json!({"const": event_type.as_str()}),
            true => v.kind.schema(),
            false => json!({"const": v.kind.empty()}),
        };
        properties.insert(v.name.to_string(), property);
    }
    let required: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": event_type.as_str(),
        "description": event_type.description(),
        "type": "object",
        "required": required,
        "additionalProperties": false,
        "properties": properties,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_example_has_every_variable_and_fills_its_fields() {
        for info in all() {
            let example = info.example.as_object().unwrap();
            assert_eq!(example.len(), VARIABLES.len(), "{}", info.event_type);
            for field in &info.fields {
                assert_ne!(example[*field], json!(""), "{} {field}", info.event_type);
            }
            let required = info.schema["required"].as_array().unwrap();
            assert_eq!(required.len(), VARIABLES.len());
        }
        let tag = describe(EventType::AddArtifactTag);
        assert!(tag.fields.contains(&"tag") && !tag.fields.contains(&"run_id"));
        assert_eq!(tag.schema["properties"]["run_id"], json!({"const": ""}));
        assert_eq!(tag.schema["properties"]["tag"], json!({"type": "string"}));
    }
}
