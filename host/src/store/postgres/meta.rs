//! Store-wide facts and housekeeping.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl MetaRecords for Postgres {
    async fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let mut c = self.conn().await?;
        sqlx::query_scalar("SELECT value FROM meta WHERE key = $1")
            .bind(key)
            .fetch_optional(&mut *c)
            .await
            .db(self)
    }

    async fn set_meta(&self, key: &str, value: &[u8]) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .bind(key)
            .bind(value),
        )
        .await?;
        Ok(())
    }

    async fn quarantined(&self) -> Result<usize> {
        self.count("quarantine").await
    }
}
