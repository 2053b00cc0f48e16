//! Uploaded plugins.

use async_trait::async_trait;

use super::Sled;
use super::T;
use crate::model::StoredPlugin;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl PluginRecords for Sled {
    async fn put_plugin(&self, plugin: &StoredPlugin) -> Result<()> {
        self.replace(T::Plugins, plugin.name.as_bytes(), plugin)
            .await
    }

    async fn plugin_digests(&self) -> Result<Vec<(String, String)>> {
        Ok(self
            .scan_json::<StoredPlugin>(T::Plugins, &[])?
            .into_iter()
            .map(|p| (p.name, p.sha256))
            .collect())
    }

    async fn plugin(&self, name: &str) -> Result<Option<StoredPlugin>> {
        self.get_json(T::Plugins, name.as_bytes())
    }

    async fn delete_plugin(&self, name: &str) -> Result<bool> {
        self.remove(T::Plugins, name.as_bytes()).await
    }
}
