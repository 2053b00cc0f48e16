//! Store-wide facts and housekeeping.

use async_trait::async_trait;

use super::Sled;
use super::T;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl MetaRecords for Sled {
    async fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.get(T::Meta, key.as_bytes())
    }

    async fn set_meta(&self, key: &str, value: &[u8]) -> Result<()> {
        let w = self.writer().await;
        w.put(T::Meta, key.as_bytes(), value.to_vec());
        w.finish()
    }

    async fn quarantined(&self) -> Result<usize> {
        Ok(self.all(T::Quarantine)?.len())
    }
}
