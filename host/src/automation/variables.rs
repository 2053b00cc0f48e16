//! The payload variables every automation can use.
//!
//! All names are available to every event type; a name that does not apply
//! (say `${alias}` on a tag event) renders empty, as the spec says. Secrets
//! come on top: `${ACCESS_TOKEN}` and the names of the webhook's secrets.

/// Variables the host fills from the event.
pub const EVENT: &[&str] = &[
    "project_name",
    "entity_name",
    "event_type",
    "event_author",
    "alias",
    "tag",
    "artifact_collection_name",
    "artifact_metadata",
    "artifact_version",
    "artifact_version_string",
    "run_name",
    "run_creator",
    "metric_name",
    "metric_value",
];

/// The variable holding the webhook's access token.
pub const ACCESS_TOKEN: &str = "ACCESS_TOKEN";

/// Every variable name a template may use with a webhook that carries
/// `secrets` (plus `ACCESS_TOKEN` when it has an access token).
pub fn known(secrets: &[&str], has_access_token: bool) -> Vec<String> {
    let mut names: Vec<String> = EVENT.iter().map(|s| s.to_string()).collect();
    names.extend(secrets.iter().map(|s| s.to_string()));
    if has_access_token {
        names.push(ACCESS_TOKEN.to_string());
    }
    names
}

/// Sample values of the event variables, for previewing a payload before
/// any event happened: what an event of `event_type` in `scope` by `author`
/// could carry.
pub fn sample(
    scope: &crate::model::Scope,
    event_type: crate::model::EventType,
    author: &str,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    use crate::model::{EventType, Scope};
    use serde_json::json;
    let (entity, project) = match scope {
        Scope::Project { team, project } => (team.as_str(), project.as_str()),
        Scope::Registry { registry } => (registry.as_str(), ""),
    };
    let artifact = event_type != EventType::RunMetricThreshold;
    let run = !artifact;
    let when = |on: bool, value: serde_json::Value| if on { value } else { json!("") };
    [
        ("event_type", json!(event_type)),
        ("event_author", json!(author)),
        ("entity_name", json!(entity)),
        ("project_name", json!(project)),
        (
            "alias",
            when(
                event_type == EventType::AddArtifactAlias,
                json!("production"),
            ),
        ),
        (
            "tag",
            when(event_type == EventType::AddArtifactTag, json!("candidate")),
        ),
        (
            "artifact_collection_name",
            when(artifact, json!("detector")),
        ),
        (
            "artifact_version_string",
            when(artifact, json!("detector:v3")),
        ),
        (
            "artifact_version",
            when(artifact, json!({"index": 3, "version": "v3"})),
        ),
        (
            "artifact_metadata",
            when(artifact, json!({"accuracy": 0.93})),
        ),
        ("run_name", when(run, json!("run-42"))),
        ("run_creator", when(run, json!(author))),
        ("metric_name", when(run, json!("loss"))),
        ("metric_value", when(run, json!(0.12))),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect()
}
