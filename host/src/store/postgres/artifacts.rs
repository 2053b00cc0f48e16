//! Collections, versions and their labels (aliases and tags).

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{
    LABELLED_VERSION_COLUMNS, VERSION_COLUMNS, collection, i, labelled_version, q, scope_key,
    to_json, u, version,
};
use super::tagging::{self, Tagged};
use crate::model::{Collection, Event, LabelledVersion, Scope, Version};
use crate::store::records::*;
use crate::store::{Result, StoreError};

#[async_trait]
impl ArtifactRecords for Postgres {
    async fn insert_collection(&self, scope: &Scope, col: &Collection) -> Result<bool> {
        let scope = scope_key(scope);
        let keys = [("scope", scope.as_str())];
        Ok(self.insert("collections", &keys, col, "DO NOTHING").await? == 1)
    }

    async fn delete_collection(&self, scope: &Scope, name: &str) -> Result<bool> {
        let scope = scope_key(scope);
        let mut c = self.conn().await?;
        let mut t = sqlx::Connection::begin(&mut *c).await.db(self)?;
        for table in ["versions", "aliases", "tags"] {
            let sql = format!("DELETE FROM {table} WHERE scope = $1 AND collection = $2");
            sqlx::query(&sql)
                .bind(&scope)
                .bind(name)
                .execute(&mut *t)
                .await
                .db(self)?;
        }
        let deleted = sqlx::query("DELETE FROM collections WHERE scope = $1 AND name = $2")
            .bind(&scope)
            .bind(name)
            .execute(&mut *t)
            .await
            .db(self)?
            .rows_affected();
        t.commit().await.db(self)?;
        Ok(deleted == 1)
    }

    async fn collection(&self, scope: &Scope, name: &str) -> Result<Option<Collection>> {
        let sql = "SELECT * FROM collections WHERE scope = $1 AND name = $2";
        let scope = scope_key(scope);
        self.optional(q(sql, &[&scope, name]), collection).await
    }

    async fn collections(&self, scope: &Scope) -> Result<Vec<Collection>> {
        let sql = "SELECT * FROM collections WHERE scope = $1 ORDER BY name";
        self.all(q(sql, &[&scope_key(scope)]), collection).await
    }

    async fn next_version(&self, scope: &Scope, name: &str) -> Result<Option<u64>> {
        let mut c = self.conn().await?;
        let index: Option<i64> = sqlx::query_scalar(
            "UPDATE collections SET versions = versions + 1 WHERE scope = $1 AND name = $2 \
             RETURNING versions - 1",
        )
        .bind(scope_key(scope))
        .bind(name)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(index.map(u))
    }

    async fn insert_version(&self, scope: &Scope, v: &Version) -> Result<()> {
        let mut c = self.conn().await?;
        let source = v.source.as_ref().map(to_json).transpose()?;
        sqlx::query(
            "INSERT INTO versions (scope, collection, idx, metadata, source, created_by, \
             created_at) VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7)",
        )
        .bind(scope_key(scope))
        .bind(&v.collection)
        .bind(i(v.index))
        .bind(to_json(&v.metadata)?)
        .bind(source)
        .bind(&v.created_by)
        .bind(i(v.created_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn version(&self, scope: &Scope, col: &str, index: u64) -> Result<Option<Version>> {
        // Only committed versions are kept: one made in a transaction that
        // then rolls back must not be served.
        let key = (scope_key(scope), col.to_string(), index);
        if let Some(kept) = self.kept_version(&key) {
            return Ok(Some(kept));
        }
        let row = self.version_row(VERSION_COLUMNS, scope, col, index).await?;
        let found = row.as_ref().map(version).transpose()?;
        if let Some(found) = &found {
            self.keep_version(key, found);
        }
        Ok(found)
    }

    async fn labelled_version(
        &self,
        scope: &Scope,
        col: &str,
        index: u64,
    ) -> Result<Option<LabelledVersion>> {
        let row = self
            .version_row(LABELLED_VERSION_COLUMNS, scope, col, index)
            .await?;
        row.as_ref().map(labelled_version).transpose()
    }

    async fn versions(&self, scope: &Scope, col: &str) -> Result<Vec<LabelledVersion>> {
        self.all(
            sqlx::query(&format!(
                "SELECT {LABELLED_VERSION_COLUMNS} FROM versions v \
                 WHERE v.scope = $1 AND v.collection = $2 ORDER BY v.idx"
            ))
            .bind(scope_key(scope))
            .bind(col),
            labelled_version,
        )
        .await
    }

    async fn set_alias(&self, version: VersionAt<'_>, alias: &str) -> Result<Option<u64>> {
        let mut c = self.conn().await?;
        // The row as it was before the upsert: its version, if another held it.
        let held: Option<i64> = sqlx::query_scalar(
            "WITH old AS (SELECT idx FROM aliases WHERE scope = $1 AND collection = $2 \
             AND alias = $3 FOR UPDATE), \
             up AS (INSERT INTO aliases (scope, collection, alias, idx) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, collection, alias) DO UPDATE SET idx = excluded.idx, \
             seq = CASE WHEN aliases.idx = excluded.idx THEN aliases.seq \
             ELSE excluded.seq END) \
             SELECT idx FROM old",
        )
        .bind(scope_key(version.scope))
        .bind(version.collection)
        .bind(alias)
        .bind(i(version.index))
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(held.map(u).filter(|old| *old != version.index))
    }

    async fn tag_version(
        &self,
        version: VersionAt<'_>,
        tags: &[String],
        events: &[Event],
    ) -> Result<bool> {
        let tagged = Tagged {
            scope: scope_key(version.scope),
            collection: version.collection.to_string(),
            index: version.index,
            tags: tags.to_vec(),
            ids: events.iter().map(|e| e.id.to_string()).collect(),
            bodies: events.iter().map(to_json).collect::<Result<Vec<_>>>()?,
        };
        // In a transaction, on its connection; otherwise with whatever
        // other requests are waiting, in one statement (`tagging.rs`).
        if self.tx.is_some() {
            let found = tagging::query(std::slice::from_ref(&tagged))
                .fetch_all(&mut *self.conn().await?)
                .await
                .db(self)?;
            return Ok(!found.is_empty());
        }
        let (answer, found) = tokio::sync::oneshot::channel();
        if self.shared.tagging.send((tagged, answer)).is_err() {
            return Err(StoreError::Unavailable);
        }
        match found.await {
            Ok(found) => found.db(self),
            Err(_) => Err(StoreError::Unavailable),
        }
    }

    async fn add_tag(&self, version: VersionAt<'_>, tag: &str) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO tags (scope, collection, idx, tag) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(scope_key(version.scope))
            .bind(version.collection)
            .bind(i(version.index))
            .bind(tag),
        )
        .await?;
        Ok(())
    }
}

/// Versions never change, so a kept one serves whatever the configuration
/// epoch: the epoch given to [`crate::store::Kept`] is always this one.
const ANY_EPOCH: u64 = 0;

impl Postgres {
    fn kept_version(&self, key: &(String, String, u64)) -> Option<Version> {
        if self.tx.is_some() {
            return None;
        }
        self.shared.versions.get(key, ANY_EPOCH)
    }

    fn keep_version(&self, key: (String, String, u64), found: &Version) {
        if self.tx.is_none() {
            self.shared.versions.keep(key, ANY_EPOCH, found.clone());
        }
    }
}
