//! Team secrets: named values sealed at rest (see [`crate::domain::seal`]).
//!
//! Nothing here returns a value to a client: listings carry names and dates,
//! and [`reveal`] is for the host's own use when it signs or authorises a
//! delivery.

use serde::Serialize;

use crate::domain::names;
use crate::domain::seal::Sealer;
use crate::error::{Error, Result};
use crate::ids;
use crate::model::Secret;
use crate::store::Store;

/// Largest secret value, in bytes.
pub const MAX_VALUE_BYTES: usize = 8 * 1024;

/// What clients see of a secret.
#[cfg_attr(test, derive(serde::Deserialize))]
#[derive(Debug, Clone, Serialize)]
pub struct SecretInfo {
    /// The name, referenced as `${NAME}` in payloads.
    pub name: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds of the last replacement.
    pub updated_at: u64,
    /// For a signing key the host generated: its public key, shown once,
    /// as the answer to the request that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

/// What a sealed value is bound to: its team and name, so a sealed value
/// copied to another secret does not open.
fn binding(team: &str, name: &str) -> Vec<u8> {
    format!("{team}\0{name}\0").into_bytes()
}

/// Creates or replaces a secret. Returns its info and whether it was new.
pub async fn put(
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
    let now = ids::now();
    let sealed = hex::encode(sealer.seal(&binding(team, name), value.as_bytes())?);
    let tx = store.begin().await?;
    let previous = tx.secret(team, name).await?;
    let secret = Secret {
        name: name.to_string(),
        sealed,
        created_at: previous.as_ref().map_or(now, |p| p.created_at),
        updated_at: now,
    };
    tx.put_secret(team, &secret).await?;
    tx.commit().await?;
    Ok((info(&secret), previous.is_none()))
}

/// The team's secrets, by name.
pub async fn list(store: &Store, team: &str) -> Result<Vec<SecretInfo>> {
    Ok(store.secrets(team).await?.iter().map(info).collect())
}

/// Those of `names` that are secrets of the team, in one read.
pub async fn among(
    store: &Store,
    team: &str,
    names: &std::collections::BTreeSet<&str>,
) -> Result<std::collections::BTreeSet<String>> {
    Ok(store
        .secrets(team)
        .await?
        .into_iter()
        .filter(|s| names.contains(s.name.as_str()))
        .map(|s| s.name)
        .collect())
}

/// Whether the team has a secret of that name.
pub async fn exists(store: &Store, team: &str, name: &str) -> Result<bool> {
    Ok(store.secret(team, name).await?.is_some())
}

/// Deletes a secret.
pub async fn delete(store: &Store, team: &str, name: &str) -> Result<()> {
    let deleted = store.delete_secret(team, name).await?;
    deleted.then_some(()).ok_or_else(|| not_found(team, name))
}

/// The plain value, for the host's own use (signing, bearer tokens).
pub async fn reveal(store: &Store, sealer: &Sealer, team: &str, name: &str) -> Result<String> {
    let secret = store
        .secret(team, name)
        .await?
        .ok_or_else(|| not_found(team, name))?;
    let sealed = hex::decode(&secret.sealed).map_err(anyhow::Error::from)?;
    let plain = sealer.open(&binding(team, name), &sealed)?;
    Ok(String::from_utf8(plain).map_err(anyhow::Error::from)?)
}

fn not_found(team: &str, name: &str) -> Error {
    Error::NotFound(format!("team '{team}' has no secret named '{name}'"))
}

fn info(secret: &Secret) -> SecretInfo {
    SecretInfo {
        name: secret.name.clone(),
        created_at: secret.created_at,
        updated_at: secret.updated_at,
        public_key: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn values_are_sealed_and_revealed_per_team() {
        let (_dir, store, sealer) = Sealer::scratch();
        let (_, created) = put(&store, &sealer, "ml", "TOKEN", "hunter2-value")
            .await
            .unwrap();
        assert!(created);
        let (_, created) = put(&store, &sealer, "ml", "TOKEN", "hunter3-value")
            .await
            .unwrap();
        assert!(!created);
        assert_eq!(
            reveal(&store, &sealer, "ml", "TOKEN").await.unwrap(),
            "hunter3-value"
        );
        assert!(reveal(&store, &sealer, "other", "TOKEN").await.is_err());
        for (_, _, v) in store.raw_records().await.unwrap() {
            assert!(!v.windows(13).any(|w| w == b"hunter3-value"));
        }
    }
}
