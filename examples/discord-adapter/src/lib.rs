//! An example third-party `payload-template` plugin: it ignores the template
//! text's structure and builds a Discord webhook message
//! (`{"content", "embeds": [...]}`) from the event's variables. The template,
//! if not empty, is used as the message title.
//!
//! Build: `cargo build --release` (see the README), then load the `.wasm`
//! with a manifest (`kind = "payload-template"`) or the upload API.

wit_bindgen::generate!({ path: "wit", world: "payload-template" });

use exports::switchyard::plugin::template::{Guest, Variable};
use serde_json::{Value, json};
use switchyard::plugin::types::PluginError;

/// Variables the message uses.
const USED: &[&str] = &[
    "event_type",
    "event_author",
    "artifact_version_string",
    "project_name",
    "entity_name",
];

struct DiscordAdapter;

impl Guest for DiscordAdapter {
    fn validate(_template: String, known: Vec<String>) -> Result<Vec<String>, PluginError> {
        Ok(USED
            .iter()
            .filter(|u| known.iter().any(|k| k == *u))
            .map(|u| u.to_string())
            .collect())
    }

    fn render(template: String, variables: Vec<Variable>) -> Result<String, PluginError> {
        let get = |name: &str| -> String {
            variables
                .iter()
                .find(|v| v.name == name)
                .and_then(|v| serde_json::from_str::<Value>(&v.value).ok())
                .map(|v| match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .unwrap_or_default()
        };
        let title = if template.trim().is_empty() {
            "Switchyard automation".to_string()
        } else {
            template
        };
        let message = json!({
            "content": format!("{} by {}", get("event_type"), get("event_author")),
            "embeds": [{
                "title": title,
                "description": get("artifact_version_string"),
                "fields": [
                    {"name": "project", "value": get("project_name"), "inline": true},
                    {"name": "entity", "value": get("entity_name"), "inline": true},
                ],
            }],
        });
        Ok(message.to_string())
    }
}

export!(DiscordAdapter);
