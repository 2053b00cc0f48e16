//! Users and their API keys.

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::keys::prefix;
use crate::model::{ApiKey, User};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl UserRecords for Sled {
    async fn has_users(&self) -> Result<bool> {
        // At every start: the first key answers, not the whole tree.
        Ok(!self.is_empty(T::Users)?)
    }

    async fn insert_user(&self, user: &User) -> Result<bool> {
        let w = self.writer().await;
        if w.get(T::UserNames, user.name.as_bytes())?.is_some() {
            return Ok(false);
        }
        w.put_json(T::Users, user.id.as_bytes(), user)?;
        w.put(
            T::UserNames,
            user.name.as_bytes(),
            user.id.clone().into_bytes(),
        );
        w.finish()?;
        Ok(true)
    }

    async fn user(&self, id: &str) -> Result<Option<User>> {
        self.get_json(T::Users, id.as_bytes())
    }

    async fn user_named(&self, name: &str) -> Result<Option<User>> {
        match self.get(T::UserNames, name.as_bytes())? {
            Some(id) => self.get_json(T::Users, &id),
            None => Ok(None),
        }
    }

    async fn users(&self) -> Result<Vec<User>> {
        self.scan_json(T::Users, &[])
    }

    async fn insert_key(&self, hash: &str, key: &ApiKey) -> Result<()> {
        let w = self.writer().await;
        w.put_json(T::ApiKeys, hash.as_bytes(), key)?;
        w.put(
            T::UserKeys,
            prefix(&[&key.user_id, &key.id]).into_bytes(),
            hash.as_bytes().to_vec(),
        );
        w.finish()
    }

    async fn key(&self, hash: &str) -> Result<Option<ApiKey>> {
        self.get_json(T::ApiKeys, hash.as_bytes())
    }

    async fn keys_of(&self, user_id: &str) -> Result<Vec<ApiKey>> {
        let mut keys = Vec::new();
        for (_, hash) in self.scan(T::UserKeys, prefix(&[user_id]).as_ref())? {
            if let Some(key) = self.get_json(T::ApiKeys, &hash)? {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    async fn key_hash(&self, user_id: &str, key_id: &str) -> Result<Option<String>> {
        let hash = self.get(T::UserKeys, prefix(&[user_id, key_id]).as_ref())?;
        Ok(hash.map(|h| String::from_utf8_lossy(&h).into_owned()))
    }

    async fn delete_key(&self, user_id: &str, key_id: &str) -> Result<bool> {
        let index = prefix(&[user_id, key_id]).into_bytes();
        let w = self.writer().await;
        let Some(hash) = w.get(T::UserKeys, &index)? else {
            return Ok(false);
        };
        w.delete(T::ApiKeys, hash);
        w.delete(T::UserKeys, index);
        w.finish()?;
        Ok(true)
    }
}
