//! Automations of a registry (`/v1/registries/{registry}/automations`) or a
//! project (`/v1/teams/{team}/projects/{project}/automations`): one set of
//! handlers for both, the scope read from the path.
//!
//! Reading needs membership of the registry or the project's team; saving
//! and deleting need its admin role, as the spec says.

use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;

use super::Json;
use super::scope::{AsAdmin, AsMember, InScope, Need};
use crate::app::App;
use crate::automation::automations::{self, Automation, Definition, Handle};
use crate::automation::outbox;
use crate::error::Result;

pub async fn list(State(app): State<App>, at: InScope<AsMember>) -> Result<axum::Json<Value>> {
    let scope = &at.scope;
    Ok(super::list_of(automations::list(&app.store, scope).await?))
}

pub async fn create(
    State(app): State<App>,
    at: InScope<AsAdmin>,
    Json(def): Json<Definition>,
) -> Result<(StatusCode, axum::Json<Automation>)> {
    let (user, scope) = (&at.user, &at.scope);
    automations::check(&app.store, &app.plugins, user, scope, &def).await?;
    let automation = automations::create(&app.store, scope, def, user).await?;
    tracing::info!(scope = %scope.describe(), automation = %automation.name, by = %user.name, "automation created");
    Ok((StatusCode::CREATED, axum::Json(automation)))
}

pub async fn show(State(app): State<App>, at: InScope<AsMember>) -> Result<axum::Json<Automation>> {
    let scope = &at.scope;
    let name = at.param("name")?;
    Ok(axum::Json(
        automations::get(&app.store, scope, &name).await?,
    ))
}

/// Replaces the whole definition, re-validated; a new `name` renames it.
pub async fn update(
    State(app): State<App>,
    at: InScope<AsAdmin>,
    Json(def): Json<Definition>,
) -> Result<axum::Json<Automation>> {
    let (user, scope) = (&at.user, &at.scope);
    let name = at.param("name")?;
    automations::get(&app.store, scope, &name).await?;
    automations::check(&app.store, &app.plugins, user, scope, &def).await?;
    let automation = automations::update(&app.store, scope, &name, def, user).await?;
    tracing::info!(scope = %scope.describe(), automation = %automation.name, by = %user.name, "automation updated");
    Ok(axum::Json(automation))
}

pub async fn delete(State(app): State<App>, at: InScope<AsAdmin>) -> Result<StatusCode> {
    let (user, scope) = (&at.user, &at.scope);
    let name = at.param("name")?;
    automations::delete(&app.store, scope, &name).await?;
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

fn handle<N: Need>(at: &InScope<N>) -> Result<Handle> {
    Ok(Handle {
        scope: at.scope.clone(),
        name: at.param("name")?,
    })
}

/// The automation's executions, newest first.
pub async fn executions(
    State(app): State<App>,
    at: InScope<AsMember>,
) -> Result<axum::Json<Value>> {
    let handle = handle(&at)?;
    automations::get(&app.store, &handle.scope, &handle.name).await?;
    let list = outbox::executions(&app.store, &handle, MAX_EXECUTIONS).await?;
    Ok(super::list_of(
        list.into_iter().map(shown).collect::<Vec<_>>(),
    ))
}

pub async fn execution(
    State(app): State<App>,
    at: InScope<AsMember>,
) -> Result<axum::Json<outbox::Execution>> {
    let handle = handle(&at)?;
    let id = at.param("execution")?;
    Ok(axum::Json(shown(
        outbox::execution(&app.store, &handle, &id).await?,
    )))
}

/// Sends one execution's payload again, with the same delivery id.
pub async fn replay_one(
    State(app): State<App>,
    at: InScope<AsAdmin>,
) -> Result<(StatusCode, axum::Json<outbox::Execution>)> {
    let handle = handle(&at)?;
    let id = at.param("execution")?;
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
    at: InScope<AsAdmin>,
    Json(body): Json<ReplayFailed>,
) -> Result<(StatusCode, axum::Json<Value>)> {
    let handle = handle(&at)?;
    automations::get(&app.store, &handle.scope, &handle.name).await?;
    let (replayed, deliveries) = outbox::replay_failed(&app.store, &handle, body.since_ms).await?;
    app.dispatcher.send_when_durable(deliveries).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({"replayed": replayed})),
    ))
}
