//! `/v1/teams/{team}/projects`: projects owned by a team.

use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;

use super::Json;
use super::query::{Force, Query};
use super::scope::{AsAdmin, AsMember, InTeam};
use crate::app::App;
use crate::automation::automations;
use crate::domain::projects::{self, Project};
use crate::error::{Error, Result};
use crate::model::Scope;

/// Any team member may create a project.
pub async fn create(
    State(app): State<App>,
    at: InTeam<AsMember>,
    Json(body): Json<super::Create>,
) -> Result<(StatusCode, axum::Json<Project>)> {
    let (user, team) = (&at.user, &at.team);
    let project = projects::create(&app.store, team, user, body.named()).await?;
    tracing::info!(team = %team, project = %project.name, by = %user.name, "project created");
    Ok((StatusCode::CREATED, axum::Json(project)))
}

pub async fn list(State(app): State<App>, at: InTeam<AsMember>) -> Result<axum::Json<Value>> {
    let team = &at.team;
    Ok(super::list_of(projects::list(&app.store, team).await?))
}

pub async fn show(State(app): State<App>, at: InTeam<AsMember>) -> Result<axum::Json<Project>> {
    let (team, name) = (&at.team, at.param("name")?);
    Ok(axum::Json(projects::get(&app.store, team, &name).await?))
}

/// A team admin deletes a project; one with automations needs `?force=true`,
/// which deletes them too.
pub async fn delete(
    State(app): State<App>,
    at: InTeam<AsAdmin>,
    Query(Force { force }): Query<Force>,
) -> Result<StatusCode> {
    let (user, team, name) = (&at.user, &at.team, at.param("name")?);
    projects::get(&app.store, team, &name).await?;
    let scope = Scope::Project {
        team: team.clone(),
        project: name.clone(),
    };
    let dependants = automations::list(&app.store, &scope).await?;
    if !dependants.is_empty() && !force {
        let names: Vec<&str> = dependants.iter().map(|a| a.name.as_str()).collect();
        return Err(Error::Conflict(format!(
            "project '{team}/{name}' has automations {}; delete them first, or delete everything with ?force=true",
            names.join(", ")
        )));
    }
    automations::delete_scope(&app.store, &scope).await?;
    projects::delete(&app.store, team, &name).await?;
    tracing::info!(team = %team, project = %name, by = %user.name, "project deleted");
    Ok(StatusCode::NO_CONTENT)
}
