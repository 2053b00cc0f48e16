//! Events: what happened in a registry or project, written to the inbox in
//! the same transaction as the action itself.
//!
//! The inbox is the hand-over to the matcher: an event stays there until its
//! deliveries are in the outbox (one transaction removes it and writes them),
//! so a crash between the action and the matching loses nothing.

pub use crate::model::{ArtifactRef, Event, EventType, RunRef, Scope};
use crate::plugin::{EventSpec, MetricFired};

impl Event {
    /// The collection an artifact event happened in, where automations on
    /// that collection alone listen too. A link's event in the source
    /// project is about the source version's collection.
    pub fn collection(&self) -> Option<&str> {
        let artifact = self.artifact.as_ref()?;
        match (&self.scope, self.event_type) {
            (Scope::Project { .. }, EventType::LinkArtifact) => {
                artifact.version.get("source")?.get("collection")?.as_str()
            }
            _ => Some(artifact.collection.as_str()),
        }
    }

    /// What the filter plugin sees.
    pub fn filter_view(&self) -> EventSpec {
        EventSpec {
            event_type: self.event_type.as_str().to_string(),
            alias: self.alias.clone(),
            tag: self.tag.clone(),
            collection: self.collection().map(str::to_string),
            run_creator: self.run.as_ref().map(|r| r.creator.clone()),
            run_name: self.run.as_ref().map(|r| r.name.clone()),
            metric_name: self.run.as_ref().map(|r| r.metric.clone()),
            metric_values: self.run.as_ref().map_or(Vec::new(), |r| r.values.clone()),
        }
    }

    /// The payload variables (without secrets) as JSON text, by name, with
    /// what fired a metric condition when the filter said (else
    /// `${metric_value}` is the latest value). Written from the event's own
    /// fields: building `Value`s first cloned the version object and the
    /// metadata for every event.
    pub fn variables(&self, fired: Option<&MetricFired>) -> Vec<(&'static str, String)> {
        fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
            // Strings, numbers and maps with string keys always serialize.
            serde_json::to_string(value).unwrap_or_else(|_| "null".into())
        }
        let text = |v: Option<&str>| json(v.unwrap_or(""));
        let a = self.artifact.as_ref();
        let r = self.run.as_ref();
        let w = self.webhook.as_ref();
        let parent = self.scope.parent();
        let (entity, project) = match (a, r, &parent) {
            (Some(a), _, _) => (a.entity.as_str(), a.project.as_str()),
            (None, Some(r), _) => (r.team.as_str(), r.project.as_str()),
            (None, None, Scope::Project { team, project }) => (team.as_str(), project.as_str()),
            (None, None, Scope::Registry { registry }) => (registry.as_str(), ""),
            (None, None, Scope::Collection { .. }) => ("", ""),
            (None, None, Scope::Team { team }) => (team.as_str(), ""),
        };
        let empty = || "{}".to_string();
        let mut variables = vec![
            ("event_type", json(&self.event_type)),
            ("event_author", json(&self.author)),
            ("entity_name", json(entity)),
            ("project_name", json(project)),
            ("alias", text(self.alias.as_deref())),
            (
                "previous_version_string",
                text(self.previous_version_string.as_deref()),
            ),
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
                a.map_or_else(empty, |a| json(&a.version)),
            ),
            (
                "artifact_metadata",
                a.map_or_else(empty, |a| json(&a.metadata)),
            ),
            ("run_id", text(r.map(|r| r.id.as_str()))),
            ("run_name", text(r.map(|r| r.name.as_str()))),
            ("run_creator", text(r.map(|r| r.creator.as_str()))),
            ("run_state", text(r.map(|r| r.state.as_str()))),
            ("metric_name", text(r.map(|r| r.metric.as_str()))),
            (
                "metric_value",
                fired
                    .map(|f| f.value)
                    .or_else(|| r.and_then(|r| r.values.last().copied()))
                    .map_or_else(|| json(""), |v| json(&v)),
            ),
            (
                "metric_previous_value",
                fired
                    .and_then(|f| f.previous)
                    .map_or_else(|| json(""), |v| json(&v)),
            ),
            (
                "metric_zscore",
                fired
                    .and_then(|f| f.zscore)
                    .map_or_else(|| json(""), |v| json(&v)),
            ),
            ("webhook_name", text(w.map(|w| w.name.as_str()))),
            ("webhook_url", text(w.map(|w| w.url.as_str()))),
            ("failure_reason", text(w.map(|w| w.failure_reason.as_str()))),
            (
                "attempts",
                w.map_or_else(|| json(""), |w| json(&w.attempts)),
            ),
        ];
        variables.sort_unstable_by_key(|(name, _)| *name);
        variables
    }
}
