//! `/v1/teams/{team}/secrets`: sealed values, listed by name only.

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::Json;
use super::query::{Force, Query};
use super::scope::{AsAdmin, AsMember, InTeam};
use crate::app::App;
use crate::automation::webhooks;
use crate::domain::secrets;
use crate::error::Result;

pub async fn list_secrets(
    State(app): State<App>,
    at: InTeam<AsMember>,
) -> Result<axum::Json<Value>> {
    let team = &at.team;
    Ok(super::list_of(secrets::list(&app.store, team).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    value: String,
}

pub async fn put_secret(
    State(app): State<App>,
    at: InTeam<AsAdmin>,
    Json(body): Json<PutSecret>,
) -> Result<(StatusCode, axum::Json<secrets::SecretInfo>)> {
    let (user, team, name) = (&at.user, &at.team, at.param("name")?);
    let (info, created) = secrets::put(&app.store, &app.sealer, team, &name, &body.value).await?;
    tracing::info!(team = %team, secret = %name, by = %user.name, "secret stored");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(info)))
}

/// Deleting a secret that webhooks use is refused, naming them, unless `?force=true`.
pub async fn delete_secret(
    State(app): State<App>,
    at: InTeam<AsAdmin>,
    Query(Force { force }): Query<Force>,
) -> Result<StatusCode> {
    let (user, team, name) = (&at.user, &at.team, at.param("name")?);
    webhooks::delete_secret(&app.store, team, &name, force).await?;
    tracing::info!(team = %team, secret = %name, by = %user.name, "secret deleted");
    Ok(StatusCode::NO_CONTENT)
}
