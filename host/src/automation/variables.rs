//! The payload variables every automation can use, in one table: what
//! fills each from an event, its sample for a preview before any event
//! happened, and (checked by a test below) the docs' table of them.
//!
//! All names are available to every event type; a name that does not apply
//! (say `${alias}` on a tag event) renders empty, as the spec says. Secrets
//! come on top: `${ACCESS_TOKEN}` and the names of the webhook's secrets.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::model::{Event, EventType, Scope};
use crate::plugin::MetricFired;

/// One variable the host fills from the event.
pub struct Variable {
    /// As a template writes it, `${name}`.
    pub name: &'static str,
    /// What it holds where its event fills it.
    pub kind: Kind,
    /// Whether events of a type fill it; others leave it empty.
    pub applies: fn(EventType) -> bool,
    /// Its value for an event, as JSON text.
    fill: fn(&Filling) -> String,
    /// Its value in a preview, where it applies.
    sample: fn(&Preview) -> Value,
}

/// What a variable holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Text,
    /// A whole number.
    Integer,
    /// A number.
    Number,
    /// A JSON object.
    Object,
}

impl Kind {
    /// What it holds where its event does not fill it.
    pub fn empty(self) -> Value {
        match self {
            Kind::Object => json!({}),
            _ => json!(""),
        }
    }

    /// Its JSON Schema where its event fills it.
    pub fn schema(self) -> Value {
        let name = match self {
            Kind::Text => "string",
            Kind::Integer => "integer",
            Kind::Number => "number",
            Kind::Object => "object",
        };
        json!({ "type": name })
    }
}

fn always(_: EventType) -> bool {
    true
}

/// The variables, by name.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "alias",
        kind: Kind::Text,
        applies: |t| {
            matches!(
                t,
                EventType::AddArtifactAlias | EventType::UpdateArtifactAlias
            )
        },
        fill: |f| text(f.event.alias.as_deref()),
        sample: |_| json!("production"),
    },
    Variable {
        name: "artifact_collection_name",
        kind: Kind::Text,
        applies: EventType::is_artifact,
        fill: |f| text(f.artifact().map(|a| a.collection.as_str())),
        sample: |_| json!("detector"),
    },
    Variable {
        name: "artifact_metadata",
        kind: Kind::Object,
        applies: EventType::is_artifact,
        fill: |f| f.artifact().map_or_else(empty, |a| json(&a.metadata)),
        sample: |_| json!({"accuracy": 0.93}),
    },
    Variable {
        name: "artifact_version",
        kind: Kind::Object,
        applies: EventType::is_artifact,
        fill: |f| f.artifact().map_or_else(empty, |a| json(&a.version)),
        sample: |_| json!({"index": 3, "version": "v3"}),
    },
    Variable {
        name: "artifact_version_string",
        kind: Kind::Text,
        applies: EventType::is_artifact,
        fill: |f| text(f.artifact().map(|a| a.version_string.as_str())),
        sample: |_| json!("detector:v3"),
    },
    Variable {
        name: "attempts",
        kind: Kind::Integer,
        applies: EventType::is_operational,
        fill: |f| {
            f.event
                .webhook
                .as_ref()
                .map_or_else(none, |w| json(&w.attempts))
        },
        sample: |_| json!(8),
    },
    Variable {
        name: "entity_name",
        kind: Kind::Text,
        applies: always,
        fill: |f| json(f.entity),
        sample: |p| json!(p.entity),
    },
    Variable {
        name: "event_author",
        kind: Kind::Text,
        applies: always,
        fill: |f| json(&f.event.author),
        sample: |p| json!(p.author),
    },
    Variable {
        name: "event_type",
        kind: Kind::Text,
        applies: always,
        fill: |f| json(&f.event.event_type),
        sample: |p| json!(p.event_type),
    },
    Variable {
        name: "failure_reason",
        kind: Kind::Text,
        applies: |t| t.is_operational() && t != EventType::WebhookRecovered,
        fill: |f| text(f.event.webhook.as_ref().map(|w| w.failure_reason.as_str())),
        sample: |_| json!("the endpoint answered 503"),
    },
    Variable {
        name: "metric_name",
        kind: Kind::Text,
        applies: EventType::is_metric,
        fill: |f| text(f.run().map(|r| r.metric.as_str())),
        sample: |_| json!("loss"),
    },
    Variable {
        name: "metric_previous_value",
        kind: Kind::Number,
        applies: |t| t == EventType::RunMetricChange,
        fill: |f| {
            f.fired
                .and_then(|f| f.previous)
                .map_or_else(none, |v| json(&v))
        },
        sample: |_| json!(0.18),
    },
    Variable {
        name: "metric_value",
        kind: Kind::Number,
        applies: EventType::is_metric,
        // What fired when the filter said, else the latest value.
        fill: |f| {
            f.fired
                .map(|f| f.value)
                .or_else(|| f.run().and_then(|r| r.values.last().copied()))
                .map_or_else(none, |v| json(&v))
        },
        sample: |_| json!(0.12),
    },
    Variable {
        name: "metric_zscore",
        kind: Kind::Number,
        applies: |t| t == EventType::RunMetricZscore,
        fill: |f| {
            f.fired
                .and_then(|f| f.zscore)
                .map_or_else(none, |v| json(&v))
        },
        sample: |_| json!(-3.2),
    },
    Variable {
        name: "previous_version_string",
        kind: Kind::Text,
        applies: |t| t == EventType::UpdateArtifactAlias,
        fill: |f| text(f.event.previous_version_string.as_deref()),
        sample: |_| json!("detector:v2"),
    },
    Variable {
        name: "project_name",
        kind: Kind::Text,
        // (Empty for a registry's own events, too.)
        applies: |t| !t.is_operational(),
        fill: |f| json(f.project),
        sample: |p| json!(p.project),
    },
    Variable {
        name: "run_creator",
        kind: Kind::Text,
        applies: EventType::is_run,
        fill: |f| text(f.run().map(|r| r.creator.as_str())),
        sample: |p| json!(p.author),
    },
    Variable {
        name: "run_id",
        kind: Kind::Text,
        applies: EventType::is_run,
        fill: |f| text(f.run().map(|r| r.id.as_str())),
        sample: |_| json!("3f2a9c1d5e7b8a60"),
    },
    Variable {
        name: "run_name",
        kind: Kind::Text,
        applies: EventType::is_run,
        fill: |f| text(f.run().map(|r| r.name.as_str())),
        sample: |_| json!("run-42"),
    },
    Variable {
        name: "run_state",
        kind: Kind::Text,
        applies: EventType::is_run,
        fill: |f| text(f.run().map(|r| r.state.as_str())),
        sample: |p| {
            json!(if p.event_type.is_metric() {
                "running"
            } else {
                "finished"
            })
        },
    },
    Variable {
        name: "tag",
        kind: Kind::Text,
        applies: |t| t == EventType::AddArtifactTag,
        fill: |f| text(f.event.tag.as_deref()),
        sample: |_| json!("candidate"),
    },
    Variable {
        name: "webhook_name",
        kind: Kind::Text,
        applies: EventType::is_operational,
        fill: |f| text(f.event.webhook.as_ref().map(|w| w.name.as_str())),
        sample: |_| json!("ci"),
    },
    Variable {
        name: "webhook_url",
        kind: Kind::Text,
        applies: EventType::is_operational,
        fill: |f| text(f.event.webhook.as_ref().map(|w| w.url.as_str())),
        sample: |_| json!("https://ci.example.com/hook"),
    },
];

/// The variable holding the webhook's access token.
pub const ACCESS_TOKEN: &str = "ACCESS_TOKEN";

/// Every variable name a template may use with a webhook that carries
/// `secrets` (plus `ACCESS_TOKEN` when it has an access token).
pub fn known(secrets: &[&str], has_access_token: bool) -> Vec<String> {
    let mut names: Vec<String> = VARIABLES.iter().map(|v| v.name.to_string()).collect();
    names.extend(secrets.iter().map(|s| s.to_string()));
    if has_access_token {
        names.push(ACCESS_TOKEN.to_string());
    }
    names
}

/// The variables (without secrets) of `event` as JSON text, by name, with
/// what fired a metric condition when the filter said. Written from the
/// event's own fields: building `Value`s first cloned the version object
/// and the metadata for every event.
pub fn of(event: &Event, fired: Option<&MetricFired>) -> Vec<(&'static str, String)> {
    // The scope speaks only when no artifact or run does.
    let parent = (event.artifact.is_none() && event.run.is_none()).then(|| event.scope.parent());
    let (entity, project) = match (&event.artifact, &event.run, &parent) {
        (Some(a), _, _) => (a.entity.as_str(), a.project.as_str()),
        (None, Some(r), _) => (r.team.as_str(), r.project.as_str()),
        (_, _, Some(Scope::Project { team, project })) => (team.as_str(), project.as_str()),
        (_, _, Some(Scope::Registry { registry })) => (registry.as_str(), ""),
        (_, _, Some(Scope::Team { team })) => (team.as_str(), ""),
        _ => ("", ""),
    };
    let filling = Filling {
        event,
        fired,
        entity,
        project,
    };
    VARIABLES
        .iter()
        .map(|v| (v.name, (v.fill)(&filling)))
        .collect()
}

/// Sample values of the variables, for previewing a payload before any
/// event happened: what an event of `event_type` in `scope` by `author`
/// could carry.
pub fn sample(scope: &Scope, event_type: EventType, author: &str) -> BTreeMap<String, Value> {
    let (entity, project) = match scope.parent() {
        Scope::Project { team, project } => (team, project),
        Scope::Registry { registry } => (registry, String::new()),
        Scope::Collection { .. } => (String::new(), String::new()),
        Scope::Team { team } => (team, String::new()),
    };
    let preview = Preview {
        event_type,
        author,
        entity,
        project,
    };
    VARIABLES
        .iter()
        .map(|v| {
            let value = match (v.applies)(event_type) {
                true => (v.sample)(&preview),
                false => v.kind.empty(),
            };
            (v.name.to_string(), value)
        })
        .collect()
}

/// An event, with what the table reads of it worked out once.
struct Filling<'a> {
    event: &'a Event,
    fired: Option<&'a MetricFired>,
    entity: &'a str,
    project: &'a str,
}

impl Filling<'_> {
    fn artifact(&self) -> Option<&crate::model::ArtifactRef> {
        self.event.artifact.as_deref()
    }

    fn run(&self) -> Option<&crate::model::RunRef> {
        self.event.run.as_ref()
    }
}

/// The event a preview stands for.
struct Preview<'a> {
    event_type: EventType,
    author: &'a str,
    entity: String,
    project: String,
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    // Strings, numbers and maps with string keys always serialize.
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

fn text(value: Option<&str>) -> String {
    json(value.unwrap_or(""))
}

fn none() -> String {
    json("")
}

fn empty() -> String {
    "{}".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_order_by_name() {
        let names: Vec<_> = VARIABLES.iter().map(|v| v.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    /// docs/api.md's table of variables names each variable, and no other.
    #[test]
    fn the_docs_name_every_variable_and_no_other() {
        let api = include_str!("../../../docs/api.md");
        let table = api
            .split("| Variable | Filled by |")
            .nth(1)
            .expect("docs/api.md has a table of variables");
        let mut documented = std::collections::BTreeSet::new();
        for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
            let first = row.split('|').nth(1).unwrap_or_default();
            for name in first.split('`').skip(1).step_by(2) {
                documented.insert(name.split('.').next().unwrap_or(name));
            }
        }
        documented.remove(ACCESS_TOKEN);
        let table: std::collections::BTreeSet<_> = VARIABLES.iter().map(|v| v.name).collect();
        assert_eq!(documented, table);
    }

    #[test]
    fn a_preview_and_an_event_have_the_same_variables() {
        let scope = Scope::Project {
            team: "acme".into(),
            project: "vision".into(),
        };
        let sample = sample(&scope, EventType::AddArtifactTag, "ana");
        let event = Event {
            id: "ev_1".into(),
            event_type: EventType::AddArtifactTag,
            scope,
            author: "ana".into(),
            at_ms: 0,
            artifact: None,
            alias: None,
            previous_version_string: None,
            tag: Some("candidate".into()),
            run: None,
            webhook: None,
            trace: None,
        };
        let filled: Vec<_> = of(&event, None).into_iter().map(|(n, _)| n).collect();
        let sampled: Vec<_> = sample.keys().map(String::as_str).collect();
        assert_eq!(filled, sampled);
        assert_eq!(sample["project_name"], json!("vision"));
        assert_eq!(sample["tag"], json!("candidate"));
        assert_eq!(sample["alias"], json!(""));
    }
}
