//! What a team owns: projects, secrets (sealed) and webhooks.

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
    /// Set when the endpoint answered 410 Gone; saving the webhook again
    /// clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds.
    pub updated_at: u64,
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
