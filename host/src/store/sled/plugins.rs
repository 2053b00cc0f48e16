//! Uploaded plugins: the record in its tree, the component beside it as a
//! file named by the SHA-256 of its bytes (`components/<sha256>.wasm`),
//! written and synced before the record that names it commits. The component is then
//! stored once, as bytes, not as hex inside JSON and again in the
//! journal's frame of the commit.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::Sled;
use super::T;
use crate::model::StoredPlugin;
use crate::store::records::*;
use crate::store::{Result, StoreError};

/// A plugin's record: everything but the component, which it names.
#[derive(Serialize, Deserialize)]
struct Record {
    name: String,
    kind: String,
    version: String,
    sha256: String,
    settings: serde_json::Value,
    uploaded_at_ms: u64,
    /// The component's file in `components/`, named by its content.
    #[serde(default)]
    file: String,
    /// An older build kept the component here, as hex.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    wasm: String,
}

/// The file name of a component: the SHA-256 of its bytes.
fn file_of(wasm: &[u8]) -> String {
    format!("{}.wasm", hex::encode(sha2::Sha256::digest(wasm)))
}

/// Writes `plugin`'s component into `dir` durably, unless it is there;
/// returns its file name.
fn keep_component(dir: &Path, plugin: &StoredPlugin) -> Result<String> {
    let file = file_of(&plugin.wasm);
    let path = dir.join(&file);
    if std::fs::read(&path).is_ok_and(|bytes| bytes == plugin.wasm) {
        return Ok(file);
    }
    let written =
        crate::files::create_dir(dir).and_then(|()| crate::files::replace(&path, &plugin.wasm));
    written.map(|()| file).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC) => StoreError::Full,
        _ => StoreError::Other(
            anyhow::Error::new(e)
                .context(format!("writing the plugin component {}", path.display())),
        ),
    })
}

impl Sled {
    fn component_path(&self, file: &str) -> PathBuf {
        self.shared.components.join(file)
    }

    /// The stored plugin a record describes, its component read back and
    /// checked against the SHA-256 it is named by.
    fn open_record(&self, record: Record) -> Result<StoredPlugin> {
        let wasm = match record.wasm.is_empty() {
            false => hex::decode(&record.wasm).map_err(|e| StoreError::Other(e.into()))?,
            true => {
                let path = self.component_path(&record.file);
                let bytes = std::fs::read(&path).map_err(|e| {
                    StoreError::Other(anyhow::anyhow!(
                        "the component of plugin {} does not read from {} ({e}); upload it again",
                        record.name,
                        path.display()
                    ))
                })?;
                if file_of(&bytes) != record.file {
                    return Err(StoreError::Other(anyhow::anyhow!(
                        "the component of plugin {} in {} is damaged (its SHA-256 is not the one \
                         it is named by); upload it again",
                        record.name,
                        path.display()
                    )));
                }
                bytes
            }
        };
        Ok(StoredPlugin {
            name: record.name,
            kind: record.kind,
            version: record.version,
            sha256: record.sha256,
            settings: record.settings,
            wasm,
            uploaded_at_ms: record.uploaded_at_ms,
        })
    }

    /// Removes the component `file` unless a plugin's record names it.
    fn forget_component(&self, file: &str) -> Result<()> {
        let records = self.scan_json::<Record>(T::Plugins, &[])?;
        if file.is_empty() || records.iter().any(|r| r.file == file) {
            return Ok(());
        }
        match std::fs::remove_file(self.component_path(file)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::Other(e.into())),
        }
    }
}

#[async_trait]
impl PluginRecords for Sled {
    async fn put_plugin(&self, plugin: &StoredPlugin) -> Result<()> {
        let (dir, owned) = (self.shared.components.clone(), plugin.clone());
        let file = tokio::task::spawn_blocking(move || keep_component(&dir, &owned))
            .await
            .map_err(|e| StoreError::Other(e.into()))??;
        let before = self.get_json::<Record>(T::Plugins, plugin.name.as_bytes())?;
        let record = Record {
            name: plugin.name.clone(),
            kind: plugin.kind.clone(),
            version: plugin.version.clone(),
            sha256: plugin.sha256.clone(),
            settings: plugin.settings.clone(),
            uploaded_at_ms: plugin.uploaded_at_ms,
            file,
            wasm: String::new(),
        };
        self.replace(T::Plugins, plugin.name.as_bytes(), &record)
            .await?;
        match before {
            Some(old) if old.file != file_of(&plugin.wasm) => self.forget_component(&old.file),
            _ => Ok(()),
        }
    }

    async fn plugin_digests(&self) -> Result<Vec<(String, String)>> {
        Ok(self
            .scan_json::<Record>(T::Plugins, &[])?
            .into_iter()
            .map(|p| (p.name, p.sha256))
            .collect())
    }

    async fn plugin(&self, name: &str) -> Result<Option<StoredPlugin>> {
        self.get_json::<Record>(T::Plugins, name.as_bytes())?
            .map(|record| self.open_record(record))
            .transpose()
    }

    async fn delete_plugin(&self, name: &str) -> Result<bool> {
        let before = self.get_json::<Record>(T::Plugins, name.as_bytes())?;
        let removed = self.remove(T::Plugins, name.as_bytes()).await?;
        if let Some(old) = before.filter(|_| removed) {
            self.forget_component(&old.file)?;
        }
        Ok(removed)
    }
}
