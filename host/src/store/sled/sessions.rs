//! The web console's sessions.

use async_trait::async_trait;

use super::Sled;
use super::T;
use crate::model::Session;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl SessionRecords for Sled {
    async fn insert_session(&self, hash: &str, session: &Session) -> Result<()> {
        let w = self.writer().await;
        w.put_json(T::Sessions, hash.as_bytes(), session)?;
        w.finish()
    }

    async fn session(&self, hash: &str) -> Result<Option<Session>> {
        self.get_json(T::Sessions, hash.as_bytes())
    }

    async fn delete_session(&self, hash: &str) -> Result<bool> {
        let w = self.writer().await;
        if w.get(T::Sessions, hash.as_bytes())?.is_none() {
            return Ok(false);
        }
        w.delete(T::Sessions, hash.as_bytes().to_vec());
        w.finish()?;
        Ok(true)
    }

    async fn delete_sessions_of_key(&self, key_id: &str) -> Result<usize> {
        self.delete_sessions_where(|s| s.key_id == key_id).await
    }

    async fn delete_expired_sessions(&self, now: u64) -> Result<usize> {
        self.delete_sessions_where(|s| s.expires_at <= now).await
    }
}

impl Sled {
    /// Removes the sessions `ended` picks, in one commit. Sessions are few
    /// (one per signed-in browser), so a scan is fine.
    async fn delete_sessions_where(&self, ended: impl Fn(&Session) -> bool) -> Result<usize> {
        let w = self.writer().await;
        let mut removed = 0;
        for (key, value) in w.scan(T::Sessions, b"")? {
            let session: Session = super::decode(T::Sessions, &value)?;
            if ended(&session) {
                w.delete(T::Sessions, key);
                removed += 1;
            }
        }
        w.finish()?;
        Ok(removed)
    }
}
