//! Runs in a project and the metrics they log: the event source of
//! run-metric automations.
//!
//! Logging a metric keeps its most recent [`MAX_WINDOW`] values and, for
//! each kind of metric event an automation in the project listens for
//! (`RUN_METRIC_THRESHOLD`, `RUN_METRIC_CHANGE`, `RUN_METRIC_ZSCORE`), emits
//! one carrying them, in the same transaction.

use std::collections::BTreeMap;

use crate::domain::auth::User;
use crate::domain::{Matching, names};
use crate::error::{Error, Result};
use crate::ids;
use crate::model::{Event, EventType, RunRef, Scope};
pub use crate::model::{Run, RunState};
pub use crate::store::RunAt;
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
        state: RunState::Running,
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

/// Ends a run: moves it from `running` to `to`, once, and hands on the
/// `RUN_STATE` event (none for `killed`, which never fires, as in W&B).
pub async fn end(
    store: &Store,
    events: &dyn Matching,
    at: RunAt<'_>,
    user: &User,
    to: RunState,
) -> Result<Run> {
    let run = get(store, at.team, at.project, at.id).await?;
    let refused = |now: RunState| {
        Error::Conflict(format!(
            "run '{}' is {now}; a run moves from running to finished, failed, crashed or killed, once",
            at.id
        ))
    };
    if run.state != RunState::Running || to == RunState::Running {
        return Err(refused(run.state));
    }
    let scope = Scope::project(at.team, at.project);
    let tx = store.begin().await?;
    if !tx.set_run_state(at, RunState::Running, to).await? {
        let now = get(store, at.team, at.project, at.id).await?;
        return Err(refused(now.state));
    }
    let run = Run { state: to, ..run };
    let mut caused = Vec::new();
    if to != RunState::Killed && tx.listens(&scope, EventType::RunState).await? {
        caused.push(run_event(EventType::RunState, at, &run, user, None));
    }
    tx.insert_events(&caused).await?;
    tx.commit().await?;
    events.match_committed(&caused).await?;
    Ok(run)
}

/// Logs `metrics` for a run and hands on the events caused; returns how
/// many values each metric keeps.
pub async fn log(
    store: &Store,
    events: &dyn Matching,
    team: &str,
    project: &str,
    run_id: &str,
    user: &User,
    metrics: &BTreeMap<String, f64>,
) -> Result<BTreeMap<String, usize>> {
    check_metrics(metrics)?;
    let run = get(store, team, project, run_id).await?;
    let scope = Scope::project(team, project);
    let at = RunAt {
        team,
        project,
        id: run_id,
    };
    let tx = store.begin().await?;
    let mut listened = Vec::new();
    for kind in EventType::METRIC {
        if tx.listens(&scope, kind).await? {
            listened.push(kind);
        }
    }
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
        for &kind in &listened {
            let logged = Some((metric.clone(), values.clone()));
            caused.push(run_event(kind, at, &run, user, logged));
        }
    }
    tx.insert_events(&caused).await?;
    tx.commit().await?;
    events.match_committed(&caused).await?;
    Ok(counts)
}

/// A 400 unless `metrics` holds 1 to [`MAX_METRICS_PER_CALL`] metrics,
/// each named and finite.
fn check_metrics(metrics: &BTreeMap<String, f64>) -> Result<()> {
    if metrics.is_empty() || metrics.len() > MAX_METRICS_PER_CALL {
        return Err(Error::invalid(
            "metrics",
            format!("log 1 to {MAX_METRICS_PER_CALL} metrics per call"),
        ));
    }
    let bad = metrics
        .iter()
        .find(|(name, value)| name.is_empty() || name.len() > names::MAX_LEN || !value.is_finite());
    match bad {
        Some((name, _)) => Err(Error::invalid(
            "metrics",
            format!(
                "metric '{name}' needs a name of 1 to {} bytes and a finite value",
                names::MAX_LEN
            ),
        )),
        None => Ok(()),
    }
}

/// An event about `run` (at `at`) by `user`: a state change, or, with
/// `logged`, a metric and its recent values.
fn run_event(
    event_type: EventType,
    at: RunAt<'_>,
    run: &Run,
    user: &User,
    logged: Option<(String, Vec<f64>)>,
) -> Event {
    let (metric, values) = logged.unwrap_or_default();
    Event {
        id: ids::ordered_id(),
        event_type,
        scope: Scope::project(at.team, at.project),
        author: user.name.clone(),
        at_ms: ids::now_ms(),
        artifact: None,
        alias: None,
        previous_version_string: None,
        tag: None,
        run: Some(RunRef {
            team: at.team.to_string(),
            project: at.project.to_string(),
            id: run.id.clone(),
            name: run.name.clone(),
            creator: run.creator.clone(),
            state: run.state,
            metric,
            values,
        }),
        webhook: None,
        trace: crate::traces::current(),
    }
}
