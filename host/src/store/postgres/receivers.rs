//! Webhooks' health (circuits) as JSON text; a webhook's pace as one row that every host
//! takes its send slots from, one statement each.

use async_trait::async_trait;

use super::Postgres;
use super::shared::{Db, from_json, i, to_json, u};
use crate::model::{Health, WebhookRef};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl ReceiverRecords for Postgres {
    async fn health(&self, team: &str, webhook: &str) -> Result<Option<Health>> {
        let mut c = self.conn().await?;
        let record: Option<String> =
            sqlx::query_scalar("SELECT record FROM webhook_circuits WHERE team = $1 AND name = $2")
                .bind(team)
                .bind(webhook)
                .fetch_optional(&mut *c)
                .await
                .db(self)?;
        record.map(|r| from_json(&r)).transpose()
    }

    async fn put_health(&self, team: &str, webhook: &str, health: &Health) -> Result<()> {
        let sql = "INSERT INTO webhook_circuits (team, name, record) VALUES ($1, $2, $3) \
                   ON CONFLICT (team, name) DO UPDATE SET record = excluded.record";
        let query = sqlx::query(sql)
            .bind(team)
            .bind(webhook)
            .bind(to_json(health)?);
        self.execute(query).await.map(drop)
    }

    async fn pace_slot(&self, webhook: &WebhookRef, interval_us: u64, now_us: u64) -> Result<u64> {
        let mut c = self.conn().await?;
        let slot: i64 = sqlx::query_scalar(
            "INSERT INTO webhook_pace (team, name, next_us) VALUES ($1, $2, $3 + $4) \
             ON CONFLICT (team, name) DO UPDATE \
             SET next_us = greatest(webhook_pace.next_us, $3) + $4 \
             RETURNING next_us - $4",
        )
        .bind(&webhook.team)
        .bind(&webhook.name)
        .bind(i(now_us))
        .bind(i(interval_us))
        .fetch_one(&mut *c)
        .await
        .db(self)?;
        Ok(u(slot))
    }
}
