//! `/v1/teams/{team}/webhooks`: endpoints plus the secrets they carry, and
//! the admin's test request.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;

use super::Json;
use super::query::{Force, Query};
use super::scope::{AsAdmin, AsMember, InTeam};
use super::{Reply, ReplyWith};
use crate::app::App;
use crate::automation::webhooks::{self, Save};
use crate::automation::{automations, webhook_test};
use crate::error::Result;

/// Nested under `/v1/teams/{team}/webhooks`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(list_webhooks).post(create_webhook))
        .route(
            "/{name}",
            get(show_webhook).put(update_webhook).delete(delete_webhook),
        )
        .route("/{name}/test", post(test_webhook))
        .route("/{name}/rotate", post(rotate_webhook))
        .route("/{name}/public-key", get(public_key))
}

/// `…/webhooks/{name}`.
#[derive(serde::Deserialize)]
struct WebhookPath {
    name: String,
}

pub async fn list_webhooks(at: InTeam<AsMember>) -> Reply<Value> {
    Ok(super::list_of(
        webhooks::list(&at.app.store, &at.place).await?,
    ))
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
    #[serde(default)]
    standard_webhooks: bool,
    #[serde(default)]
    signing_key_secret: Option<String>,
    #[serde(default)]
    previous_signing_secret: Option<String>,
    #[serde(default)]
    previous_signing_key_secret: Option<String>,
    #[serde(default)]
    previous_until: Option<u64>,
    #[serde(default)]
    max_per_second: Option<f64>,
    #[serde(default)]
    circuit_breaker: Option<crate::model::BreakerSettings>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    retry_schedule_ms: Option<Vec<u64>>,
    #[serde(default)]
    disable_after_hours: Option<f64>,
    #[serde(default)]
    auth: Option<crate::model::WebhookAuth>,
    #[serde(default)]
    tls: Option<crate::model::WebhookTls>,
    #[serde(default)]
    ordering: crate::model::Ordering,
}

pub async fn create_webhook(
    at: InTeam<AsAdmin>,
    Json(body): Json<CreateWebhook>,
) -> ReplyWith<webhooks::Webhook> {
    let (user, team) = (&at.user, &at.place);
    let settings = webhooks::Settings {
        url: body.url,
        access_token_secret: body.access_token_secret,
        signing_secret: body.signing_secret,
        standard_webhooks: body.standard_webhooks,
        signing_key_secret: body.signing_key_secret,
        previous_signing_secret: body.previous_signing_secret,
        previous_signing_key_secret: body.previous_signing_key_secret,
        previous_until: body.previous_until,
        max_per_second: body.max_per_second,
        circuit_breaker: body.circuit_breaker,
        headers: body.headers,
        retry_schedule_ms: body.retry_schedule_ms,
        disable_after_hours: body.disable_after_hours,
        auth: body.auth,
        tls: body.tls,
        ordering: body.ordering,
    };
    let allow = &at.app.cfg.webhooks.allow_private;
    let named = (team.as_str(), body.name.as_str());
    let (store, sealer) = (&at.app.store, &at.app.sealer);
    let webhook = webhooks::save(store, sealer, named, settings, allow, Save::Create).await?;
    super::audit(
        &user.name,
        "webhook created",
        &format!("{team}/{}", webhook.name),
    );
    Ok((StatusCode::CREATED, axum::Json(webhook)))
}

/// A webhook with its circuit and since when it has failed, as this host
/// sees them.
#[derive(serde::Serialize)]
pub struct Shown {
    #[serde(flatten)]
    pub(super) webhook: webhooks::Webhook,
    pub(super) circuit: crate::model::Circuit,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) failing_since_ms: Option<u64>,
}

pub async fn show_webhook(at: InTeam<AsMember>) -> Reply<Shown> {
    let (team, name) = (&at.place, at.path::<WebhookPath>()?.name);
    let webhook = webhooks::get(&at.app.store, team, &name).await?;
    let health = at.app.dispatcher.health(team, &name).await?;
    Ok(axum::Json(Shown {
        webhook,
        circuit: health.circuit,
        failing_since_ms: health.failing_since_ms,
    }))
}

pub async fn update_webhook(
    at: InTeam<AsAdmin>,
    Json(settings): Json<webhooks::Settings>,
) -> Reply<webhooks::Webhook> {
    let (team, name) = (&at.place, at.path::<WebhookPath>()?.name);
    let allow = &at.app.cfg.webhooks.allow_private;
    let named = (team.as_str(), name.as_str());
    let (store, sealer) = (&at.app.store, &at.app.sealer);
    let webhook = webhooks::save(store, sealer, named, settings, allow, Save::Update).await?;
    at.app.dispatcher.wake();
    Ok(axum::Json(webhook))
}

/// Rotates the signing secrets; the replaced ones sign as well for the
/// overlap.
pub async fn rotate_webhook(
    at: InTeam<AsAdmin>,
    Json(rotation): Json<webhooks::Rotation>,
) -> Reply<webhooks::Webhook> {
    let (user, team, name) = (&at.user, &at.place, at.path::<WebhookPath>()?.name);
    let allow = &at.app.cfg.webhooks.allow_private;
    let named = (team.as_str(), name.as_str());
    let (store, sealer) = (&at.app.store, &at.app.sealer);
    let webhook = webhooks::rotate(store, sealer, named, rotation, allow).await?;
    super::audit(
        &user.name,
        "webhook signing rotated",
        &format!("{team}/{name}"),
    );
    Ok(axum::Json(webhook))
}

/// The Ed25519 public keys receivers verify `v1a` signatures with.
pub async fn public_key(at: InTeam<AsMember>) -> Reply<webhooks::PublicKeys> {
    let (team, name) = (&at.place, at.path::<WebhookPath>()?.name);
    let keys = webhooks::public_keys(&at.app.store, &at.app.sealer, team, &name).await?;
    Ok(axum::Json(keys))
}

/// Deleting a webhook that automations call is refused, naming them, unless
/// `?force=true`, which disables those automations.
pub async fn delete_webhook(at: InTeam<AsAdmin>, Query(f): Query<Force>) -> Result<StatusCode> {
    let (user, team, name) = (&at.user, &at.place, at.path::<WebhookPath>()?.name);
    automations::delete_webhook(&at.app.store, team, &name, f.force).await?;
    super::audit(&user.name, "webhook deleted", &format!("{team}/{name}"));
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TestRequest {
    /// JSON (a string of JSON text, or any JSON value) with `$NAME` secret references.
    #[serde(default)]
    payload: Option<Value>,
}

/// Sends a signed test request; the endpoint's answer comes back, the
/// payload is not stored.
pub async fn test_webhook(
    at: InTeam<AsAdmin>,
    body: Option<Json<TestRequest>>,
) -> Reply<webhook_test::Outcome> {
    let (user, team, name) = (&at.user, &at.place, at.path::<WebhookPath>()?.name);
    let webhook = webhooks::get(&at.app.store, team, &name).await?;
    let request = body.map(|Json(b)| b).unwrap_or_default();
    let outcome = webhook_test::run(
        &at.app.store,
        &at.app.sealer,
        &at.app.sender,
        team,
        &webhook,
        request.payload.as_ref(),
    )
    .await?;
    tracing::info!(team = %team, webhook = %name, by = %user.name, success = outcome.success, "webhook tested");
    Ok(axum::Json(outcome))
}
