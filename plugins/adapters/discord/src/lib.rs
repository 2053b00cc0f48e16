//! Built-in target adapter `discord`: a Discord webhook message, `content`
//! and one embed. The automation's template, when not empty, is the embed's
//! title.

use adapter_vars::Vars;
use serde_json::{Value, json};

adapter_vars::adapter!(Discord, message);

/// The message for an event.
fn message(template: &str, v: &Vars) -> Value {
    json!({
        "content": format!("{} by {}", v.text("event_type"), v.text("event_author")),
        "embeds": [{
            "title": v.headline(template),
            "description": v.detail(),
            "fields": [
                {"name": "project", "value": format!("{}/{}", v.text("entity_name"), v.text("project_name")), "inline": true},
                {"name": "collection", "value": v.text("artifact_collection_name"), "inline": true},
            ],
        }],
    })
}
