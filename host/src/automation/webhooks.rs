//! Team webhooks: an endpoint plus references to the team's secrets.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::Deserialize;

use ed25519_dalek::SigningKey;

use crate::model::BreakerSettings;

use reqwest::header::{HeaderName, HeaderValue};

use super::headers;
use super::oauth;
use super::send::ClientTls;
use super::signature::{self, Keys};
use super::ssrf;
use super::variables::ACCESS_TOKEN;
use crate::domain::seal::Sealer;
use crate::domain::{names, secrets};
use crate::error::{Error, Result};
use crate::ids;
pub use crate::model::Webhook;
use crate::model::{Ordering, WebhookAuth, WebhookRef, WebhookTls};
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
    /// Ed25519 key secret name (`v1a` signatures).
    #[serde(default)]
    pub signing_key_secret: Option<String>,
    /// During a rotation: the previous signing secret's name.
    #[serde(default)]
    pub previous_signing_secret: Option<String>,
    /// During a rotation: the previous Ed25519 key secret's name.
    #[serde(default)]
    pub previous_signing_key_secret: Option<String>,
    /// Unix seconds: when the previous secrets stop signing.
    #[serde(default)]
    pub previous_until: Option<u64>,
    /// Pace deliveries to at most this many a second.
    #[serde(default)]
    pub max_per_second: Option<f64>,
    /// The circuit breaker's settings, when not the defaults.
    #[serde(default)]
    pub circuit_breaker: Option<BreakerSettings>,
    /// Headers sent on every delivery; values may name secrets as `$NAME`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The waits before each attempt, when not the host's schedule.
    #[serde(default)]
    pub retry_schedule_ms: Option<Vec<u64>>,
    /// Disable it once every attempt has failed for this many hours.
    #[serde(default)]
    pub disable_after_hours: Option<f64>,
    /// How it gets its receiver's token, beyond a static one.
    #[serde(default)]
    pub auth: Option<WebhookAuth>,
    /// The client certificate it presents, and the CA it trusts.
    #[serde(default)]
    pub tls: Option<WebhookTls>,
    /// `fifo`: one delivery at a time, in the order of their events.
    #[serde(default)]
    pub ordering: Ordering,
}

/// The longest a rotation may overlap: 30 days.
pub const MAX_OVERLAP_S: u64 = 30 * 24 * 60 * 60;

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
        let key = async |name: &Option<String>| -> Result<Option<SigningKey>> {
            let Some(value) = open(name).await? else {
                return Ok(None);
            };
            signature::ed25519_key(&value).map(Some).map_err(|why| {
                Error::Conflict(format!(
                    "webhook '{}' signs with secret '{}', which {why}",
                    self.name,
                    name.as_deref().unwrap_or_default()
                ))
            })
        };
        let overlapping = self.previous_until.is_some_and(|until| until > ids::now());
        let (previous_signing, previous_key) = match overlapping {
            true => (
                open(&self.previous_signing_secret).await?,
                key(&self.previous_signing_key_secret).await?,
            ),
            false => (None, None),
        };
        let mut named = BTreeMap::new();
        for name in headers::secrets(&self.headers) {
            if !named.contains_key(name) {
                let value = open(&Some(name.to_string())).await?.unwrap_or_default();
                named.insert(name.to_string(), value);
            }
        }
        let headers = headers::resolve(&self.headers, &named).map_err(|why| {
            Error::Conflict(format!(
                "webhook '{}': {why}; change the secret or the header",
                self.name
            ))
        })?;
        let mut by_name = BTreeMap::new();
        if let (Some(name), Some(value)) = (&self.access_token_secret, &token) {
            by_name.insert(ACCESS_TOKEN.to_string(), value.clone());
            by_name.insert(name.clone(), value.clone());
        }
        if let (Some(name), Some(value)) = (&self.signing_secret, &signing) {
            by_name.insert(name.clone(), value.clone());
        }
        let oauth = match &self.auth {
            None => None,
            Some(WebhookAuth::Oauth2ClientCredentials {
                token_url,
                client_id,
                client_secret_secret,
                scope,
            }) => Some(oauth::Client {
                token_url: token_url.clone(),
                client_id: client_id.clone(),
                client_secret: open(&Some(client_secret_secret.clone()))
                    .await?
                    .unwrap_or_default(),
                scope: scope.clone(),
            }),
        };
        let tls = match &self.tls {
            None => None,
            Some(tls) => Some(ClientTls {
                identity: match (&tls.client_cert_secret, &tls.client_key_secret) {
                    (Some(_), Some(_)) => Some((
                        open(&tls.client_cert_secret).await?.unwrap_or_default(),
                        open(&tls.client_key_secret).await?.unwrap_or_default(),
                    )),
                    _ => None,
                },
                ca: open(&tls.ca_secret).await?,
            }),
        };
        Ok(Revealed {
            token,
            oauth,
            tls,
            signing,
            signing_key: key(&self.signing_key_secret).await?,
            previous_signing,
            previous_key,
            previous_until: self.previous_until.filter(|_| overlapping),
            by_name,
            headers,
        })
    }
}

/// A webhook's secrets, opened.
pub struct Revealed {
    /// The access token's value.
    pub token: Option<String>,
    /// OAuth2's client credentials, the secret opened.
    pub oauth: Option<oauth::Client>,
    /// The client certificate, its key and the CA, opened.
    pub tls: Option<ClientTls>,
    /// The signing secret's value.
    pub signing: Option<String>,
    /// The Ed25519 key.
    pub signing_key: Option<SigningKey>,
    /// While a rotation overlaps: the previous signing secret's value.
    pub previous_signing: Option<String>,
    /// While a rotation overlaps: the previous Ed25519 key.
    pub previous_key: Option<SigningKey>,
    /// Unix seconds: the end of the overlap, when there is one.
    pub previous_until: Option<u64>,
    /// Every value by the names a payload uses: `ACCESS_TOKEN` and the
    /// token's own name for the token, the signing secret's name.
    pub by_name: BTreeMap<String, String>,
    /// The webhook's own headers as sent, secrets in.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Revealed {
    /// The keys a request sent at `now` (unix seconds) is signed with: the
    /// previous ones too until the overlap ends.
    pub fn keys(&self, now: u64) -> Keys<'_> {
        let overlapping = self.previous_until.is_some_and(|until| until > now);
        let hmac = [
            Some(&self.signing),
            overlapping.then_some(&self.previous_signing),
        ];
        let ed25519 = [
            Some(&self.signing_key),
            overlapping.then_some(&self.previous_key),
        ];
        Keys {
            hmac: hmac
                .into_iter()
                .flatten()
                .flatten()
                .map(|s| s.as_bytes())
                .collect(),
            ed25519: ed25519.into_iter().flatten().flatten().collect(),
        }
    }
}

async fn check(
    store: &Store,
    sealer: &Sealer,
    team: &str,
    settings: &Settings,
    allow: &[IpNet],
) -> Result<()> {
    ssrf::check_url(settings.url.trim(), allow).map_err(|m| Error::invalid("url", m))?;
    for (field, secret) in [
        ("access_token_secret", &settings.access_token_secret),
        ("signing_secret", &settings.signing_secret),
        ("signing_key_secret", &settings.signing_key_secret),
        ("previous_signing_secret", &settings.previous_signing_secret),
        (
            "previous_signing_key_secret",
            &settings.previous_signing_key_secret,
        ),
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
    for (field, secret) in [
        ("signing_key_secret", &settings.signing_key_secret),
        (
            "previous_signing_key_secret",
            &settings.previous_signing_key_secret,
        ),
    ] {
        if let Some(name) = secret {
            let value = secrets::reveal(store, sealer, team, name).await?;
            signature::ed25519_key(&value)
                .map_err(|why| Error::invalid(field, format!("secret '{name}' {why}")))?;
        }
    }
    check_auth(store, team, settings, allow).await?;
    check_tls(store, sealer, team, settings.tls.as_ref()).await?;
    let token = settings.access_token_secret.is_some() || settings.auth.is_some();
    for secret in headers::check(&settings.headers, token)? {
        if !secrets::exists(store, team, secret).await? {
            return Err(Error::invalid(
                "headers",
                format!(
                    "a header names ${secret}, but team '{team}' has no secret named '{secret}'; \
                     create it with PUT /v1/teams/{team}/secrets/{secret}, or write $$ for a literal $"
                ),
            ));
        }
    }
    check_overlap(settings)?;
    check_protection(settings)?;
    check_schedule(settings.retry_schedule_ms.as_deref())?;
    check_disable_after(settings.disable_after_hours)
}

/// The longest `disable_after_hours`: a year.
pub const MAX_DISABLE_AFTER_HOURS: f64 = 365.0 * 24.0;

fn check_disable_after(hours: Option<f64>) -> Result<()> {
    match hours {
        Some(h) if !(h > 0.0 && h <= MAX_DISABLE_AFTER_HOURS) => Err(Error::invalid(
            "disable_after_hours",
            format!(
                "disable_after_hours is above 0 and at most {MAX_DISABLE_AFTER_HOURS} (a year); \
                 fractions are allowed (0.5 is half an hour); leave it out for the host's default"
            ),
        )),
        _ => Ok(()),
    }
}

/// OAuth2 client credentials that can work: alone as the receiver's token,
/// a token URL the SSRF guard allows, a client id, a team secret, a scope
/// of one line.
async fn check_auth(store: &Store, team: &str, settings: &Settings, allow: &[IpNet]) -> Result<()> {
    let Some(WebhookAuth::Oauth2ClientCredentials {
        token_url,
        client_id,
        client_secret_secret,
        scope,
    }) = &settings.auth
    else {
        return Ok(());
    };
    if settings.access_token_secret.is_some() {
        return Err(Error::invalid(
            "auth",
            "a webhook sends one token: its access_token_secret or one from OAuth2; remove one",
        ));
    }
    ssrf::check_url(token_url.trim(), allow).map_err(|m| Error::invalid("auth.token_url", m))?;
    if client_id.trim().is_empty() || client_id.len() > 1024 {
        return Err(Error::invalid(
            "auth.client_id",
            "the client id is 1 to 1024 characters",
        ));
    }
    if scope
        .as_deref()
        .is_some_and(|s| s.len() > 1024 || s.contains(['\r', '\n']))
    {
        return Err(Error::invalid(
            "auth.scope",
            "the scope is one line of at most 1024 characters",
        ));
    }
    if !secrets::exists(store, team, client_secret_secret).await? {
        return Err(Error::invalid(
            "auth.client_secret_secret",
            format!(
                "team '{team}' has no secret named '{client_secret_secret}'; create it first with PUT /v1/teams/{team}/secrets/{client_secret_secret}"
            ),
        ));
    }
    Ok(())
}

/// TLS secrets that can work: a certificate with its key, or a CA, or
/// both; each a secret the team has; PEM that parses.
async fn check_tls(
    store: &Store,
    sealer: &Sealer,
    team: &str,
    tls: Option<&WebhookTls>,
) -> Result<()> {
    let Some(tls) = tls else { return Ok(()) };
    let (cert, key) = (&tls.client_cert_secret, &tls.client_key_secret);
    if cert.is_some() != key.is_some() || (cert.is_none() && tls.ca_secret.is_none()) {
        return Err(Error::invalid(
            "tls",
            "give client_cert_secret with client_key_secret (a client certificate and its key), ca_secret (the receiver's CA), or all three",
        ));
    }
    let mut opened = BTreeMap::new();
    for (field, secret) in [
        ("client_cert_secret", cert),
        ("client_key_secret", key),
        ("ca_secret", &tls.ca_secret),
    ] {
        let Some(name) = secret else { continue };
        if !secrets::exists(store, team, name).await? {
            return Err(Error::invalid(
                format!("tls.{field}"),
                format!(
                    "team '{team}' has no secret named '{name}'; create it first with PUT /v1/teams/{team}/secrets/{name}"
                ),
            ));
        }
        opened.insert(field, secrets::reveal(store, sealer, team, name).await?);
    }
    let identity =
        (opened.get("client_cert_secret").cloned()).zip(opened.get("client_key_secret").cloned());
    let opened_tls = ClientTls {
        identity,
        ca: opened.get("ca_secret").cloned(),
    };
    opened_tls.parts().map(drop).map_err(|(field, why)| {
        let name = if field == "ca_secret" {
            &tls.ca_secret
        } else {
            cert
        };
        let name = name.as_deref().unwrap_or_default();
        Error::invalid(format!("tls.{field}"), format!("secret '{name}' {why}"))
    })
}

/// Most entries in a webhook's retry schedule.
pub const MAX_RETRIES: usize = 30;
/// The longest a webhook's retry schedule may wait in all.
pub const MAX_SCHEDULE_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// A webhook's own retry schedule: one wait per attempt, at least one,
/// within [`MAX_RETRIES`] and [`MAX_SCHEDULE_MS`] in all.
fn check_schedule(schedule: Option<&[u64]>) -> Result<()> {
    let Some(schedule) = schedule else {
        return Ok(());
    };
    let total = schedule
        .iter()
        .fold(0u64, |sum, ms| sum.saturating_add(*ms));
    if schedule.is_empty() || schedule.len() > MAX_RETRIES || total > MAX_SCHEDULE_MS {
        return Err(Error::invalid(
            "retry_schedule_ms",
            format!(
                "the retry schedule is 1 to {MAX_RETRIES} waits in milliseconds (the first before \
                 the first attempt, usually 0), {MAX_SCHEDULE_MS} ms (7 days) in all; \
                 leave it out for the host's schedule"
            ),
        ));
    }
    Ok(())
}

/// The most a webhook may be paced to, and the longest cool-off.
const MAX_PER_SECOND: f64 = 10_000.0;
const MAX_COOLOFF_MS: u64 = 24 * 60 * 60 * 1000;

/// Refuses a pace or breaker settings that cannot work.
fn check_protection(settings: &Settings) -> Result<()> {
    if let Some(rate) = settings.max_per_second
        && !(rate > 0.0 && rate <= MAX_PER_SECOND)
    {
        return Err(Error::invalid(
            "max_per_second",
            format!("max_per_second is above 0 and at most {MAX_PER_SECOND}"),
        ));
    }
    let Some(b) = &settings.circuit_breaker else {
        return Ok(());
    };
    let wrong = |field: &str, what: &str| {
        Error::invalid(
            format!("circuit_breaker.{field}"),
            format!("{field} {what}"),
        )
    };
    if b.failures == 0 {
        return Err(wrong("failures", "is at least 1"));
    }
    if !(b.failure_ratio > 0.0 && b.failure_ratio <= 1.0) {
        return Err(wrong("failure_ratio", "is above 0 and at most 1"));
    }
    if b.window == 0 || b.window > 1000 {
        return Err(wrong("window", "is 1 to 1000 attempts"));
    }
    if b.cooloff_ms < 100 || b.cooloff_ms > b.max_cooloff_ms || b.max_cooloff_ms > MAX_COOLOFF_MS {
        return Err(wrong(
            "cooloff_ms",
            "is at least 100, and at most max_cooloff_ms, itself at most a day",
        ));
    }
    Ok(())
}

/// A rotation's previous secrets need an end, within [`MAX_OVERLAP_S`];
/// an end needs a previous secret.
fn check_overlap(settings: &Settings) -> Result<()> {
    let previous = settings.previous_signing_secret.is_some()
        || settings.previous_signing_key_secret.is_some();
    let now = ids::now();
    match settings.previous_until {
        None if previous => Err(Error::invalid(
            "previous_until",
            "previous secrets sign until previous_until (unix seconds); give it, or rotate with POST …/webhooks/{name}/rotate",
        )),
        Some(_) if !previous => Err(Error::invalid(
            "previous_until",
            "previous_until ends an overlap; name previous_signing_secret or previous_signing_key_secret too",
        )),
        Some(until) if until > now + MAX_OVERLAP_S => Err(Error::invalid(
            "previous_until",
            format!("an overlap lasts at most {MAX_OVERLAP_S} seconds (30 days) from now"),
        )),
        _ => Ok(()),
    }
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
    sealer: &Sealer,
    (team, name): (&str, &str),
    settings: Settings,
    allow: &[IpNet],
    save: Save,
) -> Result<Webhook> {
    let old: Option<Webhook> = match save {
        Save::Create => {
            names::validate("name", name)?;
            None
        }
        Save::Update => Some(get(store, team, name).await?),
    };
    check(store, sealer, team, &settings, allow).await?;
    let now = ids::now();
    let webhook = Webhook {
        name: name.to_string(),
        url: settings.url.trim().to_string(),
        access_token_secret: settings.access_token_secret,
        signing_secret: settings.signing_secret,
        standard_webhooks: settings.standard_webhooks,
        signing_key_secret: settings.signing_key_secret,
        previous_signing_secret: settings.previous_signing_secret,
        previous_signing_key_secret: settings.previous_signing_key_secret,
        previous_until: settings.previous_until,
        max_per_second: settings.max_per_second,
        circuit_breaker: settings.circuit_breaker,
        headers: settings.headers,
        retry_schedule_ms: settings.retry_schedule_ms,
        disable_after_hours: settings.disable_after_hours,
        auth: settings.auth,
        tls: settings.tls,
        ordering: settings.ordering,
        disabled_reason: None,
        created_at: old.as_ref().map_or(now, |old| old.created_at),
        updated_at: now,
    };
    if let Some(old) = old.filter(|old| old.disabled_reason.is_some()) {
        // Enabled again: what it held goes now.
        let tx = store.begin().await?;
        tx.put_webhook(team, &webhook).await?;
        let held = WebhookRef {
            team: team.to_string(),
            name: old.name,
        };
        tx.release_deliveries(&held, ids::now_ms()).await?;
        tx.commit().await?;
    } else if save == Save::Update {
        store.put_webhook(team, &webhook).await?;
    } else if !store.insert_webhook(team, &webhook).await? {
        return Err(Error::Conflict(format!(
            "team '{team}' already has a webhook named '{name}'"
        )));
    }
    Ok(webhook)
}

/// Disables a webhook (its endpoint answered 410 Gone, or failed for
/// days), and writes the events that caused (`WEBHOOK_DISABLED`) in the
/// same transaction; `false`, writing nothing, if it was disabled already.
pub async fn disable(
    store: &Store,
    team: &str,
    name: &str,
    reason: &str,
    caused: &[crate::model::Event],
) -> Result<bool> {
    let tx = store.begin().await?;
    let mut webhook = tx
        .webhook(team, name)
        .await?
        .ok_or_else(|| not_found(team, name))?;
    if webhook.disabled_reason.is_some() {
        return Ok(false);
    }
    webhook.disabled_reason = Some(reason.to_string());
    tx.put_webhook(team, &webhook).await?;
    tx.insert_events(caused).await?;
    tx.commit().await?;
    Ok(true)
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
            let mut used = w.secrets_used().chain(headers::secrets(&w.headers));
            used.any(|used| used == secret)
        })
        .map(|w| w.name)
        .collect())
}

/// What a rotation changes: the new secrets, and how long the ones they
/// replace keep signing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rotation {
    /// The new signing secret's name.
    #[serde(default)]
    pub signing_secret: Option<String>,
    /// The new Ed25519 key secret's name.
    #[serde(default)]
    pub signing_key_secret: Option<String>,
    /// How long the replaced secrets keep signing; a day unless given.
    #[serde(default = "default_overlap")]
    pub overlap_s: u64,
}

fn default_overlap() -> u64 {
    24 * 60 * 60
}

/// Rotates a webhook's signing secrets: each new one signs from now on,
/// and the one it replaces signs as well for `overlap_s`, so receivers
/// can switch keys without failing a delivery. A rotation ends any overlap
/// in progress.
pub async fn rotate(
    store: &Store,
    sealer: &Sealer,
    (team, name): (&str, &str),
    rotation: Rotation,
    allow: &[IpNet],
) -> Result<Webhook> {
    if rotation.signing_secret.is_none() && rotation.signing_key_secret.is_none() {
        return Err(Error::invalid(
            "signing_secret",
            "name the new signing_secret, signing_key_secret, or both",
        ));
    }
    if rotation.overlap_s == 0 || rotation.overlap_s > MAX_OVERLAP_S {
        return Err(Error::invalid(
            "overlap_s",
            format!("overlap_s is 1 to {MAX_OVERLAP_S} seconds (30 days)"),
        ));
    }
    let old = get(store, team, name).await?;
    let replaced = |new: &Option<String>, old: &Option<String>| match new {
        Some(_) if old != new => old.clone(),
        _ => None,
    };
    let previous_signing_secret = replaced(&rotation.signing_secret, &old.signing_secret);
    let previous_signing_key_secret =
        replaced(&rotation.signing_key_secret, &old.signing_key_secret);
    let overlapping = previous_signing_secret.is_some() || previous_signing_key_secret.is_some();
    let settings = Settings {
        url: old.url.clone(),
        access_token_secret: old.access_token_secret.clone(),
        signing_secret: rotation.signing_secret.or(old.signing_secret),
        standard_webhooks: old.standard_webhooks,
        signing_key_secret: rotation.signing_key_secret.or(old.signing_key_secret),
        previous_signing_secret,
        previous_signing_key_secret,
        previous_until: overlapping.then(|| ids::now() + rotation.overlap_s),
        max_per_second: old.max_per_second,
        circuit_breaker: old.circuit_breaker,
        headers: old.headers,
        retry_schedule_ms: old.retry_schedule_ms,
        disable_after_hours: old.disable_after_hours,
        auth: old.auth,
        tls: old.tls,
        ordering: old.ordering,
    };
    save(store, sealer, (team, name), settings, allow, Save::Update).await
}

/// A webhook's Ed25519 public keys, for receivers that verify `v1a`.
#[cfg_attr(test, derive(serde::Deserialize))]
#[derive(Debug, Clone, serde::Serialize)]
pub struct PublicKeys {
    /// The current key: `whpk_` and its base64.
    pub public_key: String,
    /// While a rotation overlaps: the previous key, which signs as well.
    pub previous_public_key: Option<String>,
    /// Unix seconds: when the previous key stops signing.
    pub previous_until: Option<u64>,
}

/// The public keys of a webhook that signs with Ed25519.
pub async fn public_keys(
    store: &Store,
    sealer: &Sealer,
    team: &str,
    name: &str,
) -> Result<PublicKeys> {
    let webhook = get(store, team, name).await?;
    let revealed = webhook.reveal(store, sealer, team).await?;
    let Some(key) = &revealed.signing_key else {
        return Err(Error::Conflict(format!(
            "webhook '{name}' has no Ed25519 key; set its signing_key_secret to a secret made with PUT /v1/teams/{team}/secrets/NAME {{\"generate\": \"ed25519\"}}"
        )));
    };
    Ok(PublicKeys {
        public_key: signature::public_key(key),
        previous_public_key: revealed.previous_key.as_ref().map(signature::public_key),
        previous_until: revealed.previous_key.as_ref().and(revealed.previous_until),
    })
}

/// Stores a new Ed25519 key in secret `name`, for a webhook's
/// `signing_key_secret`: its info, whether it was new, and the public key.
pub async fn generate_signing_key(
    store: &Store,
    sealer: &Sealer,
    team: &str,
    name: &str,
) -> Result<(secrets::SecretInfo, bool, String)> {
    let secret = signature::new_ed25519_secret();
    let public = signature::ed25519_key(&secret).map(|key| signature::public_key(&key));
    let public =
        public.map_err(|e| Error::Internal(anyhow::anyhow!("a new key did not read: {e}")))?;
    let (info, created) = secrets::put(store, sealer, team, name, &secret).await?;
    Ok((info, created, public))
}
