//! Runs in a project and the metrics they log: the event source of
//! run-metric automations.
//!
//! Logging a metric keeps its most recent [`MAX_WINDOW`] values and, when an
//! automation in the project listens for metrics, emits a
//! `RUN_METRIC_THRESHOLD` event carrying them, in the same transaction.

use std::collections::BTreeMap;

use crate::domain::auth::User;
use crate::domain::{Dispatch, names};
use crate::error::{Error, Result};
use crate::ids;
pub use crate::model::Run;
use crate::model::{Event, EventType, RunRef, Scope};
use crate::store::{MetricAt, Store};

/// The most recent values kept per metric, and the largest window an
/// automation may aggregate.
pub const MAX_WINDOW: usize = 1000;
/// Most metrics in one log call.
pub const MAX_METRICS_PER_CALL: usize = 100;

/// Creates a run in a project.
pub async fn create(
    store: &Store,
    team: &str,
    project: &str,
    user: &User,
    name: &str,
) -> Result<Run> {
    names::validate("name", name)?;
    let run = Run {
        id: ids::random_hex(8),
        name: name.to_string(),
        creator: user.name.clone(),
        created_at: ids::now(),
    };
    store.insert_run(team, project, &run).await?;
    Ok(run)
}

/// One run.
pub async fn get(store: &Store, team: &str, project: &str, id: &str) -> Result<Run> {
    store.run(team, project, id).await?.ok_or_else(|| {
        Error::NotFound(format!(
            "project '{team}/{project}' has no run with id '{id}'"
        ))
    })
}

/// The project's runs.
pub async fn list(store: &Store, team: &str, project: &str) -> Result<Vec<Run>> {
    Ok(store.runs(team, project).await?)
}

/// Logs `metrics` for a run and hands on the events caused; returns how
/// many values each metric keeps.
pub async fn log(
    store: &Store,
    events: &dyn Dispatch,
    team: &str,
    project: &str,
    run_id: &str,
    user: &User,
    metrics: &BTreeMap<String, f64>,
) -> Result<BTreeMap<String, usize>> {
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
    let run = get(store, team, project, run_id).await?;
    let scope = Scope::project(team, project);
    let tx = store.begin().await?;
    let listened = tx.listens(&scope, EventType::RunMetricThreshold).await?;
    let mut counts = BTreeMap::new();
    let mut caused = Vec::new();
    for (metric, value) in metrics {
        let values = tx
            .push_metric(
                MetricAt {
                    team,
                    project,
                    run: run_id,
                    metric,
                },
                *value,
                MAX_WINDOW,
            )
            .await?;
        counts.insert(metric.clone(), values.len());
        if listened {
            caused.push(Event {
                id: ids::ordered_id(),
                event_type: EventType::RunMetricThreshold,
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
            });
        }
    }
    tx.insert_events(&caused).await?;
    tx.commit().await?;
    events.dispatch(&caused).await?;
    Ok(counts)
}
