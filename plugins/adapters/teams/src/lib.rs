//! Built-in target adapter `teams`: the chat-message card the spec shows
//! (`@type`, `@context`, `summary`, `sections` with `activityTitle`,
//! `text`, `facts` and `markdown`). The automation's template, when not
//! empty, is the summary and title.

wit_bindgen::generate!({ path: "../../../wit/v0.1.0", world: "payload-template" });

use adapter_vars::Vars;
use exports::switchyard::plugin::template::{Guest, Variable};
use serde_json::json;
use switchyard::plugin::types::PluginError;

struct Teams;

impl Guest for Teams {
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
        let fact = |name: &str, value: String| json!({"name": name, "value": value});
        let card = json!({
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
        });
        Ok(card.to_string())
    }
}

export!(Teams);
