//! `/v1/me`: the caller's own account and API keys.

use super::{Reply, ReplyWith};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::{Caller, Json};
use crate::app::App;
use crate::domain::auth;
use crate::error::Result;

pub async fn show(Caller(user): Caller) -> axum::Json<auth::User> {
    axum::Json(user)
}

pub async fn list_keys(State(app): State<App>, Caller(user): Caller) -> Reply<Value> {
    let keys = auth::list_keys(&app.store, &user).await?;
    Ok(super::list_of(keys))
}

pub async fn create_key(
    State(app): State<App>,
    Caller(user): Caller,
    Json(spec): Json<auth::KeySpec>,
) -> ReplyWith<auth::NewKey> {
    let key = auth::create_key(&app.store, &user, &spec).await?;
    tracing::info!(user = %user.name, key_id = %key.record.id, "API key created");
    Ok((StatusCode::CREATED, axum::Json(key)))
}

pub async fn revoke_key(
    State(app): State<App>,
    Caller(user): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    auth::revoke_key(&app.store, &user, &id).await?;
    tracing::info!(user = %user.name, key_id = %id, "API key revoked");
    Ok(StatusCode::NO_CONTENT)
}
