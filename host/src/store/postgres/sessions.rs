//! The web console's sessions.

use async_trait::async_trait;

use super::Postgres;
use super::shared::{i, session};
use crate::model::Session;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl SessionRecords for Postgres {
    async fn insert_session(&self, hash: &str, session: &Session) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO sessions (hash, user_id, csrf, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(hash)
            .bind(&session.user_id)
            .bind(&session.csrf)
            .bind(i(session.created_at))
            .bind(i(session.expires_at)),
        )
        .await?;
        Ok(())
    }

    async fn session(&self, hash: &str) -> Result<Option<Session>> {
        self.optional(
            sqlx::query("SELECT * FROM sessions WHERE hash = $1").bind(hash),
            session,
        )
        .await
    }

    async fn delete_session(&self, hash: &str) -> Result<bool> {
        Ok(self
            .execute(sqlx::query("DELETE FROM sessions WHERE hash = $1").bind(hash))
            .await?
            > 0)
    }
}
