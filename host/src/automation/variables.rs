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
