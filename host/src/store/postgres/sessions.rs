//! The web console's sessions.

use async_trait::async_trait;

use super::Postgres;
use super::shared::session;
use crate::model::Session;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl SessionRecords for Postgres {
    async fn insert_session(&self, hash: &str, session: &Session) -> Result<()> {
        let keys = [("hash", hash)];
        self.insert("sessions", &keys, session, "").await.map(drop)
    }

    async fn session(&self, hash: &str) -> Result<Option<Session>> {
        self.row_by("sessions", ("hash", hash), session).await
    }

    async fn delete_session(&self, hash: &str) -> Result<bool> {
        Ok(self
            .execute(sqlx::query("DELETE FROM sessions WHERE hash = $1").bind(hash))
            .await?
            > 0)
    }

    async fn delete_sessions_of_key(&self, key_id: &str) -> Result<usize> {
        let sql = "DELETE FROM sessions WHERE key_id = $1";
        Ok(self.execute(sqlx::query(sql).bind(key_id)).await? as usize)
    }

    async fn delete_expired_sessions(&self, now: u64) -> Result<usize> {
        let sql = "DELETE FROM sessions WHERE expires_at <= $1";
        Ok(self.execute(sqlx::query(sql).bind(now as i64)).await? as usize)
    }
}
