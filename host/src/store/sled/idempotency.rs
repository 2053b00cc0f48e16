//! Idempotency keys: claimed, answered and lapsed under the writer lock.

use async_trait::async_trait;

use super::Sled;
use super::T;
use crate::model::Idempotent;
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl IdempotencyRecords for Sled {
    async fn claim_idempotency(
        &self,
        key: &str,
        request: &Idempotent,
        lapsed_before_ms: u64,
    ) -> Result<Claim> {
        let w = self.writer().await;
        let held: Option<Idempotent> = w.get_json(T::Idempotency, key.as_bytes())?;
        if let Some(held) = held.filter(|h| h.at_ms >= lapsed_before_ms) {
            return Ok(Claim::Held(held));
        }
        w.put_json(T::Idempotency, key.as_bytes(), request)?;
        w.finish()?;
        Ok(Claim::Claimed)
    }

    async fn settle_idempotency(&self, key: &str, answered: Option<&Idempotent>) -> Result<()> {
        let w = self.writer().await;
        match answered {
            Some(answered) => w.put_json(T::Idempotency, key.as_bytes(), answered)?,
            None => w.delete(T::Idempotency, key.as_bytes().to_vec()),
        }
        w.finish()
    }

    async fn purge_idempotency(&self, before_ms: u64) -> Result<usize> {
        let w = self.writer().await;
        let mut removed = 0;
        for (key, value) in w.scan(T::Idempotency, b"")? {
            let held: Idempotent = super::decode(T::Idempotency, &value)?;
            if held.at_ms < before_ms {
                w.delete(T::Idempotency, key);
                removed += 1;
            }
        }
        w.finish()?;
        Ok(removed)
    }
}
