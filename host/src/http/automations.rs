//! Automations of a registry (`/v1/registries/{registry}/automations`) or a
//! project (`/v1/teams/{team}/projects/{project}/automations`): one set of
//! handlers for both, the scope read from the path.
//!
//! Reading needs membership of the registry or the project's team; saving
//! and deleting need its admin role, as the spec says.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::scope::{Params, param, scope};
use super::{Caller, Json};
use crate::app::App;
use crate::automation::automations::{self, Automation, Definition, Handle};
use crate::automation::outbox;
use crate::domain::groups::{self, Role};
use crate::error::Result;

pub async fn list(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Value>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    Ok(super::list_of(automations::list(&app.store, &scope).await?))
}

pub async fn create(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(def): Json<Definition>,
) -> Result<(StatusCode, axum::Json<Automation>)> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Admin).await?;
    automations::check(&app.store, &app.plugins, &user, &scope, &def).await?;
    let automation = automations::create(&app.store, &scope, def, &user).await?;
    tracing::info!(scope = %scope.describe(), automation = %automation.name, by = %user.name, "automation created");
    Ok((StatusCode::CREATED, axum::Json(automation)))
}

pub async fn show(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Automation>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    let name = param(&params, "name")?;
    Ok(axum::Json(
        automations::get(&app.store, &scope, &name).await?,
    ))
}

/// Replaces the whole definition, re-validated; a new `name` renames it.
pub async fn update(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(def): Json<Definition>,
) -> Result<axum::Json<Automation>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Admin).await?;
    let name = param(&params, "name")?;
    automations::get(&app.store, &scope, &name).await?;
    automations::check(&app.store, &app.plugins, &user, &scope, &def).await?;
    let automation = automations::update(&app.store, &scope, &name, def, &user).await?;
    tracing::info!(scope = %scope.describe(), automation = %automation.name, by = %user.name, "automation updated");
    Ok(axum::Json(automation))
}

pub async fn delete(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<StatusCode> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Admin).await?;
    let name = param(&params, "name")?;
    automations::delete(&app.store, &scope, &name).await?;
    tracing::info!(scope = %scope.describe(), automation = %name, by = %user.name, "automation deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// How many executions a listing returns at most.
const MAX_EXECUTIONS: usize = 1000;

/// An execution as shown: the sealed body stays inside.
fn shown(mut execution: outbox::Execution) -> outbox::Execution {
    execution.body_sealed = None;
    execution
}

fn handle(params: &std::collections::HashMap<String, String>) -> Result<Handle> {
    Ok(Handle {
        scope: scope(params)?,
        name: param(params, "name")?,
    })
}

/// The automation's executions, newest first.
pub async fn executions(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Value>> {
    let handle = handle(&params)?;
    groups::authorize(&app.store, &user, &handle.scope, Role::Member).await?;
    automations::get(&app.store, &handle.scope, &handle.name).await?;
    let list = outbox::executions(&app.store, &handle, MAX_EXECUTIONS).await?;
    Ok(super::list_of(
        list.into_iter().map(shown).collect::<Vec<_>>(),
    ))
}

pub async fn execution(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<outbox::Execution>> {
    let handle = handle(&params)?;
    groups::authorize(&app.store, &user, &handle.scope, Role::Member).await?;
    let id = param(&params, "execution")?;
    Ok(axum::Json(shown(
        outbox::execution(&app.store, &handle, &id).await?,
    )))
}

/// Sends one execution's payload again, with the same delivery id.
pub async fn replay_one(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<(StatusCode, axum::Json<outbox::Execution>)> {
    let handle = handle(&params)?;
    groups::authorize(&app.store, &user, &handle.scope, Role::Admin).await?;
    let id = param(&params, "execution")?;
    let (execution, delivery) = outbox::replay(&app.store, &handle, &id).await?;
    app.dispatcher.send_when_durable(vec![delivery]).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(shown(execution))))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayFailed {
    since_ms: u64,
}

/// Sends again every failed execution created since `since_ms`.
pub async fn replay_failed(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(body): Json<ReplayFailed>,
) -> Result<(StatusCode, axum::Json<Value>)> {
    let handle = handle(&params)?;
    groups::authorize(&app.store, &user, &handle.scope, Role::Admin).await?;
    automations::get(&app.store, &handle.scope, &handle.name).await?;
    let (replayed, deliveries) = outbox::replay_failed(&app.store, &handle, body.since_ms).await?;
    app.dispatcher.send_when_durable(deliveries).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({"replayed": replayed})),
    ))
}
