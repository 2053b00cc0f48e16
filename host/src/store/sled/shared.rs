//! The typed operations on sled's trees.

use super::keys::{Key, prefix};
use super::{Sled, T, io};
use crate::model::{Automation, GroupKind, Handle, LabelledVersion, Scope, Version};
use crate::store::Result;

/// The key of `rest` under `scope`.
pub(super) fn scoped(scope: &Scope, rest: &[&str]) -> Key {
    let mut segments = scope.parts();
    segments.extend_from_slice(rest);
    prefix(&segments)
}

pub(super) fn version_key(scope: &Scope, collection: &str, index: u64) -> Vec<u8> {
    scoped(scope, &[collection]).num(index).into_bytes()
}

/// The key of a label (`Key::text` of it) of version `index`.
pub(super) fn label_key(scope: &Scope, collection: &str, index: u64, label: &[u8]) -> Vec<u8> {
    [version_key(scope, collection, index).as_slice(), label].concat()
}

pub(super) fn trigger_key(a: &Automation) -> Key {
    scoped(&a.scope, &[a.event.event_type().as_str(), &a.name])
}

pub(super) fn webhook_key(a: &Automation) -> Key {
    let mut segments = vec![a.webhook.team.as_str(), a.webhook.name.as_str()];
    segments.extend(a.scope.parts());
    segments.push(&a.name);
    prefix(&segments)
}

pub(super) fn execution_key(automation: &Handle, id: &str) -> Key {
    scoped(&automation.scope, &[&automation.name, id])
}

pub(super) fn usage_prefix(scope: &str) -> String {
    format!("{scope}\0")
}

/// The trees of a kind of group: records, members by group, members by user.
pub(super) fn group_trees(kind: GroupKind) -> (T, T, T) {
    match kind {
        GroupKind::Team => (T::Teams, T::Members, T::Memberships),
        GroupKind::Registry => (T::Registries, T::RegistryMembers, T::RegistryMemberships),
    }
}

/// The last text segment of a key.
pub(super) fn last_segment(key: &[u8]) -> &str {
    let body = &key[..key.len().saturating_sub(1)];
    let start = body.iter().rposition(|b| *b == 0).map_or(0, |i| i + 1);
    std::str::from_utf8(&body[start..]).unwrap_or("")
}

impl Sled {
    /// `version` with its aliases and tags, each in the order it got them.
    pub(super) fn with_labels(&self, scope: &Scope, version: Version) -> Result<LabelledVersion> {
        let key = version_key(scope, &version.collection, version.index);
        let labels = |t: T| -> Result<Vec<String>> {
            let mut found = self.scan(t, &key)?;
            found.sort_by(|a, b| a.1.cmp(&b.1));
            // After the version's key: the label, then its 0x00.
            Ok(found
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(&k[key.len()..k.len() - 1]).into_owned())
                .collect())
        };
        Ok(LabelledVersion {
            aliases: labels(T::VersionAliases)?,
            tags: labels(T::Tags)?,
            version,
        })
    }

    /// A number larger than any this store gave before: orders labels.
    pub(super) fn next_seq(&self) -> Result<Vec<u8>> {
        Ok(self
            .shared
            .db
            .generate_id()
            .map_err(io)?
            .to_be_bytes()
            .to_vec())
    }

    /// Stores `value` under `key` unless the key is taken; `false` if it was.
    pub(super) async fn insert_new<V: serde::Serialize + Sync>(
        &self,
        t: T,
        key: impl Into<Vec<u8>>,
        value: &V,
    ) -> Result<bool> {
        let key = key.into();
        let w = self.writer().await;
        if w.get(t, &key)?.is_some() {
            return Ok(false);
        }
        w.put_json(t, key, value)?;
        w.finish()?;
        Ok(true)
    }

    /// Deletes `key`; `false` if it was not there.
    pub(super) async fn remove(&self, t: T, key: impl Into<Vec<u8>>) -> Result<bool> {
        let key = key.into();
        let w = self.writer().await;
        if w.get(t, &key)?.is_none() {
            return Ok(false);
        }
        w.delete(t, key);
        w.finish()?;
        Ok(true)
    }

    pub(super) async fn replace<V: serde::Serialize + Sync>(
        &self,
        t: T,
        key: impl Into<Vec<u8>>,
        value: &V,
    ) -> Result<()> {
        let w = self.writer().await;
        w.put_json(t, key, value)?;
        w.finish()
    }
}
