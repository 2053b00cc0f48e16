//! Rate-limit claims: one function call per claim (`switchyard_claim_limit`,
//! migrations 14 and 15), so hosts claiming on one limit take turns; one
//! row per (bucket, time), to which claims and corrections add.

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use super::shared::{Db, i, u};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl LimitRecords for Postgres {
    async fn claim_limit(&self, claim: LimitClaim<'_>) -> Result<Granted> {
        let LimitClaim {
            bucket,
            limit,
            window,
            need,
            want,
        } = claim;
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM switchyard_claim_limit($1, $2, $3, $4, $5, $6)")
            .bind(bucket)
            .bind(i(window.0))
            .bind(i(window.1))
            .bind(i(need))
            .bind(i(want))
            .bind(i(limit))
            .fetch_one(&mut *c)
            .await
            .db(self)?;
        Ok(Granted {
            granted: u(row.try_get("granted").db(self)?),
            used: row.try_get("used").db(self)?,
            oldest_ms: row.try_get::<Option<i64>, _>("oldest").db(self)?.map(u),
        })
    }

    async fn adjust_limits(&self, corrections: &[(String, u64, i64)]) -> Result<()> {
        if corrections.is_empty() {
            return Ok(());
        }
        let buckets: Vec<&str> = corrections.iter().map(|c| c.0.as_str()).collect();
        let times: Vec<i64> = corrections.iter().map(|c| i(c.1)).collect();
        let amounts: Vec<i64> = corrections.iter().map(|c| c.2).collect();
        // Each (bucket, at_ms) once per batch (the limiter's map is keyed so).
        let sql = "INSERT INTO rate_claims SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) \
                   ON CONFLICT (bucket, at_ms) DO UPDATE SET n = rate_claims.n + EXCLUDED.n";
        self.execute(sqlx::query(sql).bind(buckets).bind(times).bind(amounts))
            .await
            .map(drop)
    }

    async fn purge_limits(&self, before_ms: u64, except: Option<&str>) -> Result<usize> {
        let sql = "DELETE FROM rate_claims WHERE at_ms < $1 \
                   AND ($2::text IS NULL OR right(bucket, length($2)) <> $2)";
        let query = sqlx::query(sql).bind(i(before_ms)).bind(except);
        Ok(self.execute(query).await? as usize)
    }
}
