//! Built-in target adapter `github`: a repository dispatch, as the spec
//! shows it (`event_type` and `client_payload`), for
//! `POST /repos/{owner}/{repo}/dispatches`. The automation's template, when
//! not empty, is the `event_type` (it must be one the receiving workflow
//! accepts); otherwise the event's own type.

use adapter_vars::Vars;
use serde_json::{Value, json};

adapter_vars::adapter!(Github, message);

/// The message for an event.
fn message(template: &str, v: &Vars) -> Value {
    let event_type = match template.trim() {
        "" => v.text("event_type"),
        given => given.to_string(),
    };
    json!({
        "event_type": event_type,
        "client_payload": {
            "event_author": v.text("event_author"),
            "artifact_version": v.value("artifact_version"),
            "artifact_version_string": v.text("artifact_version_string"),
            "artifact_collection_name": v.text("artifact_collection_name"),
            "project_name": v.text("project_name"),
            "entity_name": v.text("entity_name"),
        },
    })
}
