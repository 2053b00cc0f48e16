//! Team webhooks: an endpoint plus references to the team's secrets.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::Deserialize;

use super::ssrf;
use super::variables::ACCESS_TOKEN;
use crate::domain::seal::Sealer;
use crate::domain::{names, secrets};
use crate::error::{Error, Result};
use crate::ids;
pub use crate::model::Webhook;
use crate::store::Store;

/// The settable fields of a webhook.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Endpoint URL.
    pub url: String,
    /// Access-token secret name.
    #[serde(default)]
    pub access_token_secret: Option<String>,
    /// Signing secret name.
    #[serde(default)]
    pub signing_secret: Option<String>,
    /// Also send Standard Webhooks headers.
    #[serde(default)]
    pub standard_webhooks: bool,
}

impl Webhook {
    /// Opens the secrets it carries, for one send. A secret deleted since
    /// the webhook was saved is a conflict that says what to fix.
    pub async fn reveal(&self, store: &Store, sealer: &Sealer, team: &str) -> Result<Revealed> {
        let open = async |name: &Option<String>| -> Result<Option<String>> {
            let Some(name) = name else { return Ok(None) };
            match secrets::reveal(store, sealer, team, name).await {
                Ok(value) => Ok(Some(value)),
                Err(Error::NotFound(_)) => Err(Error::Conflict(format!(
                    "webhook '{}' uses secret '{name}', which no longer exists; create the secret or update the webhook",
                    self.name
                ))),
                Err(e) => Err(e),
            }
        };
        let token = open(&self.access_token_secret).await?;
        let signing = open(&self.signing_secret).await?;
        let mut by_name = BTreeMap::new();
        if let (Some(name), Some(value)) = (&self.access_token_secret, &token) {
            by_name.insert(ACCESS_TOKEN.to_string(), value.clone());
            by_name.insert(name.clone(), value.clone());
        }
        if let (Some(name), Some(value)) = (&self.signing_secret, &signing) {
            by_name.insert(name.clone(), value.clone());
        }
        Ok(Revealed {
            token,
            signing,
            by_name,
        })
    }
}

/// A webhook's secrets, opened.
pub struct Revealed {
    /// The access token's value.
    pub token: Option<String>,
    /// The signing secret's value.
    pub signing: Option<String>,
    /// Every value by the names a payload uses: `ACCESS_TOKEN` and the
    /// token's own name for the token, the signing secret's name.
    pub by_name: BTreeMap<String, String>,
}

async fn check(store: &Store, team: &str, settings: &Settings, allow: &[IpNet]) -> Result<()> {
    ssrf::check_url(settings.url.trim(), allow).map_err(|m| Error::invalid("url", m))?;
    for (field, secret) in [
        ("access_token_secret", &settings.access_token_secret),
        ("signing_secret", &settings.signing_secret),
    ] {
        if let Some(secret) = secret
            && !secrets::exists(store, team, secret).await?
        {
            return Err(Error::invalid(
                field,
                format!(
                    "team '{team}' has no secret named '{secret}'; create it first with PUT /v1/teams/{team}/secrets/{secret}"
                ),
            ));
        }
    }
    if settings.access_token_secret.is_some()
        && settings.access_token_secret == settings.signing_secret
    {
        return Err(Error::invalid(
            "signing_secret",
            "the signing secret must be a different secret from the access token",
        ));
    }
    Ok(())
}

/// Whether a save makes a new webhook or changes an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Save {
    /// A new webhook; a taken name is a conflict.
    Create,
    /// New settings for a webhook that exists; it is enabled again.
    Update,
}

/// Creates a webhook or replaces its settings, after checking them.
pub async fn save(
    store: &Store,
    (team, name): (&str, &str),
    settings: Settings,
    allow: &[IpNet],
    save: Save,
) -> Result<Webhook> {
    let old = match save {
        Save::Create => {
            names::validate("name", name)?;
            None
        }
        Save::Update => Some(get(store, team, name).await?),
    };
    check(store, team, &settings, allow).await?;
    let now = ids::now();
    let webhook = Webhook {
        name: name.to_string(),
        url: settings.url.trim().to_string(),
        access_token_secret: settings.access_token_secret,
        signing_secret: settings.signing_secret,
        standard_webhooks: settings.standard_webhooks,
        disabled_reason: None,
        created_at: old.map_or(now, |old| old.created_at),
        updated_at: now,
    };
    if save == Save::Update {
        store.put_webhook(team, &webhook).await?;
    } else if !store.insert_webhook(team, &webhook).await? {
        return Err(Error::Conflict(format!(
            "team '{team}' already has a webhook named '{name}'"
        )));
    }
    Ok(webhook)
}

/// Disables a webhook (its endpoint answered 410 Gone).
pub async fn disable(store: &Store, team: &str, name: &str, reason: &str) -> Result<()> {
    let tx = store.begin().await?;
    let mut webhook = tx
        .webhook(team, name)
        .await?
        .ok_or_else(|| not_found(team, name))?;
    webhook.disabled_reason = Some(reason.to_string());
    tx.put_webhook(team, &webhook).await?;
    tx.commit().await?;
    Ok(())
}

/// One webhook.
pub async fn get(store: &Store, team: &str, name: &str) -> Result<Webhook> {
    let found = store.webhook(team, name).await?;
    found.ok_or_else(|| not_found(team, name))
}

fn not_found(team: &str, name: &str) -> Error {
    Error::NotFound(format!("team '{team}' has no webhook named '{name}'"))
}

/// The team's webhooks, by name.
pub async fn list(store: &Store, team: &str) -> Result<Vec<Webhook>> {
    Ok(store.webhooks(team).await?)
}

/// Deletes a webhook.
pub async fn delete(store: &Store, team: &str, name: &str) -> Result<()> {
    let deleted = store.delete_webhook(team, name).await?;
    deleted.then_some(()).ok_or_else(|| not_found(team, name))
}

/// Deletes a team secret. One that webhooks use is refused, naming them,
/// unless `force`.
pub async fn delete_secret(store: &Store, team: &str, name: &str, force: bool) -> Result<()> {
    let users = using_secret(store, team, name).await?;
    if !users.is_empty() && !force {
        return Err(Error::Conflict(format!(
            "secret '{name}' is used by webhook(s) {}; change them first, or delete anyway with ?force=true",
            users.join(", ")
        )));
    }
    secrets::delete(store, team, name).await
}

/// Names of the team's webhooks that use `secret`.
pub async fn using_secret(store: &Store, team: &str, secret: &str) -> Result<Vec<String>> {
    Ok(list(store, team)
        .await?
        .into_iter()
        .filter(|w| {
            w.access_token_secret.as_deref() == Some(secret)
                || w.signing_secret.as_deref() == Some(secret)
        })
        .map(|w| w.name)
        .collect())
}
