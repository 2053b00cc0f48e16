//! Teams' secrets (sealed by the caller) and the webhooks that carry them.

use async_trait::async_trait;

use super::Postgres;
use super::shared::{i, secret, webhook};
use crate::model::{Secret, Webhook};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl WebhookRecords for Postgres {
    async fn put_secret(&self, team: &str, s: &Secret) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO secrets (team, name, sealed, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (team, name) \
                 DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at",
            )
            .bind(team)
            .bind(&s.name)
            .bind(&s.sealed)
            .bind(i(s.created_at))
            .bind(i(s.updated_at)),
        )
        .await?;
        Ok(())
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
        Ok(self.write_webhook(team, w, "DO NOTHING").await? == 1)
    }

    async fn put_webhook(&self, team: &str, w: &Webhook) -> Result<()> {
        let replace = "(team, name) DO UPDATE SET \
             url = excluded.url, access_token_secret = excluded.access_token_secret, \
             signing_secret = excluded.signing_secret, \
             standard_webhooks = excluded.standard_webhooks, \
             disabled_reason = excluded.disabled_reason, updated_at = excluded.updated_at";
        self.write_webhook(team, w, replace).await?;
        Ok(())
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

impl Postgres {
    /// Inserts a webhook, doing `on_conflict` when its name is taken;
    /// returns how many rows changed.
    async fn write_webhook(&self, team: &str, w: &Webhook, on_conflict: &str) -> Result<u64> {
        self.execute(
            sqlx::query(&format!(
                "INSERT INTO webhooks (team, name, url, access_token_secret, signing_secret, \
                 standard_webhooks, disabled_reason, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT {on_conflict}"
            ))
            .bind(team)
            .bind(&w.name)
            .bind(&w.url)
            .bind(&w.access_token_secret)
            .bind(&w.signing_secret)
            .bind(w.standard_webhooks)
            .bind(&w.disabled_reason)
            .bind(i(w.created_at))
            .bind(i(w.updated_at)),
        )
        .await
    }
}
