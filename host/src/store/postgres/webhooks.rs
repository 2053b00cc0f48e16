//! Teams' secrets (sealed by the caller) and the webhooks that carry them.

use async_trait::async_trait;

use super::Postgres;
use super::shared::{secret, webhook};
use crate::model::{Secret, Webhook};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl WebhookRecords for Postgres {
    async fn put_secret(&self, team: &str, s: &Secret) -> Result<()> {
        let replace = "(team, name) DO UPDATE SET sealed = excluded.sealed, \
                       updated_at = excluded.updated_at";
        self.insert("secrets", &[("team", team)], s, replace)
            .await
            .map(drop)
    }

    async fn secret(&self, team: &str, name: &str) -> Result<Option<Secret>> {
        self.team_row("secrets", team, name, secret).await
    }

    async fn secrets(&self, team: &str) -> Result<Vec<Secret>> {
        self.team_rows("secrets", team, secret).await
    }

    async fn delete_secret(&self, team: &str, name: &str) -> Result<bool> {
        self.delete_team_row("secrets", team, name).await
    }

    async fn insert_webhook(&self, team: &str, w: &Webhook) -> Result<bool> {
        let keys = [("team", team)];
        Ok(self.insert("webhooks", &keys, w, "DO NOTHING").await? == 1)
    }

    async fn put_webhook(&self, team: &str, w: &Webhook) -> Result<()> {
        let replace = "(team, name) DO UPDATE SET \
             url = excluded.url, access_token_secret = excluded.access_token_secret, \
             signing_secret = excluded.signing_secret, \
             standard_webhooks = excluded.standard_webhooks, \
             signing_key_secret = excluded.signing_key_secret, \
             previous_signing_secret = excluded.previous_signing_secret, \
             previous_signing_key_secret = excluded.previous_signing_key_secret, \
             previous_until = excluded.previous_until, \
             max_per_second = excluded.max_per_second, \
             circuit_breaker = excluded.circuit_breaker, \
             headers = excluded.headers, retry_schedule_ms = excluded.retry_schedule_ms, \
             disable_after_hours = excluded.disable_after_hours, auth = excluded.auth, \
             tls = excluded.tls, ordering = excluded.ordering, \
             disabled_reason = excluded.disabled_reason, updated_at = excluded.updated_at";
        self.insert("webhooks", &[("team", team)], w, replace)
            .await
            .map(drop)
    }

    async fn webhook(&self, team: &str, name: &str) -> Result<Option<Webhook>> {
        self.team_row("webhooks", team, name, webhook).await
    }

    async fn webhooks(&self, team: &str) -> Result<Vec<Webhook>> {
        self.team_rows("webhooks", team, webhook).await
    }

    async fn delete_webhook(&self, team: &str, name: &str) -> Result<bool> {
        self.delete_team_row("webhooks", team, name).await
    }
}
