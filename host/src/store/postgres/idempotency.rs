//! Idempotency keys: a claim is one statement, so two hosts racing for a
//! key cannot both win it.

use async_trait::async_trait;
use sqlx::Row;

use super::Postgres;
use super::shared::{Db, i, u};
use crate::model::Idempotent;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl IdempotencyRecords for Postgres {
    async fn claim_idempotency(
        &self,
        key: &str,
        request: &Idempotent,
        lapsed_before_ms: u64,
    ) -> Result<Claim> {
        let mut c = self.conn().await?;
        // Inserts, or takes over a lapsed key; otherwise returns nothing.
        let claimed = sqlx::query(
            "INSERT INTO idempotency (key, fingerprint, at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, \
             at_ms = excluded.at_ms, status = NULL, body = NULL \
             WHERE idempotency.at_ms < $4 RETURNING key",
        )
        .bind(key)
        .bind(&request.fingerprint)
        .bind(i(request.at_ms))
        .bind(i(lapsed_before_ms))
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        if claimed.is_some() {
            return Ok(Claim::Claimed);
        }
        let row =
            sqlx::query("SELECT fingerprint, at_ms, status, body FROM idempotency WHERE key = $1")
                .bind(key)
                .fetch_one(&mut *c)
                .await
                .db(self)?;
        let status: Option<i32> = row.try_get("status").db(self)?;
        Ok(Claim::Held(Idempotent {
            fingerprint: row.try_get("fingerprint").db(self)?,
            at_ms: u(row.try_get("at_ms").db(self)?),
            status: status.and_then(|s| u16::try_from(s).ok()),
            body: row.try_get("body").db(self)?,
        }))
    }

    async fn settle_idempotency(&self, key: &str, answered: Option<&Idempotent>) -> Result<()> {
        let query = match answered {
            Some(a) => sqlx::query("UPDATE idempotency SET status = $2, body = $3 WHERE key = $1")
                .bind(key)
                .bind(a.status.map(i32::from))
                .bind(a.body.clone()),
            None => sqlx::query("DELETE FROM idempotency WHERE key = $1").bind(key),
        };
        self.execute(query).await.map(drop)
    }

    async fn purge_idempotency(&self, before_ms: u64) -> Result<usize> {
        let sql = "DELETE FROM idempotency WHERE at_ms < $1";
        Ok(self.execute(sqlx::query(sql).bind(i(before_ms))).await? as usize)
    }
}
