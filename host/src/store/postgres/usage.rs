//! Inference usage totals.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{get, i, u};
use crate::model::{Totals, UsageRow};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl UsageRecords for Postgres {
    async fn add_usage(&self, at: UsageAt<'_>, add: &Totals) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO usage (scope, day, model, key_id, requests, prompt_tokens, \
                 completion_tokens, total_tokens) VALUES ($1, $2::date, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (scope, day, model, key_id) DO UPDATE SET \
                 requests = usage.requests + excluded.requests, \
                 prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens, \
                 completion_tokens = usage.completion_tokens + excluded.completion_tokens, \
                 total_tokens = usage.total_tokens + excluded.total_tokens",
            )
            .bind(at.scope)
            .bind(at.day)
            .bind(at.model)
            .bind(at.key_id)
            .bind(i(add.requests))
            .bind(i(add.prompt_tokens))
            .bind(i(add.completion_tokens))
            .bind(i(add.total_tokens)),
        )
        .await?;
        Ok(())
    }

    async fn usage(&self, scope: &str) -> Result<Vec<UsageRow>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(
            "SELECT day::text AS day, model, key_id, requests, prompt_tokens, completion_tokens, \
             total_tokens FROM usage WHERE scope = $1 ORDER BY day, model, key_id",
        )
        .bind(scope)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter()
            .map(|r| {
                Ok(UsageRow {
                    day: get(r, "day")?,
                    model: get(r, "model")?,
                    key_id: get(r, "key_id")?,
                    totals: Totals {
                        requests: u(get(r, "requests")?),
                        prompt_tokens: u(get(r, "prompt_tokens")?),
                        completion_tokens: u(get(r, "completion_tokens")?),
                        total_tokens: u(get(r, "total_tokens")?),
                    },
                })
            })
            .collect()
    }
}
