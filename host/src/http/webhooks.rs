//! `/v1/teams/{team}/webhooks`: endpoints plus the secrets they carry, and
//! the admin's test request.

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::Json;
use super::query::{Force, Query};
use super::scope::{AsAdmin, AsMember, InTeam};
use crate::app::App;
use crate::automation::webhooks::{self, Save};
use crate::automation::{automations, webhook_test};
use crate::error::Result;

pub async fn list_webhooks(
    State(app): State<App>,
    at: InTeam<AsMember>,
) -> Result<axum::Json<Value>> {
    let team = &at.team;
    Ok(super::list_of(webhooks::list(&app.store, team).await?))
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
}

pub async fn create_webhook(
    State(app): State<App>,
    at: InTeam<AsAdmin>,
    Json(body): Json<CreateWebhook>,
) -> Result<(StatusCode, axum::Json<webhooks::Webhook>)> {
    let (user, team) = (&at.user, &at.team);
    let settings = webhooks::Settings {
        url: body.url,
        access_token_secret: body.access_token_secret,
        signing_secret: body.signing_secret,
        standard_webhooks: body.standard_webhooks,
    };
    let allow = &app.cfg.webhooks.allow_private;
    let at = (team.as_str(), body.name.as_str());
    let webhook = webhooks::save(&app.store, at, settings, allow, Save::Create).await?;
    tracing::info!(team = %team, webhook = %webhook.name, by = %user.name, "webhook created");
    Ok((StatusCode::CREATED, axum::Json(webhook)))
}

pub async fn show_webhook(
    State(app): State<App>,
    at: InTeam<AsMember>,
) -> Result<axum::Json<webhooks::Webhook>> {
    let (team, name) = (&at.team, at.param("name")?);
    Ok(axum::Json(webhooks::get(&app.store, team, &name).await?))
}

pub async fn update_webhook(
    State(app): State<App>,
    at: InTeam<AsAdmin>,
    Json(settings): Json<webhooks::Settings>,
) -> Result<axum::Json<webhooks::Webhook>> {
    let (team, name) = (&at.team, at.param("name")?);
    let allow = &app.cfg.webhooks.allow_private;
    let at = (team.as_str(), name.as_str());
    let webhook = webhooks::save(&app.store, at, settings, allow, Save::Update).await?;
    Ok(axum::Json(webhook))
}

/// Deleting a webhook that automations call is refused, naming them, unless
/// `?force=true`, which disables those automations.
pub async fn delete_webhook(
    State(app): State<App>,
    at: InTeam<AsAdmin>,
    Query(Force { force }): Query<Force>,
) -> Result<StatusCode> {
    let (user, team, name) = (&at.user, &at.team, at.param("name")?);
    automations::delete_webhook(&app.store, team, &name, force).await?;
    tracing::info!(team = %team, webhook = %name, by = %user.name, "webhook deleted");
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
    State(app): State<App>,
    at: InTeam<AsAdmin>,
    body: Option<Json<TestRequest>>,
) -> Result<axum::Json<webhook_test::Outcome>> {
    let (user, team, name) = (&at.user, &at.team, at.param("name")?);
    let webhook = webhooks::get(&app.store, team, &name).await?;
    let request = body.map(|Json(b)| b).unwrap_or_default();
    let outcome = webhook_test::run(
        &app.store,
        &app.sealer,
        &app.sender,
        team,
        &webhook,
        request.payload.as_ref(),
    )
    .await?;
    tracing::info!(team = %team, webhook = %name, by = %user.name, success = outcome.success, "webhook tested");
    Ok(axum::Json(outcome))
}
