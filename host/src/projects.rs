//! Projects: owned by a team; where runs happen and project automations listen.

use serde::{Deserialize, Serialize};

use crate::auth::User;
use crate::error::{Error, Result};
use crate::store::{self, Store, keys};
use crate::{ids, names};

/// A project.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Project {
    /// Unique within the team.
    pub name: String,
    /// The owning team.
    pub team: String,
    /// Free text.
    pub description: String,
    /// The user who created it.
    pub created_by: String,
    /// Unix seconds.
    pub created_at: u64,
}

fn key(team: &str, name: &str) -> keys::Key {
    keys::prefix(&[team, name])
}

/// Creates a project in `team`.
pub fn create(
    store: &Store,
    team: &str,
    creator: &User,
    name: &str,
    description: &str,
) -> Result<Project> {
    names::validate("name", name)?;
    names::validate_text("description", description)?;
    let project = Project {
        name: name.to_string(),
        team: team.to_string(),
        description: description.to_string(),
        created_by: creator.name.clone(),
        created_at: ids::now(),
    };
    if !store::insert_new(&store.trees.projects, key(team, name), &project)? {
        return Err(Error::Conflict(format!(
            "team '{team}' already has a project named '{name}'"
        )));
    }
    Ok(project)
}

/// One project.
pub fn get(store: &Store, team: &str, name: &str) -> Result<Project> {
    store::get_json(&store.trees.projects, key(team, name))?.ok_or_else(|| {
        Error::NotFound(format!(
            "team '{team}' has no project named '{name}'; GET /v1/teams/{team}/projects lists them"
        ))
    })
}

/// The team's projects, by name.
pub fn list(store: &Store, team: &str) -> Result<Vec<Project>> {
    Ok(store::scan_json(
        &store.trees.projects,
        keys::prefix(&[team]),
    )?)
}

/// Deletes a project record.
pub fn delete(store: &Store, team: &str, name: &str) -> Result<()> {
    get(store, team, name)?;
    store
        .trees
        .projects
        .remove(key(team, name))
        .map_err(anyhow::Error::from)?;
    Ok(())
}
