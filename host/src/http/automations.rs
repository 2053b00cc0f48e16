//! Automations of a registry (`/v1/registries/{registry}/automations`), a
//! project (`/v1/teams/{team}/projects/{project}/automations`), or one
//! collection of either (`…/collections/{collection}/automations`): one set
//! of handlers for all, the scope read from the path.
//!
//! Reading needs membership of the registry or the project's team; saving
//! and deleting need its admin role, as the spec says.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde_json::Value;

use super::Json;
use super::query::Query;
use super::scope::{AsAdmin, AsMember, InListening, Need};
use super::{Reply, ReplyWith};
use crate::app::App;
use crate::automation::automations::{self, Automation, Definition, Handle};
use crate::automation::outbox;
use crate::error::Result;
use crate::model::ExecutionId;

/// Nested under a registry's or a project's `/automations`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(list).post(create))
        .route("/{name}", get(show).put(update).delete(delete))
        .route("/{name}/executions", get(executions))
        .route("/{name}/executions/{execution}", get(execution))
        .route("/{name}/executions/{execution}/replay", post(replay_one))
        .route("/{name}/replay", post(replay_failed))
}

pub async fn list(at: InListening<AsMember>) -> Reply<Value> {
    let scope = &at.place;
    Ok(super::list_of(
        automations::list(&at.app.store, scope).await?,
    ))
}

pub async fn create(
    at: InListening<AsAdmin>,
    Json(def): Json<Definition>,
) -> ReplyWith<Automation> {
    let (user, scope) = (&at.user, &at.place);
    automations::check(&at.app.store, &at.app.plugins, user, scope, &def).await?;
    let automation = automations::create(&at.app.store, scope, def, user).await?;
    super::audit(
        &user.name,
        "automation created",
        &format!("{} {}", scope.describe(), automation.name),
    );
    Ok((StatusCode::CREATED, axum::Json(automation)))
}

/// `…/automations/{name}`.
#[derive(serde::Deserialize)]
struct AutomationPath {
    name: String,
}

/// `…/automations/{name}/executions/{execution}`.
#[derive(serde::Deserialize)]
struct ExecutionPath {
    execution: ExecutionId,
}

pub async fn show(at: InListening<AsMember>) -> Reply<Automation> {
    let scope = &at.place;
    let AutomationPath { name } = at.path()?;
    Ok(axum::Json(
        automations::get(&at.app.store, scope, &name).await?,
    ))
}

/// Replaces the whole definition, re-validated; a new `name` renames it.
pub async fn update(at: InListening<AsAdmin>, Json(def): Json<Definition>) -> Reply<Automation> {
    let (user, scope) = (&at.user, &at.place);
    let AutomationPath { name } = at.path()?;
    automations::get(&at.app.store, scope, &name).await?;
    automations::check(&at.app.store, &at.app.plugins, user, scope, &def).await?;
    let automation = automations::update(&at.app.store, scope, &name, def, user).await?;
    super::audit(
        &user.name,
        "automation updated",
        &format!("{} {}", scope.describe(), automation.name),
    );
    Ok(axum::Json(automation))
}

pub async fn delete(at: InListening<AsAdmin>) -> Result<StatusCode> {
    let (user, scope) = (&at.user, &at.place);
    let AutomationPath { name } = at.path()?;
    automations::delete(&at.app.store, scope, &name).await?;
    super::audit(
        &user.name,
        "automation deleted",
        &format!("{} {name}", scope.describe()),
    );
    Ok(StatusCode::NO_CONTENT)
}

/// How many executions a listing returns at most.
const MAX_EXECUTIONS: usize = 1000;

/// An execution as shown: the sealed body stays inside.
fn shown(mut execution: outbox::Execution) -> outbox::Execution {
    execution.body_sealed = None;
    execution
}

fn handle<N: Need>(at: &InListening<N>) -> Result<Handle> {
    Ok(Handle {
        scope: at.place.0.clone(),
        name: at.path::<AutomationPath>()?.name,
    })
}

/// The automation's executions, newest first.
/// `?status=`: only the executions in that state.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    #[serde(default)]
    status: Option<String>,
}

/// The latest executions, newest first; `?status=Skipped` (any case) keeps
/// those of one status among them.
pub async fn executions(at: InListening<AsMember>, Query(q): Query<History>) -> Reply<Value> {
    let handle = handle(&at)?;
    let status = q.status.as_deref().map(outbox::parse_status).transpose()?;
    automations::get(&at.app.store, &handle.scope, &handle.name).await?;
    let list = outbox::executions(&at.app.store, &handle, MAX_EXECUTIONS).await?;
    Ok(super::list_of(
        list.into_iter()
            .filter(|e| status.is_none_or(|s| e.status == s))
            .map(shown)
            .collect::<Vec<_>>(),
    ))
}

pub async fn execution(at: InListening<AsMember>) -> Reply<outbox::Execution> {
    let handle = handle(&at)?;
    let ExecutionPath { execution: id } = at.path()?;
    Ok(axum::Json(shown(
        outbox::execution(&at.app.store, &handle, &id).await?,
    )))
}

/// Sends one execution's payload again, with the same delivery id.
pub async fn replay_one(at: InListening<AsAdmin>) -> ReplyWith<outbox::Execution> {
    let handle = handle(&at)?;
    let ExecutionPath { execution: id } = at.path()?;
    let (execution, delivery) = outbox::replay(&at.app.store, &handle, &id).await?;
    at.app.dispatcher.send_when_durable(vec![delivery]).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(shown(execution))))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayFailed {
    since_ms: u64,
}

/// Sends again every failed execution created since `since_ms`.
pub async fn replay_failed(
    at: InListening<AsAdmin>,
    Json(body): Json<ReplayFailed>,
) -> ReplyWith<Value> {
    let handle = handle(&at)?;
    automations::get(&at.app.store, &handle.scope, &handle.name).await?;
    let (replayed, deliveries) =
        outbox::replay_failed(&at.app.store, &handle, body.since_ms).await?;
    at.app.dispatcher.send_when_durable(deliveries).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(serde_json::json!({"replayed": replayed})),
    ))
}
