//! Built-in target adapter `github`: a repository dispatch, as the spec
//! shows it (`event_type` and `client_payload`), for
//! `POST /repos/{owner}/{repo}/dispatches`. The automation's template, when
//! not empty, is the `event_type` (it must be one the receiving workflow
//! accepts); otherwise the event's own type.

wit_bindgen::generate!({ path: "../../../wit/v0.1.0", world: "payload-template" });

use adapter_vars::Vars;
use exports::switchyard::plugin::template::{Guest, Variable};
use serde_json::json;
use switchyard::plugin::types::PluginError;

struct Github;

impl Guest for Github {
    fn validate(_template: String, known: Vec<String>) -> Result<Vec<String>, PluginError> {
        Ok(adapter_vars::used(&known))
    }

    fn render(template: String, variables: Vec<Variable>) -> Result<String, PluginError> {
        let v = Vars::new(
            variables
                .iter()
                .map(|x| (x.name.as_str(), x.value.as_str())),
        );
        let event_type = match template.trim() {
            "" => v.text("event_type"),
            given => given.to_string(),
        };
        let dispatch = json!({
            "event_type": event_type,
            "client_payload": {
                "event_author": v.text("event_author"),
                "artifact_version": v.value("artifact_version"),
                "artifact_version_string": v.text("artifact_version_string"),
                "artifact_collection_name": v.text("artifact_collection_name"),
                "project_name": v.text("project_name"),
                "entity_name": v.text("entity_name"),
            },
        });
        Ok(dispatch.to_string())
    }
}

export!(Github);
