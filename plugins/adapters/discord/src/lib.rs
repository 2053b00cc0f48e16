//! Built-in target adapter `discord`: a Discord webhook message, `content`
//! and one embed. The automation's template, when not empty, is the embed's
//! title.

wit_bindgen::generate!({ path: "../../../wit/v0.1.0", world: "payload-template" });

use adapter_vars::Vars;
use exports::switchyard::plugin::template::{Guest, Variable};
use serde_json::json;
use switchyard::plugin::types::PluginError;

struct Discord;

impl Guest for Discord {
    fn validate(_template: String, known: Vec<String>) -> Result<Vec<String>, PluginError> {
        Ok(adapter_vars::used(&known))
    }

    fn render(template: String, variables: Vec<Variable>) -> Result<String, PluginError> {
        let v = Vars::new(
            variables
                .iter()
                .map(|x| (x.name.as_str(), x.value.as_str())),
        );
        let message = json!({
            "content": format!("{} by {}", v.text("event_type"), v.text("event_author")),
            "embeds": [{
                "title": v.headline(&template),
                "description": v.detail(),
                "fields": [
                    {"name": "project", "value": format!("{}/{}", v.text("entity_name"), v.text("project_name")), "inline": true},
                    {"name": "collection", "value": v.text("artifact_collection_name"), "inline": true},
                ],
            }],
        });
        Ok(message.to_string())
    }
}

export!(Discord);
