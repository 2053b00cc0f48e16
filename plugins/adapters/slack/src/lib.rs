//! Built-in target adapter `slack`: a Slack incoming-webhook message, `text`
//! for notifications and `blocks` for the layout. The automation's template,
//! when not empty, is the headline.

use adapter_vars::Vars;
use serde_json::{Value, json};

adapter_vars::adapter!(Slack, message);

/// The message for an event.
fn message(template: &str, v: &Vars) -> Value {
    let headline = v.headline(template);
    json!({
        "text": format!("{headline}: {}", v.detail()),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": headline}},
            {"type": "section", "fields": [
                {"type": "mrkdwn", "text": format!("*Event*\n{}", v.text("event_type"))},
                {"type": "mrkdwn", "text": format!("*By*\n{}", v.text("event_author"))},
                {"type": "mrkdwn", "text": format!("*Version*\n{}", v.text("artifact_version_string"))},
                {"type": "mrkdwn", "text": format!("*Project*\n{}/{}", v.text("entity_name"), v.text("project_name"))},
            ]},
        ],
    })
}
