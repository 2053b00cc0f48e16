//! `/v1/teams`: teams, members and secrets.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::query::Query;
use super::{Caller, Json};
use crate::app::App;
use crate::automation::webhooks;
use crate::error::{Error, Result};
use crate::teams::{self, Role};
use crate::{auth, secrets};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTeam {
    name: String,
}

pub async fn create(
    State(app): State<App>,
    Caller(user): Caller,
    Json(body): Json<CreateTeam>,
) -> Result<(StatusCode, axum::Json<Value>)> {
    let team = teams::create(&app.store, &user, &body.name)?;
    tracing::info!(team = %team.name, by = %user.name, "team created");
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"name": team.name, "created_at": team.created_at, "role": Role::Admin})),
    ))
}

pub async fn list(State(app): State<App>, Caller(user): Caller) -> Result<axum::Json<Value>> {
    let data: Vec<Value> = teams::list_for(&app.store, &user)?
        .into_iter()
        .map(|(team, role)| json!({"name": team.name, "created_at": team.created_at, "role": role}))
        .collect();
    Ok(super::list_of(data))
}

pub async fn show(
    State(app): State<App>,
    Caller(user): Caller,
    Path(team): Path<String>,
) -> Result<axum::Json<Value>> {
    let role = teams::require(&app.store, &user, &team, Role::Member)?;
    let record = teams::get(&app.store, &team)?;
    Ok(axum::Json(
        json!({"name": record.name, "created_at": record.created_at, "role": role}),
    ))
}

pub async fn members(
    State(app): State<App>,
    Caller(user): Caller,
    Path(team): Path<String>,
) -> Result<axum::Json<Value>> {
    teams::require(&app.store, &user, &team, Role::Member)?;
    Ok(super::list_of(teams::members(&app.store, &team)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetMember {
    role: Role,
}

pub async fn set_member(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, member)): Path<(String, String)>,
    Json(body): Json<SetMember>,
) -> Result<axum::Json<teams::Member>> {
    teams::require(&app.store, &user, &team, Role::Admin)?;
    let target = auth::find_user(&app.store, &member)?;
    Ok(axum::Json(teams::set_member(
        &app.store, &team, &target, body.role,
    )?))
}

pub async fn remove_member(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, member)): Path<(String, String)>,
) -> Result<StatusCode> {
    teams::require(&app.store, &user, &team, Role::Admin)?;
    let target = auth::find_user(&app.store, &member)?;
    teams::remove_member(&app.store, &team, &target)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_secrets(
    State(app): State<App>,
    Caller(user): Caller,
    Path(team): Path<String>,
) -> Result<axum::Json<Value>> {
    teams::require(&app.store, &user, &team, Role::Member)?;
    Ok(super::list_of(secrets::list(&app.store, &team)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    value: String,
}

pub async fn put_secret(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, name)): Path<(String, String)>,
    Json(body): Json<PutSecret>,
) -> Result<(StatusCode, axum::Json<secrets::SecretInfo>)> {
    teams::require(&app.store, &user, &team, Role::Admin)?;
    let (info, created) = secrets::put(&app.store, &app.sealer, &team, &name, &body.value)?;
    tracing::info!(team = %team, secret = %name, by = %user.name, "secret stored");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(info)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Force {
    #[serde(default)]
    force: bool,
}

/// Deleting a secret that webhooks use is refused, naming them, unless `?force=true`.
pub async fn delete_secret(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, name)): Path<(String, String)>,
    Query(Force { force }): Query<Force>,
) -> Result<StatusCode> {
    teams::require(&app.store, &user, &team, Role::Admin)?;
    let users = webhooks::using_secret(&app.store, &team, &name)?;
    if !users.is_empty() && !force {
        return Err(Error::Conflict(format!(
            "secret '{name}' is used by webhook(s) {}; change them first, or delete anyway with ?force=true",
            users.join(", ")
        )));
    }
    secrets::delete(&app.store, &team, &name)?;
    tracing::info!(team = %team, secret = %name, by = %user.name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_webhooks(
    State(app): State<App>,
    Caller(user): Caller,
    Path(team): Path<String>,
) -> Result<axum::Json<Value>> {
    teams::require(&app.store, &user, &team, Role::Member)?;
    Ok(super::list_of(webhooks::list(&app.store, &team)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    name: String,
    url: String,
    #[serde(default)]
    access_token_secret: Option<String>,
    #[serde(default)]
    signing_secret: Option<String>,
}

pub async fn create_webhook(
    State(app): State<App>,
    Caller(user): Caller,
    Path(team): Path<String>,
    Json(body): Json<CreateWebhook>,
) -> Result<(StatusCode, axum::Json<webhooks::Webhook>)> {
    teams::require(&app.store, &user, &team, Role::Admin)?;
    let settings = webhooks::Settings {
        url: body.url,
        access_token_secret: body.access_token_secret,
        signing_secret: body.signing_secret,
    };
    let webhook = webhooks::create(
        &app.store,
        &team,
        &body.name,
        settings,
        &app.cfg.webhooks.allow_private,
    )?;
    tracing::info!(team = %team, webhook = %webhook.name, by = %user.name, "webhook created");
    Ok((StatusCode::CREATED, axum::Json(webhook)))
}

pub async fn show_webhook(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, name)): Path<(String, String)>,
) -> Result<axum::Json<webhooks::Webhook>> {
    teams::require(&app.store, &user, &team, Role::Member)?;
    Ok(axum::Json(webhooks::get(&app.store, &team, &name)?))
}

pub async fn update_webhook(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, name)): Path<(String, String)>,
    Json(settings): Json<webhooks::Settings>,
) -> Result<axum::Json<webhooks::Webhook>> {
    teams::require(&app.store, &user, &team, Role::Admin)?;
    Ok(axum::Json(webhooks::update(
        &app.store,
        &team,
        &name,
        settings,
        &app.cfg.webhooks.allow_private,
    )?))
}

pub async fn delete_webhook(
    State(app): State<App>,
    Caller(user): Caller,
    Path((team, name)): Path<(String, String)>,
) -> Result<StatusCode> {
    teams::require(&app.store, &user, &team, Role::Admin)?;
    webhooks::delete(&app.store, &team, &name)?;
    Ok(StatusCode::NO_CONTENT)
}
