//! Users and API keys.
//!
//! A key is `sy_` followed by 48 random hex characters. Only its SHA-256 is
//! stored: keys are long random strings, so a plain hash is enough (no
//! password-style stretching), and a stolen store yields no usable key.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::ids;
use crate::store::{self, Store, keys};

/// Every key starts with this, so leaked keys are easy to scan for.
pub const KEY_PREFIX: &str = "sy_";

/// A person or machine that calls the API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct User {
    /// Stable id.
    pub id: String,
    /// Display name, unique.
    pub name: String,
    /// Operators administer the whole instance.
    pub operator: bool,
    /// Unix seconds.
    pub created_at: u64,
}

/// What is stored of an API key: never the key itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKey {
    /// Stable id, used to revoke.
    pub id: String,
    /// The owner.
    pub user_id: String,
    /// A label chosen by the owner.
    pub name: String,
    /// The first characters of the key, to tell keys apart in a listing.
    pub prefix: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A key just created: the only time its secret value is visible.
#[derive(Debug, Serialize)]
pub struct NewKey {
    /// The stored record.
    #[serde(flatten)]
    pub record: ApiKey,
    /// The full key. Shown once.
    pub key: String,
}

/// Longest key name accepted.
pub const MAX_NAME_LEN: usize = 100;

/// The SHA-256 of a key, as stored.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// On an empty store, creates the operator and its key. Returns the key when
/// one was generated (so it can be shown once), `None` otherwise.
pub fn bootstrap(store: &Store, given_key: Option<&str>) -> anyhow::Result<Option<String>> {
    if !store.trees.users.is_empty() {
        return Ok(None);
    }
    let generated = given_key.is_none();
    let key = match given_key {
        Some(k) if k.trim().len() < 16 => {
            anyhow::bail!("SWITCHYARD_BOOTSTRAP_KEY must be at least 16 characters long")
        }
        Some(k) => k.trim().to_string(),
        None => format!("{KEY_PREFIX}{}", ids::random_hex(24)),
    };
    let user = insert_user(store, "operator", true)?;
    insert_key(store, &user, "bootstrap", &key)?;
    Ok(generated.then_some(key))
}

/// Creates a user with a first API key (shown once).
pub fn create_user(store: &Store, name: &str, operator: bool) -> Result<(User, NewKey)> {
    crate::names::validate("name", name)?;
    let user = insert_user(store, name, operator)?;
    let key = create_key(store, &user, "default")?;
    Ok((user, key))
}

fn insert_user(store: &Store, name: &str, operator: bool) -> Result<User> {
    use sled::Transactional;
    let user = User {
        id: ids::ordered_id(),
        name: name.to_string(),
        operator,
        created_at: ids::now(),
    };
    let value = store::to_json(&user)?;
    let t = &store.trees;
    let created = (&t.users, &t.user_names)
        .transaction(|(users, user_names)| {
            if user_names.get(name.as_bytes())?.is_some() {
                return Ok(false);
            }
            users.insert(user.id.as_bytes(), value.as_slice())?;
            user_names.insert(name.as_bytes(), user.id.as_bytes())?;
            Ok(true)
        })
        .map_err(|e: sled::transaction::TransactionError| anyhow::anyhow!("creating user: {e}"))?;
    if !created {
        return Err(Error::Conflict(format!(
            "a user named '{name}' already exists"
        )));
    }
    Ok(user)
}

/// The user named `name`.
pub fn find_user(store: &Store, name: &str) -> Result<User> {
    let not_found = || Error::NotFound(format!("no user named '{name}'"));
    let id = store
        .trees
        .user_names
        .get(name.as_bytes())
        .map_err(anyhow::Error::from)?
        .ok_or_else(not_found)?;
    store::get_json(&store.trees.users, &id)?.ok_or_else(not_found)
}

/// Every user, oldest first.
pub fn list_users(store: &Store) -> Result<Vec<User>> {
    Ok(store::scan_json(&store.trees.users, [])?)
}

/// The user behind `Authorization: Bearer <key>`.
pub fn authenticate(store: &Store, key: &str) -> Result<User> {
    authenticate_key(store, key).map(|(user, _)| user)
}

/// The user behind `key`, and the key's stored record.
pub fn authenticate_key(store: &Store, key: &str) -> Result<(User, ApiKey)> {
    let record = key_record(store, key)?;
    let user = store::get_json(&store.trees.users, &record.user_id)?.ok_or_else(|| {
        Error::Unauthenticated(
            "the API key is not valid; check the key or create a new one at POST /v1/me/api-keys"
                .into(),
        )
    })?;
    Ok((user, record))
}

/// The stored record of `key`.
fn key_record(store: &Store, key: &str) -> Result<ApiKey> {
    store::get_json(&store.trees.api_keys, hash_key(key))?.ok_or_else(|| {
        Error::Unauthenticated(
            "the API key is not valid; check the key or create a new one at POST /v1/me/api-keys"
                .into(),
        )
    })
}

/// Creates a key for `user`.
pub fn create_key(store: &Store, user: &User, name: &str) -> Result<NewKey> {
    let name = name.trim();
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "name",
            format!("name must be 1 to {MAX_NAME_LEN} characters"),
        ));
    }
    let key = format!("{KEY_PREFIX}{}", ids::random_hex(24));
    let record = insert_key(store, user, name, &key)?;
    Ok(NewKey { record, key })
}

fn insert_key(store: &Store, user: &User, name: &str, key: &str) -> anyhow::Result<ApiKey> {
    use sled::Transactional;
    let record = ApiKey {
        id: ids::ordered_id(),
        user_id: user.id.clone(),
        name: name.to_string(),
        prefix: key.chars().take(KEY_PREFIX.len() + 6).collect(),
        created_at: ids::now(),
    };
    let hash = hash_key(key);
    let value = store::to_json(&record)?;
    let index = keys::prefix(&[&user.id, &record.id]);
    (&store.trees.api_keys, &store.trees.user_keys)
        .transaction(|(api_keys, user_keys)| {
            api_keys.insert(hash.as_bytes(), value.as_slice())?;
            user_keys.insert(index.as_ref(), hash.as_bytes())?;
            Ok(())
        })
        .map_err(|e: sled::transaction::TransactionError| {
            anyhow::anyhow!("storing API key: {e}")
        })?;
    Ok(record)
}

/// The keys of `user`, oldest first by id order.
pub fn list_keys(store: &Store, user: &User) -> Result<Vec<ApiKey>> {
    let mut keys = Vec::new();
    for hash in store
        .trees
        .user_keys
        .scan_prefix(keys::prefix(&[&user.id]))
        .values()
    {
        if let Some(key) =
            store::get_json::<ApiKey>(&store.trees.api_keys, hash.map_err(anyhow::Error::from)?)?
        {
            keys.push(key);
        }
    }
    keys.sort_by_key(|k| k.created_at);
    Ok(keys)
}

/// Revokes one of `user`'s keys.
pub fn revoke_key(store: &Store, user: &User, key_id: &str) -> Result<()> {
    use sled::Transactional;
    let index = keys::prefix(&[&user.id, key_id]);
    let hash = store
        .trees
        .user_keys
        .get(&index)
        .map_err(anyhow::Error::from)?
        .ok_or_else(|| {
            Error::NotFound(format!(
                "you have no API key with id '{key_id}'; list yours at GET /v1/me/api-keys"
            ))
        })?;
    (&store.trees.api_keys, &store.trees.user_keys)
        .transaction(|(api_keys, user_keys)| {
            api_keys.remove(hash.as_ref())?;
            user_keys.remove(index.as_ref())?;
            Ok(())
        })
        .map_err(|e: sled::transaction::TransactionError| {
            anyhow::anyhow!("revoking API key: {e}")
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stored_only_as_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let key = bootstrap(&store, None).unwrap().unwrap();
        for tree in [
            &store.trees.api_keys,
            &store.trees.user_keys,
            &store.trees.users,
        ] {
            for item in tree.iter() {
                let (k, v) = item.unwrap();
                let needle = key.as_bytes();
                assert!(!k.windows(needle.len()).any(|w| w == needle));
                assert!(!v.windows(needle.len()).any(|w| w == needle));
            }
        }
        let user = authenticate(&store, &key).unwrap();
        assert!(user.operator);
        assert!(authenticate(&store, "sy_wrong").is_err());
    }

    #[test]
    fn a_revoked_key_stops_working() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let key = bootstrap(&store, Some("a-long-bootstrap-key")).unwrap();
        assert!(key.is_none(), "a given key is not echoed back");
        let user = authenticate(&store, "a-long-bootstrap-key").unwrap();
        let new = create_key(&store, &user, "ci").unwrap();
        assert_eq!(list_keys(&store, &user).unwrap().len(), 2);
        revoke_key(&store, &user, &new.record.id).unwrap();
        assert!(authenticate(&store, &new.key).is_err());
        assert_eq!(list_keys(&store, &user).unwrap().len(), 1);
    }
}
