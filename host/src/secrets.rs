//! Team secrets: named values sealed at rest (see [`crate::seal`]).
//!
//! Nothing here returns a value to a client: listings carry names and dates,
//! and [`reveal`] is for the host's own use when it signs or authorises a
//! delivery.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::seal::Sealer;
use crate::store::{self, Store, keys};
use crate::{ids, names};

/// Largest secret value, in bytes.
pub const MAX_VALUE_BYTES: usize = 8 * 1024;

/// What is stored: the value only in sealed form.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    name: String,
    sealed: String,
    created_at: u64,
    updated_at: u64,
}

/// What clients see of a secret.
#[derive(Debug, Clone, Serialize)]
pub struct SecretInfo {
    /// The name, referenced as `${NAME}` in payloads.
    pub name: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds of the last replacement.
    pub updated_at: u64,
}

fn key(team: &str, name: &str) -> keys::Key {
    keys::prefix(&[team, name])
}

/// Creates or replaces a secret. Returns its info and whether it was new.
pub fn put(
    store: &Store,
    sealer: &Sealer,
    team: &str,
    name: &str,
    value: &str,
) -> Result<(SecretInfo, bool)> {
    names::validate_secret("name", name)?;
    if value.is_empty() || value.len() > MAX_VALUE_BYTES {
        return Err(Error::invalid(
            "value",
            format!("value must be 1 to {MAX_VALUE_BYTES} bytes"),
        ));
    }
    let key = key(team, name);
    let now = ids::now();
    let previous: Option<Stored> = store::get_json(&store.trees.secrets, &key)?;
    let stored = Stored {
        name: name.to_string(),
        sealed: hex::encode(sealer.seal(key.as_ref(), value.as_bytes())?),
        created_at: previous.as_ref().map_or(now, |p| p.created_at),
        updated_at: now,
    };
    store
        .trees
        .secrets
        .insert(&key, store::to_json(&stored)?)
        .map_err(anyhow::Error::from)?;
    Ok((info(&stored), previous.is_none()))
}

/// The team's secrets, by name.
pub fn list(store: &Store, team: &str) -> Result<Vec<SecretInfo>> {
    let stored: Vec<Stored> = store::scan_json(&store.trees.secrets, keys::prefix(&[team]))?;
    Ok(stored.iter().map(info).collect())
}

/// Whether the team has a secret of that name.
pub fn exists(store: &Store, team: &str, name: &str) -> Result<bool> {
    Ok(store
        .trees
        .secrets
        .contains_key(key(team, name))
        .map_err(anyhow::Error::from)?)
}

/// Deletes a secret.
pub fn delete(store: &Store, team: &str, name: &str) -> Result<()> {
    store
        .trees
        .secrets
        .remove(key(team, name))
        .map_err(anyhow::Error::from)?
        .map(|_| ())
        .ok_or_else(|| not_found(team, name))
}

/// The plain value, for the host's own use (signing, bearer tokens).
pub fn reveal(store: &Store, sealer: &Sealer, team: &str, name: &str) -> Result<String> {
    let key = key(team, name);
    let stored: Stored =
        store::get_json(&store.trees.secrets, &key)?.ok_or_else(|| not_found(team, name))?;
    let sealed = hex::decode(&stored.sealed).map_err(anyhow::Error::from)?;
    let plain = sealer.open(key.as_ref(), &sealed)?;
    Ok(String::from_utf8(plain).map_err(anyhow::Error::from)?)
}

fn not_found(team: &str, name: &str) -> Error {
    Error::NotFound(format!("team '{team}' has no secret named '{name}'"))
}

fn info(stored: &Stored) -> SecretInfo {
    SecretInfo {
        name: stored.name.clone(),
        created_at: stored.created_at,
        updated_at: stored.updated_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_sealed_and_revealed_per_team() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let sealer = Sealer::load(dir.path(), None).unwrap();
        let (_, created) = put(&store, &sealer, "ml", "TOKEN", "hunter2-value").unwrap();
        assert!(created);
        let (_, created) = put(&store, &sealer, "ml", "TOKEN", "hunter3-value").unwrap();
        assert!(!created);
        assert_eq!(
            reveal(&store, &sealer, "ml", "TOKEN").unwrap(),
            "hunter3-value"
        );
        assert!(reveal(&store, &sealer, "other", "TOKEN").is_err());
        for item in store.trees.secrets.iter() {
            let (_, v) = item.unwrap();
            assert!(!v.windows(13).any(|w| w == b"hunter3-value"));
        }
    }
}
