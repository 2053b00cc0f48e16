//! Built-in target adapter `slack`: a Slack incoming-webhook message, `text`
//! for notifications and `blocks` for the layout. The automation's template,
//! when not empty, is the headline.

wit_bindgen::generate!({ path: "../../../wit/v0.1.0", world: "payload-template" });

use adapter_vars::Vars;
use exports::switchyard::plugin::template::{Guest, Variable};
use serde_json::json;
use switchyard::plugin::types::PluginError;

struct Slack;

impl Guest for Slack {
    fn validate(_template: String, known: Vec<String>) -> Result<Vec<String>, PluginError> {
        Ok(adapter_vars::used(&known))
    }

    fn render(template: String, variables: Vec<Variable>) -> Result<String, PluginError> {
        let v = Vars::new(
            variables
                .iter()
                .map(|x| (x.name.as_str(), x.value.as_str())),
        );
        let headline = v.headline(&template);
        let message = json!({
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
        });
        Ok(message.to_string())
    }
}

export!(Slack);
