//! The webhook test: one signed, authorised POST, exactly like a delivery,
//! with a payload the admin supplies (or a sample). Nothing is stored.
//!
//! In the test payload `$NAME` (or `${NAME}`) stands for a secret the webhook
//! carries, and `$ACCESS_TOKEN` for its access token, as the spec describes
//! (read by [`secret_refs`], as in automation payloads).

use serde::Serialize;
use serde_json::{Value, json};

use super::secret_refs::{self, Rewrite};
use super::send::{Answer, Outgoing, Sender};
use super::webhooks::{Revealed, Webhook};
use crate::domain::seal::Sealer;
use crate::error::{Error, Result};
use crate::ids;
use crate::store::Store;

/// What the caller sees.
#[cfg_attr(test, derive(serde::Deserialize))]
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// Whether the endpoint answered 2xx.
    pub success: bool,
    /// The delivery id sent, so the receiver's logs can be matched.
    pub delivery_id: String,
    /// What went wrong and what to fix, when not successful.
    pub error: Option<String>,
    /// The endpoint's answer, when there was one.
    pub response: Option<Answer>,
}

/// Sends the test request.
pub async fn run(
    store: &Store,
    sealer: &Sealer,
    sender: &Sender,
    team: &str,
    webhook: &Webhook,
    payload: Option<&Value>,
) -> Result<Outcome> {
    let secrets = webhook.reveal(store, sealer, team).await?;
    let body = match payload {
        None => sample(team, webhook),
        Some(Value::String(text)) => substitute(store, team, webhook, text, &secrets).await?,
        Some(other) => substitute(store, team, webhook, &other.to_string(), &secrets).await?,
    };
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&body) {
        return Err(Error::invalid(
            "payload",
            format!("the test payload is not valid JSON after substituting secrets: {e}"),
        ));
    }
    let delivery_id = format!("test_{}", ids::random_hex(12));
    let out = Outgoing {
        oauth: secrets.oauth.as_ref(),
        tls: secrets.tls.as_ref(),
        url: &webhook.url,
        body: body.as_bytes(),
        bearer: secrets.token.as_deref(),
        keys: secrets.keys(ids::now()),
        headers: &secrets.headers,
        delivery_id: &delivery_id,
        standard: webhook.standard_webhooks,
    };
    Ok(match sender.send(&out).await {
        Ok(answer) => Outcome {
            success: (200..300).contains(&answer.status),
            error: explain(answer.status),
            delivery_id,
            response: Some(answer),
        },
        Err(failure) => Outcome {
            success: false,
            error: Some(failure.to_string()),
            delivery_id,
            response: None,
        },
    })
}

fn explain(status: u16) -> Option<String> {
    match status {
        200..=299 => None,
        401 | 403 => Some(format!(
            "the endpoint refused the request's credentials ({status}); check the webhook's access_token_secret and signing_secret"
        )),
        _ => Some(format!("the endpoint answered {status}")),
    }
}

fn sample(team: &str, webhook: &Webhook) -> String {
    json!({
        "event_type": "TEST",
        "entity_name": team,
        "webhook": webhook.name,
        "message": "Test delivery from Switchyard",
    })
    .to_string()
}

/// The test payload with its secret references replaced by their values.
async fn substitute(
    store: &Store,
    team: &str,
    webhook: &Webhook,
    text: &str,
    secrets: &Revealed,
) -> Result<String> {
    secret_refs::resolve_in_team(
        store,
        team,
        text,
        &webhook.name,
        &secrets.by_name,
        Rewrite::Value,
    )
    .await?
    .map_err(|e| Error::invalid("payload", e.to_string()))
}
