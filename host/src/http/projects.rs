//! `/v1/teams/{team}/projects`: projects owned by a team.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::Value;

use super::query::{Force, Query};
use super::scope::{AsAdmin, AsMember, InTeam};
use super::{Caller, Json};
use super::{Reply, ReplyWith};
use crate::app::App;
use crate::automation::automations;
use crate::domain::groups::Role;
use crate::domain::projects::{self, Project};
use crate::error::{Error, Result};
use crate::model::{RateLimits, Scope};
use axum::extract::{Path, State};

/// Nested under `/v1/teams/{team}/projects`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(list).post(create))
        .route("/{name}", get(show).delete(delete))
}

/// Any team member may create a project.
pub async fn create(at: InTeam<AsMember>, Json(body): Json<super::Create>) -> ReplyWith<Project> {
    let (user, team) = (&at.user, &at.place);
    let project = projects::create(&at.app.store, team, user, body.named()).await?;
    super::audit(
        &user.name,
        "project created",
        &format!("{team}/{}", project.name),
    );
    Ok((StatusCode::CREATED, axum::Json(project)))
}

pub async fn list(at: InTeam<AsMember>) -> Reply<Value> {
    Ok(super::list_of(
        projects::list(&at.app.store, &at.place).await?,
    ))
}

/// `…/projects/{name}`.
#[derive(serde::Deserialize)]
struct ProjectPath {
    name: String,
}

pub async fn show(at: InTeam<AsMember>) -> Reply<Project> {
    let (team, ProjectPath { name }) = (&at.place, at.path()?);
    Ok(axum::Json(projects::get(&at.app.store, team, &name).await?))
}

/// The body of `PUT …/limits`: each limit, or null (or left out) for none.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetLimits {
    #[serde(default)]
    rpm: Option<u64>,
    #[serde(default)]
    tpm: Option<u64>,
    #[serde(default)]
    tokens_per_day: Option<u64>,
    #[serde(default)]
    usd_per_day: Option<f64>,
    #[serde(default)]
    usd_per_month: Option<f64>,
}

/// `PUT /v1/teams/{team}/projects/{project}/limits`: a team admin sets the
/// project's inference limits; answers them.
pub async fn set_limits(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, project)): Path<(String, String)>,
    Json(body): Json<SetLimits>,
) -> Reply<RateLimits> {
    app.access.require_team(&user, &team, Role::Admin).await?;
    let limits = RateLimits {
        rpm: body.rpm,
        tpm: body.tpm,
        tokens_per_day: body.tokens_per_day,
        usd_per_day: body.usd_per_day,
        usd_per_month: body.usd_per_month,
    };
    projects::set_limits(&app.store, &team, &project, &limits).await?;
    super::audit(
        &user.name,
        "project limits set",
        &format!("{team}/{project}: {limits:?}"),
    );
    Ok(axum::Json(limits))
}

/// A team admin deletes a project; one with automations needs `?force=true`,
/// which deletes them too.
pub async fn delete(at: InTeam<AsAdmin>, Query(f): Query<Force>) -> Result<StatusCode> {
    let (user, team, ProjectPath { name }) = (&at.user, &at.place, at.path()?);
    projects::get(&at.app.store, team, &name).await?;
    let scope = Scope::project(team, &name);
    let dependants = automations::list(&at.app.store, &scope).await?;
    if !dependants.is_empty() && !f.force {
        let names: Vec<&str> = dependants.iter().map(|a| a.name.as_str()).collect();
        return Err(Error::Conflict(format!(
            "project '{team}/{name}' has automations {}; delete them first, or delete everything with ?force=true",
            names.join(", ")
        )));
    }
    automations::delete_scope(&at.app.store, &scope).await?;
    projects::delete(&at.app.store, team, &name).await?;
    super::audit(&user.name, "project deleted", &format!("{team}/{name}"));
    Ok(StatusCode::NO_CONTENT)
}
