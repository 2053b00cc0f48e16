//! Projects: owned by a team; where runs happen and project automations listen.

use crate::domain::auth::User;
use crate::domain::names::Named;
use crate::error::{Error, Result};
use crate::ids;
pub use crate::model::Project;
use crate::store::Store;

/// Creates a project in `team`.
pub async fn create(store: &Store, team: &str, creator: &User, new: Named<'_>) -> Result<Project> {
    new.check()?;
    let name = new.name;
    let project = Project {
        name: name.to_string(),
        team: team.to_string(),
        description: new.description.to_string(),
        created_by: creator.name.clone(),
        created_at: ids::now(),
        limits: Default::default(),
    };
    if !store.insert_project(&project).await? {
        return Err(Error::Conflict(format!(
            "team '{team}' already has a project named '{name}'"
        )));
    }
    Ok(project)
}

/// One project.
pub async fn get(store: &Store, team: &str, name: &str) -> Result<Project> {
    store.project(team, name).await?.ok_or_else(|| {
        Error::NotFound(format!(
            "team '{team}' has no project named '{name}'; GET /v1/teams/{team}/projects lists them"
        ))
    })
}

/// The team's projects, by name.
pub async fn list(store: &Store, team: &str) -> Result<Vec<Project>> {
    Ok(store.projects(team).await?)
}

/// Sets a project's inference limits.
pub async fn set_limits(
    store: &Store,
    team: &str,
    name: &str,
    limits: &crate::model::RateLimits,
) -> Result<()> {
    crate::domain::auth::limits_check(limits)?;
    if !store.set_project_limits(team, name, limits).await? {
        get(store, team, name).await?;
    }
    Ok(())
}

/// Deletes a project record.
pub async fn delete(store: &Store, team: &str, name: &str) -> Result<()> {
    get(store, team, name).await?;
    store.delete_project(team, name).await?;
    Ok(())
}
