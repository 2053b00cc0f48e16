//! Users and their API keys.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{api_key, q, user};
use crate::model::{ApiKey, User};
use crate::store::records::*;
use crate::store::{Result, changes};

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
        Ok(self.insert("users", &[], user, "(name) DO NOTHING").await? == 1)
    }

    async fn user(&self, id: &str) -> Result<Option<User>> {
        self.row_by("users", ("id", id), user).await
    }

    async fn user_named(&self, name: &str) -> Result<Option<User>> {
        self.row_by("users", ("name", name), user).await
    }

    async fn users(&self) -> Result<Vec<User>> {
        self.all(sqlx::query("SELECT * FROM users ORDER BY id"), user)
            .await
    }

    async fn insert_key(&self, hash: &str, key: &ApiKey) -> Result<()> {
        let keys = [("hash", hash)];
        self.insert("api_keys", &keys, key, "").await.map(drop)
    }

    async fn key(&self, hash: &str) -> Result<Option<ApiKey>> {
        self.row_by("api_keys", ("hash", hash), api_key).await
    }

    async fn keys_of(&self, user_id: &str) -> Result<Vec<ApiKey>> {
        let sql = "SELECT * FROM api_keys WHERE user_id = $1 ORDER BY id";
        self.all(q(sql, &[user_id]), api_key).await
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
        let deleted: Option<String> = sqlx::query_scalar(
            "DELETE FROM api_keys WHERE user_id = $1 AND id = $2 RETURNING hash",
        )
        .bind(user_id)
        .bind(key_id)
        .fetch_optional(&mut *self.conn().await?)
        .await
        .db(self)?;
        let Some(hash) = deleted else {
            return Ok(false);
        };
        self.changed(changes::path("api_keys", &[&hash]));
        Ok(true)
    }
}
