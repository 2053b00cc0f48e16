//! `/v1/teams/{team}/projects/{project}/runs`: runs and their metrics, the
//! event source of run-metric automations. Team members create runs and log.

use std::collections::BTreeMap;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;

use super::idempotency::keyed;
use super::scope::{AsMember, InScope};
use super::{Json, Reply, ReplyWith};
use crate::app::App;
use crate::domain::runs::{self, Run, RunAt, RunState};
use crate::error::{Error, Result};

/// Nested under `/v1/teams/{team}/projects/{project}/runs`; the POSTs and
/// the PATCH take an `Idempotency-Key`.
pub fn routes(app: &App) -> Router<App> {
    Router::new()
        .route("/", keyed(app, get(list).post(create)))
        .route("/{run}", keyed(app, get(show).patch(end)))
        .route("/{run}/metrics", keyed(app, post(log)))
}

/// `/v1/teams/{team}/projects/{project}/runs`.
#[derive(Deserialize)]
struct ProjectPath {
    team: String,
    project: String,
}

/// `…/runs/{run}`.
#[derive(Deserialize)]
struct RunPath {
    run: String,
}

/// The project's team and name, from a project-scoped route.
fn project(at: &InScope<AsMember>) -> Result<(String, String)> {
    let ProjectPath { team, project } = at.path()?;
    Ok((team, project))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    name: String,
}

pub async fn create(at: InScope<AsMember>, Json(body): Json<CreateRun>) -> ReplyWith<Run> {
    let (team, project) = project(&at)?;
    let run = runs::create(&at.app.store, &team, &project, &at.user, &body.name).await?;
    Ok((StatusCode::CREATED, axum::Json(run)))
}

pub async fn list(at: InScope<AsMember>) -> Reply<Value> {
    let (team, project) = project(&at)?;
    Ok(super::list_of(
        runs::list(&at.app.store, &team, &project).await?,
    ))
}

pub async fn show(at: InScope<AsMember>) -> Reply<Run> {
    let ((team, project), run) = (project(&at)?, at.path::<RunPath>()?.run);
    Ok(axum::Json(
        runs::get(&at.app.store, &team, &project, &run).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndRun {
    state: String,
}

/// Ends a run (`{"state": "finished"}`); answers once the deliveries its
/// `RUN_STATE` event caused are durable.
pub async fn end(at: InScope<AsMember>, Json(body): Json<EndRun>) -> Reply<Run> {
    let ((team, project), id) = (project(&at)?, at.path::<RunPath>()?.run);
    let to = RunState::parse(&body.state).ok_or_else(|| {
        Error::invalid(
            "state",
            format!(
                "state '{}' is not one of finished, failed, crashed, killed",
                body.state
            ),
        )
    })?;
    let run = RunAt {
        team: &team,
        project: &project,
        id: &id,
    };
    let (app, user) = (&at.app, &at.user);
    let ended = runs::end(&app.store, &app.matcher, run, user, to).await?;
    Ok(axum::Json(ended))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogMetrics {
    metrics: BTreeMap<String, f64>,
}

/// Logs metric values; answers once any deliveries they caused are durable.
pub async fn log(at: InScope<AsMember>, Json(body): Json<LogMetrics>) -> Reply<MetricsLogged> {
    let ((team, project), run) = (project(&at)?, at.path::<RunPath>()?.run);
    let (app, user) = (&at.app, &at.user);
    let kept = runs::log(
        &app.store,
        &app.matcher,
        &team,
        &project,
        &run,
        user,
        &body.metrics,
    );
    let values_kept = kept.await?;
    Ok(axum::Json(MetricsLogged { run, values_kept }))
}

/// What logging metrics answers: the run, and how many values each
/// metric keeps now.
#[derive(serde::Serialize)]
pub struct MetricsLogged {
    run: String,
    values_kept: BTreeMap<String, usize>,
}
