//! Users, API keys and console sessions.
//!
//! A key is `sy_` followed by 48 random hex characters. Only its SHA-256 is
//! stored: keys are long random strings, so a plain hash is enough (no
//! password-style stretching), and a stolen store yields no usable key.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::ids;
pub use crate::model::{ApiKey, RateLimits, Session, User};
use crate::store::{Records, Store};
use crate::tasks::{Stage, Tasks};

/// Every key starts with this, so leaked keys are easy to scan for.
pub const KEY_PREFIX: &str = "sy_";

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
pub async fn bootstrap(store: &Store, given_key: Option<&str>) -> anyhow::Result<Option<String>> {
    if store.has_users().await? {
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
    let tx = store.begin().await?;
    let user = insert_user(&*tx, "operator", true).await?;
    insert_key(&*tx, &user, "bootstrap", &key, &KeySpec::default()).await?;
    tx.commit().await?;
    Ok(generated.then_some(key))
}

/// Creates a user with a first API key (shown once).
pub async fn create_user(store: &Store, name: &str, operator: bool) -> Result<(User, NewKey)> {
    crate::domain::names::validate("name", name)?;
    let tx = store.begin().await?;
    let user = insert_user(&*tx, name, operator).await?;
    let key = new_key(&*tx, &user, &KeySpec::named("default")).await?;
    tx.commit().await?;
    Ok((user, key))
}

async fn insert_user(records: &dyn Records, name: &str, operator: bool) -> Result<User> {
    let user = User {
        id: ids::ordered_id(),
        name: name.to_string(),
        operator,
        created_at: ids::now(),
    };
    if !records.insert_user(&user).await? {
        return Err(Error::Conflict(format!(
            "a user named '{name}' already exists"
        )));
    }
    Ok(user)
}

/// The user named `name`.
pub async fn find_user(store: &Store, name: &str) -> Result<User> {
    store
        .user_named(name)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no user named '{name}'")))
}

/// Every user, oldest first.
pub async fn list_users(store: &Store) -> Result<Vec<User>> {
    Ok(store.users().await?)
}

fn invalid_key() -> Error {
    Error::Unauthenticated(
        "the API key is not valid; check the key or create a new one at POST /v1/me/api-keys"
            .into(),
    )
}

/// The user behind `key`, and the key's stored record.
pub async fn authenticate_key(store: &Store, key: &str) -> Result<(User, ApiKey)> {
    let record = store.key(&hash_key(key)).await?.ok_or_else(invalid_key)?;
    let user = store.user(&record.user_id).await?.ok_or_else(invalid_key)?;
    check_expiry(&record)?;
    Ok((user, record))
}

/// A 401 for a key past its `expires_at`.
pub fn check_expiry(key: &ApiKey) -> Result<()> {
    match key.expires_at {
        Some(at) if at <= ids::now() => Err(Error::Unauthenticated(format!(
            "the API key '{}' ({}) expired at {} (unix seconds); create a new one at POST /v1/me/api-keys",
            key.name, key.prefix, at
        ))),
        _ => Ok(()),
    }
}

/// A new key as its creator asks for it: a name, and what it may do
/// (every other field optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySpec {
    /// A label.
    pub name: String,
    /// Model ids it may use.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// Projects (`team/project`) it may bill.
    #[serde(default)]
    pub projects: Option<Vec<String>>,
    /// Unix seconds after which it stops working.
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// Requests per minute.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens per minute.
    #[serde(default)]
    pub tpm: Option<u64>,
    /// Tokens per UTC day.
    #[serde(default)]
    pub tokens_per_day: Option<u64>,
    /// USD per UTC day.
    #[serde(default)]
    pub usd_per_day: Option<f64>,
    /// USD per UTC month.
    #[serde(default)]
    pub usd_per_month: Option<f64>,
}

/// Longest allow-list accepted.
const MAX_LISTED: usize = 100;

impl KeySpec {
    /// A key that may do everything its user may.
    pub fn named(name: &str) -> KeySpec {
        KeySpec {
            name: name.to_string(),
            ..KeySpec::default()
        }
    }

    fn check(&self) -> Result<()> {
        for (field, list) in [("models", &self.models), ("projects", &self.projects)] {
            let Some(list) = list else { continue };
            if list.is_empty() || list.len() > MAX_LISTED {
                return Err(Error::invalid(
                    field,
                    format!(
                        "{field} must list 1 to {MAX_LISTED} entries; leave it out to allow every one"
                    ),
                ));
            }
            if let Some(bad) = list.iter().find(|m| m.trim().is_empty() || m.len() > 200) {
                return Err(Error::invalid(
                    field,
                    format!("{field} entry '{bad}' must be 1 to 200 characters"),
                ));
            }
        }
        for project in self.projects.iter().flatten() {
            let parts: Vec<&str> = project.split('/').collect();
            if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
                return Err(Error::invalid(
                    "projects",
                    format!("projects entry '{project}' must be '<team>/<project>'"),
                ));
            }
        }
        if let Some(at) = self.expires_at.filter(|at| *at <= ids::now()) {
            return Err(Error::invalid(
                "expires_at",
                format!("expires_at {at} is not in the future; give unix seconds after now"),
            ));
        }
        limits_check(&self.limits())
    }

    fn limits(&self) -> RateLimits {
        RateLimits {
            rpm: self.rpm,
            tpm: self.tpm,
            tokens_per_day: self.tokens_per_day,
            usd_per_day: self.usd_per_day,
            usd_per_month: self.usd_per_month,
        }
    }
}

/// A 400 for a limit of 0: it would refuse everything.
pub fn limits_check(limits: &RateLimits) -> Result<()> {
    let named = [
        ("rpm", limits.rpm),
        ("tpm", limits.tpm),
        ("tokens_per_day", limits.tokens_per_day),
    ];
    match named.into_iter().find(|(_, v)| *v == Some(0)) {
        Some((field, _)) => Err(Error::invalid(
            field,
            format!("{field} must be at least 1; leave it out (or null) for no limit"),
        )),
        None => usd_check(limits),
    }
}

/// A 400 for a USD budget that is not a positive number.
fn usd_check(limits: &RateLimits) -> Result<()> {
    let named = [
        ("usd_per_day", limits.usd_per_day),
        ("usd_per_month", limits.usd_per_month),
    ];
    match named
        .into_iter()
        .find(|(_, v)| v.is_some_and(|v| !v.is_finite() || v <= 0.0))
    {
        Some((field, _)) => Err(Error::invalid(
            field,
            format!(
                "{field} must be a number of USD above 0, e.g. 5.0; leave it out (or null) for no budget"
            ),
        )),
        None => Ok(()),
    }
}

/// Creates a key for `user` as `spec` asks.
pub async fn create_key(store: &Store, user: &User, spec: &KeySpec) -> Result<NewKey> {
    spec.check()?;
    new_key(&**store, user, spec).await
}

async fn new_key(records: &dyn Records, user: &User, spec: &KeySpec) -> Result<NewKey> {
    let name = spec.name.trim();
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "name",
            format!("name must be 1 to {MAX_NAME_LEN} characters"),
        ));
    }
    let key = format!("{KEY_PREFIX}{}", ids::random_hex(24));
    let record = insert_key(records, user, name, &key, spec).await?;
    Ok(NewKey { record, key })
}

async fn insert_key(
    records: &dyn Records,
    user: &User,
    name: &str,
    key: &str,
    scope: &KeySpec,
) -> Result<ApiKey> {
    let record = ApiKey {
        id: ids::ordered_id(),
        user_id: user.id.clone(),
        name: name.to_string(),
        prefix: key.chars().take(KEY_PREFIX.len() + 6).collect(),
        created_at: ids::now(),
        models: scope.models.clone(),
        projects: scope.projects.clone(),
        expires_at: scope.expires_at,
        limits: scope.limits(),
    };
    records.insert_key(&hash_key(key), &record).await?;
    Ok(record)
}

/// The keys of `user`, oldest first.
pub async fn list_keys(store: &Store, user: &User) -> Result<Vec<ApiKey>> {
    let mut keys = store.keys_of(&user.id).await?;
    keys.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    Ok(keys)
}

/// The key `user` signed in to the console with: its scopes and limits
/// hold there too.
pub async fn session_key(store: &Store, user: &User, key_id: &str) -> Result<ApiKey> {
    list_keys(store, user)
        .await?
        .into_iter()
        .find(|k| k.id == key_id)
        .ok_or_else(|| {
            Error::Unauthenticated(
                "the API key this session signed in with is gone; sign in again".into(),
            )
        })
}

/// Revokes one of `user`'s keys, and ends the console sessions signed
/// in with it: a revoked key lets no one in, by any door.
pub async fn revoke_key(store: &Store, user: &User, key_id: &str) -> Result<()> {
    if store.delete_key(&user.id, key_id).await? {
        store.delete_sessions_of_key(key_id).await?;
        Ok(())
    } else {
        Err(Error::NotFound(format!(
            "you have no API key with id '{key_id}'; list yours at GET /v1/me/api-keys"
        )))
    }
}

/// How long a console session lasts after sign-in.
pub const SESSION_SECONDS: u64 = 12 * 3600;

/// Signs in to the console with an API key: a new session, and the cookie
/// value that names it (only its hash is stored, like a key's).
pub async fn sign_in(store: &Store, key: &str) -> Result<(String, Session)> {
    let (user, key) = authenticate_key(store, key.trim()).await?;
    let cookie = ids::random_hex(32);
    let now = ids::now();
    let session = Session {
        user_id: user.id,
        key_id: key.id,
        csrf: ids::random_hex(16),
        created_at: now,
        expires_at: now + SESSION_SECONDS,
    };
    store.insert_session(&hash_key(&cookie), &session).await?;
    Ok((cookie, session))
}

/// The user a session cookie signs in, and the session; an expired
/// session is removed and signs no one in.
pub async fn session_user(store: &Store, cookie: &str) -> Result<(User, Session)> {
    let expired = || Error::Unauthenticated("the session has ended; sign in again".into());
    let hash = hash_key(cookie);
    let session = store.session(&hash).await?.ok_or_else(expired)?;
    if session.expires_at <= ids::now() {
        store.delete_session(&hash).await?;
        return Err(expired());
    }
    let user = store.user(&session.user_id).await?.ok_or_else(expired)?;
    Ok((user, session))
}

/// How often expired sessions are swept.
pub const SESSION_SWEEP: Duration = Duration::from_secs(600);

/// Removes expired sessions every `every`, from now on: one that is never
/// used again would otherwise stay in the store for good.
pub fn spawn_session_sweeper(tasks: &Tasks, store: Store, every: Duration) {
    tasks.spawn(Stage::Upkeep, async move {
        loop {
            match store.delete_expired_sessions(ids::now()).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(sessions = n, "removed expired console sessions"),
                Err(e) => tracing::warn!(error = %e, "removing expired console sessions failed"),
            }
            tokio::time::sleep(every).await;
        }
    });
}

/// Ends the session a cookie names.
pub async fn sign_out(store: &Store, cookie: &str) -> Result<()> {
    store.delete_session(&hash_key(cookie)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_stored_only_as_hashes() {
        let (_dir, store) = Store::scratch();
        let key = bootstrap(&store, None).await.unwrap().unwrap();
        let needle = key.as_bytes();
        for (_, k, v) in store.raw_records().await.unwrap() {
            assert!(!k.windows(needle.len()).any(|w| w == needle));
            assert!(!v.windows(needle.len()).any(|w| w == needle));
        }
        let (user, _) = authenticate_key(&store, &key).await.unwrap();
        assert!(user.operator);
        assert!(authenticate_key(&store, "sy_wrong").await.is_err());
    }

    #[tokio::test]
    async fn a_revoked_key_stops_working() {
        let (_dir, store) = Store::scratch();
        let key = bootstrap(&store, Some("a-long-bootstrap-key"))
            .await
            .unwrap();
        assert!(key.is_none(), "a given key is not echoed back");
        let (user, _) = authenticate_key(&store, "a-long-bootstrap-key")
            .await
            .unwrap();
        let new = create_key(&store, &user, &KeySpec::named("ci"))
            .await
            .unwrap();
        assert_eq!(list_keys(&store, &user).await.unwrap().len(), 2);
        revoke_key(&store, &user, &new.record.id).await.unwrap();
        assert!(authenticate_key(&store, &new.key).await.is_err());
        assert_eq!(list_keys(&store, &user).await.unwrap().len(), 1);
    }
}
