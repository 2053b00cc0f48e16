//! Events: what happened in a registry or project, written to the inbox in
//! the same transaction as the action itself.
//!
//! The inbox is the hand-over to the matcher: an event stays there until its
//! deliveries are in the outbox (one transaction removes it and writes them),
//! so a crash between the action and the matching loses nothing.

pub use crate::model::{ArtifactRef, Event, EventType, RunRef, Scope};
use crate::plugin::EventSpec;

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
}
