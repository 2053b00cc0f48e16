//! Automations of a registry (`/v1/registries/{registry}/automations`) or a
//! project (`/v1/teams/{team}/projects/{project}/automations`): one set of
//! handlers for both, the scope read from the path.
//!
//! Reading needs membership of the registry or the project's team; saving
//! and deleting need its admin role, as the spec says.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::{Caller, Json};
use crate::app::App;
use crate::automation::automations::{self, Automation, Definition, Scope};
use crate::error::{Error, Result};
use crate::groups::Role;

type Params = Path<HashMap<String, String>>;

fn param(params: &HashMap<String, String>, name: &str) -> Result<String> {
    params
        .get(name)
        .cloned()
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("route lacks {{{name}}}")))
}

fn scope(params: &HashMap<String, String>) -> Result<Scope> {
    Ok(match params.get("registry") {
        Some(registry) => Scope::Registry {
            registry: registry.clone(),
        },
        None => Scope::Project {
            team: param(params, "team")?,
            project: param(params, "project")?,
        },
    })
}

pub async fn list(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Value>> {
    let scope = scope(&params)?;
    scope.authorize(&app.store, &user, Role::Member)?;
    Ok(super::list_of(automations::list(&app.store, &scope)?))
}

pub async fn create(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(def): Json<Definition>,
) -> Result<(StatusCode, axum::Json<Automation>)> {
    let scope = scope(&params)?;
    scope.authorize(&app.store, &user, Role::Admin)?;
    automations::check(&app.store, &app.plugins, &user, &scope, &def).await?;
    let automation = automations::create(&app.store, &scope, def, &user)?;
    tracing::info!(scope = %scope.describe(), automation = %automation.name, by = %user.name, "automation created");
    Ok((StatusCode::CREATED, axum::Json(automation)))
}

pub async fn show(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Automation>> {
    let scope = scope(&params)?;
    scope.authorize(&app.store, &user, Role::Member)?;
    let name = param(&params, "name")?;
    Ok(axum::Json(automations::get(&app.store, &scope, &name)?))
}

/// Replaces the whole definition, re-validated; a new `name` renames it.
pub async fn update(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(def): Json<Definition>,
) -> Result<axum::Json<Automation>> {
    let scope = scope(&params)?;
    scope.authorize(&app.store, &user, Role::Admin)?;
    let name = param(&params, "name")?;
    automations::get(&app.store, &scope, &name)?;
    automations::check(&app.store, &app.plugins, &user, &scope, &def).await?;
    let automation = automations::update(&app.store, &scope, &name, def, &user)?;
    tracing::info!(scope = %scope.describe(), automation = %automation.name, by = %user.name, "automation updated");
    Ok(axum::Json(automation))
}

pub async fn delete(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<StatusCode> {
    let scope = scope(&params)?;
    scope.authorize(&app.store, &user, Role::Admin)?;
    let name = param(&params, "name")?;
    automations::delete(&app.store, &scope, &name)?;
    tracing::info!(scope = %scope.describe(), automation = %name, by = %user.name, "automation deleted");
    Ok(StatusCode::NO_CONTENT)
}
