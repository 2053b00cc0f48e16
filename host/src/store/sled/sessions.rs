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
}
