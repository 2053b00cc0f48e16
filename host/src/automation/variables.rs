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
    "previous_version_string",
    "tag",
    "artifact_collection_name",
    "artifact_metadata",
    "artifact_version",
    "artifact_version_string",
    "run_id",
    "run_name",
    "run_creator",
    "run_state",
    "metric_name",
    "metric_value",
    "metric_previous_value",
    "metric_zscore",
    "webhook_name",
    "webhook_url",
    "failure_reason",
    "attempts",
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
    let (entity, project) = match scope.parent() {
        Scope::Project { team, project } => (team, project),
        Scope::Registry { registry } => (registry, String::new()),
        Scope::Collection { .. } => (String::new(), String::new()),
        Scope::Team { team } => (team, String::new()),
    };
    let run = event_type.is_run();
    let webhook = event_type.is_operational();
    let artifact = !run && !webhook;
    let metric = EventType::METRIC.contains(&event_type);
    let when = |on: bool, value: serde_json::Value| if on { value } else { json!("") };
    [
        ("event_type", json!(event_type)),
        ("event_author", json!(author)),
        ("entity_name", json!(entity)),
        ("project_name", json!(project)),
        (
            "alias",
            when(
                matches!(
                    event_type,
                    EventType::AddArtifactAlias | EventType::UpdateArtifactAlias
                ),
                json!("production"),
            ),
        ),
        (
            "previous_version_string",
            when(
                event_type == EventType::UpdateArtifactAlias,
                json!("detector:v2"),
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
        ("run_id", when(run, json!("3f2a9c1d5e7b8a60"))),
        ("run_name", when(run, json!("run-42"))),
        ("run_creator", when(run, json!(author))),
        (
            "run_state",
            when(run, json!(if metric { "running" } else { "finished" })),
        ),
        ("metric_name", when(metric, json!("loss"))),
        ("metric_value", when(metric, json!(0.12))),
        (
            "metric_previous_value",
            when(event_type == EventType::RunMetricChange, json!(0.18)),
        ),
        (
            "metric_zscore",
            when(event_type == EventType::RunMetricZscore, json!(-3.2)),
        ),
        ("webhook_name", when(webhook, json!("ci"))),
        (
            "webhook_url",
            when(webhook, json!("https://ci.example.com/hook")),
        ),
        (
            "failure_reason",
            when(
                webhook && event_type != EventType::WebhookRecovered,
                json!("the endpoint answered 503"),
            ),
        ),
        ("attempts", when(webhook, json!(8))),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect()
}
