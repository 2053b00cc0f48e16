//! The inference response cache: one row per answer, shared by every host.

use async_trait::async_trait;

use super::Postgres;
use super::shared::{Db, i};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl CacheRecords for Postgres {
    async fn cached(&self, key: &str, now_ms: u64) -> Result<Option<Vec<u8>>> {
        let sql = "SELECT answer FROM response_cache WHERE key = $1 AND expires_ms > $2";
        let mut c = self.conn().await?;
        sqlx::query_scalar(sql)
            .bind(key)
            .bind(i(now_ms))
            .fetch_optional(&mut *c)
            .await
            .db(self)
    }

    async fn cache(&self, key: &str, answer: &[u8], expires_ms: u64) -> Result<()> {
        let sql = "INSERT INTO response_cache (key, answer, expires_ms) VALUES ($1, $2, $3) \
                   ON CONFLICT (key) DO UPDATE SET answer = EXCLUDED.answer, expires_ms = EXCLUDED.expires_ms";
        let query = sqlx::query(sql).bind(key).bind(answer).bind(i(expires_ms));
        self.execute(query).await.map(drop)
    }

    async fn trim_cache(&self, now_ms: u64, max_bytes: u64) -> Result<usize> {
        let expired = "DELETE FROM response_cache WHERE expires_ms <= $1";
        let mut gone = self.execute(sqlx::query(expired).bind(i(now_ms))).await?;
        // The latest to expire are kept first, up to max_bytes.
        let over = "DELETE FROM response_cache WHERE key IN (SELECT key FROM ( \
                    SELECT key, sum(octet_length(answer)) OVER (ORDER BY expires_ms DESC, key DESC) AS total \
                    FROM response_cache) t WHERE total > $1)";
        gone += self.execute(sqlx::query(over).bind(i(max_bytes))).await?;
        Ok(gone as usize)
    }
}
