//! `/v1/admin/users`: operators create and list users.

use super::{Reply, ReplyWith};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::Json;
use super::scope::Operator;
use crate::domain::auth;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    name: String,
    #[serde(default)]
    operator: bool,
}

/// What creating a user answers: the user, and their first API key, shown
/// this once.
#[derive(serde::Serialize)]
pub struct UserCreated {
    user: auth::User,
    api_key: auth::NewKey,
}

pub async fn create(op: Operator, Json(body): Json<CreateUser>) -> ReplyWith<UserCreated> {
    let (user, api_key) = auth::create_user(&op.app.store, &body.name, body.operator).await?;
    tracing::info!(user = %user.name, operator = user.operator, by = %op.user.name, "user created");
    Ok((
        StatusCode::CREATED,
        axum::Json(UserCreated { user, api_key }),
    ))
}

pub async fn list(op: Operator) -> Reply<Value> {
    Ok(super::list_of(auth::list_users(&op.app.store).await?))
}
