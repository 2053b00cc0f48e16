//! `/v1/teams/{team}/projects/{project}/runs`: runs and their metrics, the
//! event source of run-metric automations. Team members create runs and log.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Caller, Json};
use crate::app::App;
use crate::domain::auth::User;
use crate::domain::groups::{self, Role};
use crate::domain::runs::{self, Run};
use crate::error::Result;
use crate::model::Scope;

/// Runs are read and written by members of the project's team.
async fn member(app: &App, user: &User, team: &str, project: &str) -> Result<()> {
    groups::authorize(
        &app.store,
        user,
        &Scope::project(team, project),
        Role::Member,
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    name: String,
}

pub async fn create(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, project)): Path<(String, String)>,
    Json(body): Json<CreateRun>,
) -> Result<(StatusCode, axum::Json<Run>)> {
    member(&app, &user, &team, &project).await?;
    let run = runs::create(&app.store, &team, &project, &user, &body.name).await?;
    Ok((StatusCode::CREATED, axum::Json(run)))
}

pub async fn list(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, project)): Path<(String, String)>,
) -> Result<axum::Json<Value>> {
    member(&app, &user, &team, &project).await?;
    Ok(super::list_of(
        runs::list(&app.store, &team, &project).await?,
    ))
}

pub async fn show(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, project, run)): Path<(String, String, String)>,
) -> Result<axum::Json<Run>> {
    member(&app, &user, &team, &project).await?;
    Ok(axum::Json(
        runs::get(&app.store, &team, &project, &run).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogMetrics {
    metrics: BTreeMap<String, f64>,
}

/// Logs metric values; answers once any deliveries they caused are durable.
pub async fn log(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, project, run)): Path<(String, String, String)>,
    Json(body): Json<LogMetrics>,
) -> Result<axum::Json<Value>> {
    member(&app, &user, &team, &project).await?;
    let kept = runs::log(
        &app.store,
        &app.matcher,
        &team,
        &project,
        &run,
        &user,
        &body.metrics,
    )
    .await?;
    Ok(axum::Json(json!({"run": run, "values_kept": kept})))
}
