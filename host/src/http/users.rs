//! `/v1/admin/users`: operators create and list users.

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Caller, Json};
use crate::app::App;
use crate::domain::auth;
use crate::error::Result;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    name: String,
    #[serde(default)]
    operator: bool,
}

pub async fn create(
    State(app): State<App>,
    caller: Caller,
    Json(body): Json<CreateUser>,
) -> Result<(StatusCode, axum::Json<Value>)> {
    caller.require_operator("create users")?;
    let (user, key) = auth::create_user(&app.store, &body.name, body.operator).await?;
    tracing::info!(user = %user.name, operator = user.operator, by = %caller.0.name, "user created");
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"user": user, "api_key": key})),
    ))
}

pub async fn list(State(app): State<App>, caller: Caller) -> Result<axum::Json<Value>> {
    caller.require_operator("list users")?;
    Ok(super::list_of(auth::list_users(&app.store).await?))
}
