//! Runs in a project and the metrics they log: the event source of
//! run-metric automations.
//!
//! Logging a metric keeps its most recent [`MAX_WINDOW`] values and, when an
//! automation in the project listens for metrics, emits a
//! `RUN_METRIC_THRESHOLD` event carrying them, in the same transaction.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sled::Transactional;

use crate::auth::User;
use crate::automation::automations::{self, Scope};
use crate::automation::events::{Event, RunRef};
use crate::error::{Error, Result};
use crate::store::tx::{decode, encode, finish};
use crate::store::{self, Store, keys};
use crate::{ids, names};

/// The most recent values kept per metric, and the largest window an
/// automation may aggregate.
pub const MAX_WINDOW: usize = 1000;
/// Most metrics in one log call.
pub const MAX_METRICS_PER_CALL: usize = 100;

/// A run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// Unique id.
    pub id: String,
    /// Display name (not unique).
    pub name: String,
    /// The user who created it.
    pub creator: String,
    /// Unix seconds.
    pub created_at: u64,
}

fn key(team: &str, project: &str, id: &str) -> keys::Key {
    keys::prefix(&[team, project, id])
}

/// Creates a run in a project.
pub fn create(store: &Store, team: &str, project: &str, user: &User, name: &str) -> Result<Run> {
    names::validate("name", name)?;
    let run = Run {
        id: ids::random_hex(8),
        name: name.to_string(),
        creator: user.name.clone(),
        created_at: ids::now(),
    };
    store::insert_new(&store.trees.runs, key(team, project, &run.id), &run)?;
    Ok(run)
}

/// One run.
pub fn get(store: &Store, team: &str, project: &str, id: &str) -> Result<Run> {
    store::get_json(&store.trees.runs, key(team, project, id))?.ok_or_else(|| {
        Error::NotFound(format!(
            "project '{team}/{project}' has no run with id '{id}'"
        ))
    })
}

/// The project's runs.
pub fn list(store: &Store, team: &str, project: &str) -> Result<Vec<Run>> {
    Ok(store::scan_json(
        &store.trees.runs,
        keys::prefix(&[team, project]),
    )?)
}

/// Logs `metrics` for a run; returns how many values each metric keeps,
/// and the events caused.
pub fn log(
    store: &Store,
    team: &str,
    project: &str,
    run_id: &str,
    user: &User,
    metrics: &BTreeMap<String, f64>,
) -> Result<(BTreeMap<String, usize>, Vec<Event>)> {
    if metrics.is_empty() || metrics.len() > MAX_METRICS_PER_CALL {
        return Err(Error::invalid(
            "metrics",
            format!("log 1 to {MAX_METRICS_PER_CALL} metrics per call"),
        ));
    }
    for (name, value) in metrics {
        if name.is_empty() || name.len() > names::MAX_LEN || !value.is_finite() {
            return Err(Error::invalid(
                "metrics",
                format!(
                    "metric '{name}' needs a name of 1 to {} bytes and a finite value",
                    names::MAX_LEN
                ),
            ));
        }
    }
    let run = get(store, team, project, run_id)?;
    let scope = Scope::Project {
        team: team.to_string(),
        project: project.to_string(),
    };
    let listened = automations::listens(store, &scope, "RUN_METRIC_THRESHOLD")?;
    let t = &store.trees;
    let result = (&t.metrics, &t.event_inbox).transaction(|(stored, inbox)| {
        let mut counts = BTreeMap::new();
        let mut events = Vec::new();
        for (metric, value) in metrics {
            let metric_key = keys::prefix(&[team, project, run_id, metric]);
            let mut values: Vec<f64> = match stored.get(metric_key.as_ref())? {
                Some(bytes) => decode(&bytes)?,
                None => Vec::new(),
            };
            values.push(*value);
            if values.len() > MAX_WINDOW {
                values.drain(..values.len() - MAX_WINDOW);
            }
            stored.insert(metric_key.as_ref(), encode(&values)?)?;
            counts.insert(metric.clone(), values.len());
            if listened {
                let event = Event {
                    id: ids::ordered_id(),
                    event_type: "RUN_METRIC_THRESHOLD".into(),
                    scope: scope.clone(),
                    author: user.name.clone(),
                    at_ms: ids::now_ms(),
                    artifact: None,
                    alias: None,
                    tag: None,
                    run: Some(RunRef {
                        team: team.to_string(),
                        project: project.to_string(),
                        id: run.id.clone(),
                        name: run.name.clone(),
                        creator: run.creator.clone(),
                        metric: metric.clone(),
                        values,
                    }),
                };
                inbox.insert(event.id.as_bytes(), encode(&event)?)?;
                events.push(event);
            }
        }
        Ok((counts, events))
    });
    finish(result)
}
