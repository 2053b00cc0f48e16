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
use crate::domain::secrets::{self, SecretInfo};
use crate::error::{Error, Result};

/// Nested under `/v1/teams/{team}/secrets`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(list_secrets))
        .route("/{name}", put(put_secret).delete(delete_secret))
}

/// `…/secrets/{name}`.
#[derive(serde::Deserialize)]
struct SecretPath {
    name: String,
}

pub async fn list_secrets(at: InTeam<AsMember>) -> Reply<Value> {
    Ok(super::list_of(
        secrets::list(&at.app.store, &at.place).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    #[serde(default)]
    value: Option<String>,
    /// `ed25519`: the host makes a signing key, and answers its public key.
    #[serde(default)]
    generate: Option<String>,
}

pub async fn put_secret(at: InTeam<AsAdmin>, Json(body): Json<PutSecret>) -> ReplyWith<SecretInfo> {
    let (user, team, name) = (&at.user, &at.place, at.path::<SecretPath>()?.name);
    let (store, sealer) = (&at.app.store, &at.app.sealer);
    let (info, created) = match (body.value, body.generate.as_deref()) {
        (Some(value), None) => secrets::put(store, sealer, team, &name, &value).await?,
        (None, Some("ed25519")) => {
            let (info, created, public) =
                webhooks::generate_signing_key(store, sealer, team, &name).await?;
            let public_key = Some(public);
            (SecretInfo { public_key, ..info }, created)
        }
        (None, Some(other)) => {
            return Err(Error::invalid(
                "generate",
                format!("the host generates 'ed25519' keys, not '{other}'; send a value instead"),
            ));
        }
        _ => {
            return Err(Error::invalid(
                "value",
                "send either a value or {\"generate\": \"ed25519\"}",
            ));
        }
    };
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
    let (user, team, name) = (&at.user, &at.place, at.path::<SecretPath>()?.name);
    webhooks::delete_secret(&at.app.store, team, &name, f.force).await?;
    super::audit(&user.name, "secret deleted", &format!("{team}/{name}"));
    Ok(StatusCode::NO_CONTENT)
}
