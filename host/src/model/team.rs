//! What a team owns: projects, secrets (sealed) and webhooks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Project {
    /// Unique within the team.
    pub name: String,
    /// The owning team.
    pub team: String,
    /// Free text.
    pub description: String,
    /// The user who created it.
    pub created_by: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Its inference limits, set by team admins.
    #[serde(default)]
    pub limits: super::RateLimits,
}

/// A team secret as stored: the value only in sealed form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Secret {
    /// Referenced as `$NAME` or `${NAME}` in payloads.
    pub name: String,
    /// The value sealed (hex) by [`crate::domain::seal`].
    pub sealed: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds of the last replacement.
    pub updated_at: u64,
}

/// A webhook as stored and shown. Secrets are referenced by name only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Webhook {
    /// Unique within the team.
    pub name: String,
    /// Where deliveries are POSTed.
    pub url: String,
    /// The secret sent as `Authorization: Bearer …`.
    pub access_token_secret: Option<String>,
    /// The secret that keys the `X-Service-Signature` HMAC.
    pub signing_secret: Option<String>,
    /// Also send Standard Webhooks headers (`webhook-id`, `-timestamp`, `-signature`).
    #[serde(default)]
    pub standard_webhooks: bool,
    /// The secret holding an Ed25519 key (`whsk_…`) that signs Standard
    /// Webhooks' asymmetric `v1a` signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_key_secret: Option<String>,
    /// While a rotation overlaps: the signing secret that signs as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_signing_secret: Option<String>,
    /// While a rotation overlaps: the Ed25519 key secret that signs as well.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_signing_key_secret: Option<String>,
    /// Unix seconds: the end of the overlap, after which only the current
    /// secrets sign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_until: Option<u64>,
    /// Deliveries to it are paced to at most this many a second; the
    /// outbox holds the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_second: Option<f64>,
    /// Its circuit breaker's settings; the defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<BreakerSettings>,
    /// Sent on every delivery and test; a value's `$NAME` is the team
    /// secret NAME, put in at send.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The waits before each attempt, when not the host's schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_schedule_ms: Option<Vec<u64>>,
    /// How it authenticates to its receiver, beyond a static token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<WebhookAuth>,
    /// The client certificate it presents, and the CA it trusts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<WebhookTls>,
    /// `fifo`: one delivery at a time, in the order of their events.
    #[serde(default, skip_serializing_if = "Ordering::is_parallel")]
    pub ordering: Ordering,
    /// Disabled once every attempt has failed for this many hours; the
    /// host's `[delivery] disable_after_hours` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_after_hours: Option<f64>,
    /// Set when the endpoint answered 410 Gone or failed for
    /// `disable_after_hours`; its deliveries wait, and saving the webhook
    /// again clears it and sends them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds.
    pub updated_at: u64,
}

/// In what order a webhook's deliveries go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ordering {
    /// As many at once as the host allows, each as soon as it is due.
    #[default]
    Parallel,
    /// One at a time, in the order their events were accepted; a failing
    /// one holds the line until it succeeds or runs out of attempts.
    Fifo,
}

impl Ordering {
    /// Whether it is the default.
    pub fn is_parallel(&self) -> bool {
        *self == Ordering::Parallel
    }
}

/// How a webhook gets the token it sends its receiver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum WebhookAuth {
    /// OAuth2's client credentials grant (RFC 6749 §4.4): a token from
    /// `token_url`, sent as `Authorization: Bearer …`.
    Oauth2ClientCredentials {
        /// The authorization server's token endpoint.
        token_url: String,
        /// The client's id.
        client_id: String,
        /// The team secret holding the client's secret.
        client_secret_secret: String,
        /// The scope asked for, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
    },
}

/// The TLS a webhook's receiver asks for: a client certificate to present
/// (mutual TLS), and its own CA to trust besides the public roots. Each is
/// a team secret holding PEM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookTls {
    /// The client certificate (chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_secret: Option<String>,
    /// Its private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_secret: Option<String>,
    /// The receiver's CA certificate(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<String>,
}

impl WebhookTls {
    /// The secrets it names.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        [
            &self.client_cert_secret,
            &self.client_key_secret,
            &self.ca_secret,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
    }
}

/// When a webhook's circuit opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerSettings {
    /// Off: every due delivery is sent, however the endpoint fares.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Consecutive failed attempts that open the circuit.
    #[serde(default = "default_failures")]
    pub failures: u32,
    /// The share of failed attempts among the last `window` that opens it.
    #[serde(default = "default_failure_ratio")]
    pub failure_ratio: f64,
    /// How many recent attempts the ratio looks at.
    #[serde(default = "default_window")]
    pub window: u32,
    /// The first cool-off; each failed probe doubles it.
    #[serde(default = "default_cooloff_ms")]
    pub cooloff_ms: u64,
    /// The longest cool-off.
    #[serde(default = "default_max_cooloff_ms")]
    pub max_cooloff_ms: u64,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            enabled: true,
            failures: default_failures(),
            failure_ratio: default_failure_ratio(),
            window: default_window(),
            cooloff_ms: default_cooloff_ms(),
            max_cooloff_ms: default_max_cooloff_ms(),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_failures() -> u32 {
    10
}
fn default_failure_ratio() -> f64 {
    0.5
}
fn default_window() -> u32 {
    20
}
fn default_cooloff_ms() -> u64 {
    30_000
}
fn default_max_cooloff_ms() -> u64 {
    30 * 60_000
}

/// How a webhook's endpoint fares, as the store keeps it: its circuit,
/// and since when every attempt has failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Its circuit breaker's state.
    #[serde(flatten)]
    pub circuit: Circuit,
    /// Unix ms of the first failed attempt since the last success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<u64>,
}

/// Where a webhook's circuit stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Circuit {
    /// Deliveries go.
    Closed,
    /// Deliveries wait until `until_ms`; then one probe goes.
    Open {
        /// Unix ms.
        until_ms: u64,
        /// The cool-off that set `until_ms`.
        cooloff_ms: u64,
        /// What opened it.
        reason: String,
        /// The failed attempts that opened it (1 for a failed probe).
        #[serde(default)]
        failures: u32,
    },
    /// One probe is out; its outcome closes or reopens the circuit.
    HalfOpen {
        /// Unix ms the probe went.
        since_ms: u64,
        /// The cool-off a failed probe doubles.
        cooloff_ms: u64,
    },
}

impl Webhook {
    /// The names of every secret it uses, signing keys included.
    pub fn secrets_used(&self) -> impl Iterator<Item = &str> {
        [
            &self.access_token_secret,
            &self.signing_secret,
            &self.signing_key_secret,
            &self.previous_signing_secret,
            &self.previous_signing_key_secret,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .chain(self.auth.iter().map(|auth| match auth {
            WebhookAuth::Oauth2ClientCredentials {
                client_secret_secret,
                ..
            } => client_secret_secret.as_str(),
        }))
        .chain(self.tls.iter().flat_map(WebhookTls::secrets))
    }

    /// The names of the secrets it carries into payloads (never a signing
    /// key, nor a rotation's previous secret).
    pub fn secret_names(&self) -> Vec<&str> {
        [&self.access_token_secret, &self.signing_secret]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
}
