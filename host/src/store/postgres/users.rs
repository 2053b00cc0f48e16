//! Users and their API keys.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{api_key, i, user};
use crate::model::{ApiKey, User};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl UserRecords for Postgres {
    async fn has_users(&self) -> Result<bool> {
        let mut c = self.conn().await?;
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM users)")
            .fetch_one(&mut *c)
            .await
            .db(self)
    }

    async fn insert_user(&self, user: &User) -> Result<bool> {
        Ok(self
            .execute(
                sqlx::query(
                    "INSERT INTO users (id, name, operator, created_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (name) DO NOTHING",
                )
                .bind(&user.id)
                .bind(&user.name)
                .bind(user.operator)
                .bind(i(user.created_at)),
            )
            .await?
            == 1)
    }

    async fn user(&self, id: &str) -> Result<Option<User>> {
        self.optional(
            sqlx::query("SELECT * FROM users WHERE id = $1").bind(id),
            user,
        )
        .await
    }

    async fn user_named(&self, name: &str) -> Result<Option<User>> {
        self.optional(
            sqlx::query("SELECT * FROM users WHERE name = $1").bind(name),
            user,
        )
        .await
    }

    async fn users(&self) -> Result<Vec<User>> {
        self.all(sqlx::query("SELECT * FROM users ORDER BY id"), user)
            .await
    }

    async fn insert_key(&self, hash: &str, key: &ApiKey) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO api_keys (hash, id, user_id, name, prefix, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(hash)
            .bind(&key.id)
            .bind(&key.user_id)
            .bind(&key.name)
            .bind(&key.prefix)
            .bind(i(key.created_at)),
        )
        .await?;
        Ok(())
    }

    async fn key(&self, hash: &str) -> Result<Option<ApiKey>> {
        self.optional(
            sqlx::query("SELECT * FROM api_keys WHERE hash = $1").bind(hash),
            api_key,
        )
        .await
    }

    async fn keys_of(&self, user_id: &str) -> Result<Vec<ApiKey>> {
        self.all(
            sqlx::query("SELECT * FROM api_keys WHERE user_id = $1 ORDER BY id").bind(user_id),
            api_key,
        )
        .await
    }

    async fn key_hash(&self, user_id: &str, key_id: &str) -> Result<Option<String>> {
        let mut c = self.conn().await?;
        sqlx::query_scalar("SELECT hash FROM api_keys WHERE user_id = $1 AND id = $2")
            .bind(user_id)
            .bind(key_id)
            .fetch_optional(&mut *c)
            .await
            .db(self)
    }

    async fn delete_key(&self, user_id: &str, key_id: &str) -> Result<bool> {
        Ok(self
            .execute(
                sqlx::query("DELETE FROM api_keys WHERE user_id = $1 AND id = $2")
                    .bind(user_id)
                    .bind(key_id),
            )
            .await?
            > 0)
    }
}
