//! Events: what happened in a registry or project, written to the inbox in
//! the same transaction as the action itself.
//!
//! The inbox is the hand-over to the matcher: an event stays there until its
//! deliveries are in the outbox (one transaction removes it and writes them),
//! so a crash between the action and the matching loses nothing.

use std::collections::BTreeMap;

use serde_json::{Value, json};

pub use crate::model::{ArtifactRef, Event, EventType, RunRef, Scope};
use crate::plugin::EventSpec;

impl Event {
    /// What the filter plugin sees.
    pub fn filter_view(&self) -> EventSpec {
        EventSpec {
            event_type: self.event_type.as_str().to_string(),
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
