//! Events: what happened in a registry or project, written in the same
//! transaction as the action itself, to the `event_inbox` tree.
//!
//! The inbox is the hand-over to the matcher: an event stays there until its
//! deliveries are in the outbox (one transaction removes it and writes them),
//! so a crash between the action and the matching loses nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::automations::Scope;
use crate::plugin::input::EventSpec;

/// One event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// Ordered by time.
    pub id: String,
    /// `ADD_ARTIFACT_ALIAS`, `ADD_ARTIFACT_TAG`, `LINK_ARTIFACT` or
    /// `RUN_METRIC_THRESHOLD`.
    pub event_type: String,
    /// Where it happened.
    pub scope: Scope,
    /// Who did it.
    pub author: String,
    /// Unix milliseconds.
    pub at_ms: u64,
    /// The artifact version involved, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactRef>,
    /// The alias added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// The tag added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The run involved, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRef>,
}

/// The artifact version an event is about.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// The team or registry that owns the change.
    pub entity: String,
    /// The project that owns the change (empty in a registry).
    pub project: String,
    /// The collection.
    pub collection: String,
    /// `team/project/collection:v3`.
    pub version_string: String,
    /// The version as an object: index, aliases, tags, metadata, …
    pub version: Value,
    /// Its top-level metadata.
    pub metadata: BTreeMap<String, Value>,
}

/// The run a metric event is about.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRef {
    /// The owning team.
    pub team: String,
    /// The project.
    pub project: String,
    /// Run id.
    pub id: String,
    /// Run name.
    pub name: String,
    /// Who created the run.
    pub creator: String,
    /// The metric logged.
    pub metric: String,
    /// Its recent values, oldest first (the newest is the one just logged).
    pub values: Vec<f64>,
}

impl Event {
    /// What the filter plugin sees.
    pub fn filter_view(&self) -> EventSpec {
        EventSpec {
            event_type: self.event_type.clone(),
            alias: self.alias.clone(),
            tag: self.tag.clone(),
            run_creator: self.run.as_ref().map(|r| r.creator.clone()),
            run_name: self.run.as_ref().map(|r| r.name.clone()),
            metric_name: self.run.as_ref().map(|r| r.metric.clone()),
            metric_values: self.run.as_ref().map_or(Vec::new(), |r| r.values.clone()),
        }
    }

    /// The payload variables (without secrets), by name.
    pub fn variables(&self) -> BTreeMap<&'static str, Value> {
        let text = |v: Option<&str>| Value::String(v.unwrap_or("").to_string());
        let a = self.artifact.as_ref();
        let r = self.run.as_ref();
        let (entity, project) = match (a, r, &self.scope) {
            (Some(a), _, _) => (a.entity.clone(), a.project.clone()),
            (None, Some(r), _) => (r.team.clone(), r.project.clone()),
            (None, None, Scope::Project { team, project }) => (team.clone(), project.clone()),
            (None, None, Scope::Registry { registry }) => (registry.clone(), String::new()),
        };
        BTreeMap::from([
            ("event_type", json!(self.event_type)),
            ("event_author", json!(self.author)),
            ("entity_name", json!(entity)),
            ("project_name", json!(project)),
            ("alias", text(self.alias.as_deref())),
            ("tag", text(self.tag.as_deref())),
            (
                "artifact_collection_name",
                text(a.map(|a| a.collection.as_str())),
            ),
            (
                "artifact_version_string",
                text(a.map(|a| a.version_string.as_str())),
            ),
            (
                "artifact_version",
                a.map_or(json!({}), |a| a.version.clone()),
            ),
            (
                "artifact_metadata",
                a.map_or(json!({}), |a| json!(a.metadata)),
            ),
            ("run_name", text(r.map(|r| r.name.as_str()))),
            ("run_creator", text(r.map(|r| r.creator.as_str()))),
            ("metric_name", text(r.map(|r| r.metric.as_str()))),
            (
                "metric_value",
                r.and_then(|r| r.values.last())
                    .map_or(json!(""), |v| json!(v)),
            ),
        ])
    }
}
