//! Inference usage totals.

use async_trait::async_trait;

use super::Postgres;
use super::shared::{get, q, u};
use crate::model::{Totals, UsageRow};
use crate::store::Result;
use crate::store::records::*;
use sqlx::postgres::PgRow;

#[async_trait]
impl UsageRecords for Postgres {
    async fn add_usage(&self, scope: &str, add: &UsageRow) -> Result<()> {
        let sum = "(scope, day, model, key_id, deployment) DO UPDATE SET \
                   requests = usage.requests + excluded.requests, \
                   prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens, \
                   completion_tokens = usage.completion_tokens + excluded.completion_tokens, \
                   total_tokens = usage.total_tokens + excluded.total_tokens, \
                   cost_usd = usage.cost_usd + excluded.cost_usd, \
                   cache_hits = usage.cache_hits + excluded.cache_hits, \
                   cached_tokens = usage.cached_tokens + excluded.cached_tokens";
        // The deployment is named even when empty: the row's JSON leaves
        // an empty one out, and the column is part of the key.
        let keys = [("scope", scope), ("deployment", add.deployment.as_str())];
        self.insert("usage", &keys, add, sum).await.map(drop)
    }

    async fn usage(&self, scope: &str) -> Result<Vec<UsageRow>> {
        let sql = "SELECT day::text AS day, model, key_id, deployment, requests, prompt_tokens, \
                   completion_tokens, total_tokens, cost_usd, cache_hits, cached_tokens FROM usage WHERE scope = $1 \
                   ORDER BY day, model, key_id, deployment";
        self.all(q(sql, &[scope]), usage_row).await
    }
}

fn usage_row(r: &PgRow) -> Result<UsageRow> {
    let (requests, prompt_tokens) = (u(get(r, "requests")?), u(get(r, "prompt_tokens")?));
    let (completion_tokens, total_tokens) =
        (u(get(r, "completion_tokens")?), u(get(r, "total_tokens")?));
    let totals = Totals {
        requests,
        prompt_tokens,
        completion_tokens,
        total_tokens,
        cost_usd: get(r, "cost_usd")?,
        cache_hits: u(get(r, "cache_hits")?),
        cached_tokens: u(get(r, "cached_tokens")?),
    };
    Ok(UsageRow {
        day: get(r, "day")?,
        model: get(r, "model")?,
        key_id: get(r, "key_id")?,
        deployment: get(r, "deployment")?,
        totals,
    })
}
