//! Uploaded plugins.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{from_json, get, i, to_json, u};
use crate::model::StoredPlugin;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl PluginRecords for Postgres {
    async fn put_plugin(&self, p: &StoredPlugin) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO plugins (name, kind, version, sha256, settings, wasm, uploaded_at_ms) \
                 VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7) ON CONFLICT (name) DO UPDATE SET \
                 kind = excluded.kind, version = excluded.version, sha256 = excluded.sha256, \
                 settings = excluded.settings, wasm = excluded.wasm, \
                 uploaded_at_ms = excluded.uploaded_at_ms",
            )
            .bind(&p.name)
            .bind(&p.kind)
            .bind(&p.version)
            .bind(&p.sha256)
            .bind(to_json(&p.settings)?)
            .bind(&p.wasm)
            .bind(i(p.uploaded_at_ms)),
        )
        .await?;
        Ok(())
    }

    async fn plugin_digests(&self) -> Result<Vec<(String, String)>> {
        let mut c = self.conn().await?;
        sqlx::query_as("SELECT name, sha256 FROM plugins ORDER BY name")
            .fetch_all(&mut *c)
            .await
            .db(self)
    }

    async fn plugin(&self, name: &str) -> Result<Option<StoredPlugin>> {
        let mut c = self.conn().await?;
        let row = sqlx::query(
            "SELECT name, kind, version, sha256, settings::text AS settings, wasm, uploaded_at_ms \
             FROM plugins WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        row.map(|r| {
            Ok(StoredPlugin {
                name: get(&r, "name")?,
                kind: get(&r, "kind")?,
                version: get(&r, "version")?,
                sha256: get(&r, "sha256")?,
                settings: from_json(&get::<String>(&r, "settings")?)?,
                wasm: get(&r, "wasm")?,
                uploaded_at_ms: u(get(&r, "uploaded_at_ms")?),
            })
        })
        .transpose()
    }

    async fn delete_plugin(&self, name: &str) -> Result<bool> {
        Ok(self
            .execute(sqlx::query("DELETE FROM plugins WHERE name = $1").bind(name))
            .await?
            > 0)
    }
}
