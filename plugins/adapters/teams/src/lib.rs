//! Built-in target adapter `teams`: the chat-message card the spec shows
//! (`@type`, `@context`, `summary`, `sections` with `activityTitle`,
//! `text`, `facts` and `markdown`). The automation's template, when not
//! empty, is the summary and title.

use adapter_vars::Vars;
use serde_json::{Value, json};

adapter_vars::adapter!(Teams, message);

/// The message for an event.
fn message(template: &str, v: &Vars) -> Value {
    let headline = v.headline(template);
    let fact = |name: &str, value: String| json!({"name": name, "value": value});
    json!({
        "@type": "MessageCard",
        "@context": "http://schema.org/extensions",
        "summary": headline,
        "sections": [{
            "activityTitle": headline,
            "text": v.detail(),
            "facts": [
                fact("Event", v.text("event_type")),
                fact("By", v.text("event_author")),
                fact("Collection", v.text("artifact_collection_name")),
                fact("Version", v.text("artifact_version_string")),
                fact("Project", format!("{}/{}", v.text("entity_name"), v.text("project_name"))),
            ],
            "markdown": true,
        }],
    })
}
