//! Collections, versions and their labels (aliases and tags).

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::keys::Key;
use super::shared::{label_key, scoped, version_key};
use crate::model::{Collection, Event, LabelledVersion, Scope, Version};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl ArtifactRecords for Sled {
    async fn insert_collection(&self, scope: &Scope, collection: &Collection) -> Result<bool> {
        self.insert_new(
            T::Collections,
            scoped(scope, &[&collection.name]),
            collection,
        )
        .await
    }

    async fn collection(&self, scope: &Scope, name: &str) -> Result<Option<Collection>> {
        self.get_json(T::Collections, scoped(scope, &[name]).as_ref())
    }

    async fn delete_collection(&self, scope: &Scope, name: &str) -> Result<bool> {
        let key = scoped(scope, &[name]);
        let w = self.writer().await;
        if w.get(T::Collections, key.as_ref())?.is_none() {
            return Ok(false);
        }
        w.delete(T::Collections, key.as_ref().to_vec());
        for tree in [T::Versions, T::Aliases, T::VersionAliases, T::Tags] {
            for (held, _) in w.scan(tree, key.as_ref())? {
                w.delete(tree, held);
            }
        }
        w.finish()?;
        Ok(true)
    }

    async fn collections(&self, scope: &Scope) -> Result<Vec<Collection>> {
        self.scan_json(T::Collections, scoped(scope, &[]).as_ref())
    }

    async fn next_version(&self, scope: &Scope, collection: &str) -> Result<Option<u64>> {
        let key = scoped(scope, &[collection]).into_bytes();
        let w = self.writer().await;
        let Some(mut record) = w.get_json::<Collection>(T::Collections, &key)? else {
            return Ok(None);
        };
        let index = record.versions;
        record.versions += 1;
        w.put_json(T::Collections, key, &record)?;
        w.finish()?;
        Ok(Some(index))
    }

    async fn insert_version(&self, scope: &Scope, version: &Version) -> Result<()> {
        let key = version_key(scope, &version.collection, version.index);
        self.replace(T::Versions, key, version).await
    }

    async fn version(
        &self,
        scope: &Scope,
        collection: &str,
        index: u64,
    ) -> Result<Option<Version>> {
        self.get_json(T::Versions, &version_key(scope, collection, index))
    }

    async fn labelled_version(
        &self,
        scope: &Scope,
        collection: &str,
        index: u64,
    ) -> Result<Option<LabelledVersion>> {
        let version = self.version(scope, collection, index).await?;
        version.map(|v| self.with_labels(scope, v)).transpose()
    }

    async fn versions(&self, scope: &Scope, collection: &str) -> Result<Vec<LabelledVersion>> {
        let versions: Vec<Version> =
            self.scan_json(T::Versions, scoped(scope, &[collection]).as_ref())?;
        versions
            .into_iter()
            .map(|v| self.with_labels(scope, v))
            .collect()
    }

    async fn set_alias(&self, version: VersionAt<'_>, alias: &str) -> Result<Option<u64>> {
        let alias_key = scoped(version.scope, &[version.collection, alias]).into_bytes();
        let label = Key::new().text(alias).into_bytes();
        let w = self.writer().await;
        let held = w
            .get(T::Aliases, &alias_key)?
            .and_then(|held| held.as_slice().try_into().ok().map(u64::from_be_bytes));
        if held == Some(version.index) {
            return Ok(None);
        }
        if let Some(old) = held {
            w.delete(
                T::VersionAliases,
                label_key(version.scope, version.collection, old, &label),
            );
        }
        w.put(T::Aliases, alias_key, version.index.to_be_bytes().to_vec());
        let seq = w.next_seq()?;
        w.put(
            T::VersionAliases,
            label_key(version.scope, version.collection, version.index, &label),
            seq,
        );
        w.finish()?;
        Ok(held)
    }

    async fn add_tag(&self, version: VersionAt<'_>, tag: &str) -> Result<()> {
        let w = self.writer().await;
        w.put_tag(version, tag)?;
        w.finish()
    }

    async fn tag_version(
        &self,
        version: VersionAt<'_>,
        tags: &[String],
        events: &[Event],
    ) -> Result<bool> {
        let w = self.writer().await;
        let key = version_key(version.scope, version.collection, version.index);
        if w.get(T::Versions, &key)?.is_none() {
            return Ok(false);
        }
        for tag in tags {
            w.put_tag(version, tag)?;
        }
        w.insert_events(events).await?;
        w.finish()?;
        Ok(true)
    }
}

impl Sled {
    /// Tags a version, once, on the writer `self`.
    fn put_tag(&self, version: VersionAt<'_>, tag: &str) -> Result<()> {
        let key = label_key(
            version.scope,
            version.collection,
            version.index,
            &Key::new().text(tag).into_bytes(),
        );
        if self.get(T::Tags, &key)?.is_none() {
            let seq = self.next_seq()?;
            self.put(T::Tags, key, seq);
        }
        Ok(())
    }
}
