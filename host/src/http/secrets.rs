//! `/v1/teams/{team}/secrets`: sealed values, listed by name only.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, put};
use serde::Deserialize;
use serde_json::Value;

use super::Json;
use super::query::{Force, Query};
use super::scope::{AsAdmin, AsMember, InTeam};
use super::{Reply, ReplyWith};
use crate::app::App;
use crate::automation::webhooks;
use crate::domain::secrets;
use crate::error::Result;

/// Nested under `/v1/teams/{team}/secrets`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(list_secrets))
        .route("/{name}", put(put_secret).delete(delete_secret))
}

pub async fn list_secrets(at: InTeam<AsMember>) -> Reply<Value> {
    Ok(super::list_of(
        secrets::list(&at.app.store, &at.place).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    value: String,
}

pub async fn put_secret(
    at: InTeam<AsAdmin>,
    Json(body): Json<PutSecret>,
) -> ReplyWith<secrets::SecretInfo> {
    let (user, team, name) = (&at.user, &at.place, at.param("name")?);
    let (info, created) =
        secrets::put(&at.app.store, &at.app.sealer, team, &name, &body.value).await?;
    super::audit(&user.name, "secret stored", &format!("{team}/{name}"));
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(info)))
}

/// Deleting a secret that webhooks use is refused, naming them, unless `?force=true`.
pub async fn delete_secret(at: InTeam<AsAdmin>, Query(f): Query<Force>) -> Result<StatusCode> {
    let (user, team, name) = (&at.user, &at.place, at.param("name")?);
    webhooks::delete_secret(&at.app.store, team, &name, f.force).await?;
    super::audit(&user.name, "secret deleted", &format!("{team}/{name}"));
    Ok(StatusCode::NO_CONTENT)
}
