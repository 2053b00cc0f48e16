//! Webhooks' health (circuits), in their tree; pacing, in memory (one host uses a sled store).

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::keys::prefix;
use crate::model::{Health, WebhookRef};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl ReceiverRecords for Sled {
    async fn health(&self, team: &str, webhook: &str) -> Result<Option<Health>> {
        self.get_json(T::Circuits, prefix(&[team, webhook]).as_ref())
    }

    async fn put_health(&self, team: &str, webhook: &str, health: &Health) -> Result<()> {
        let w = self.writer().await;
        w.put_json(T::Circuits, prefix(&[team, webhook]).into_bytes(), health)?;
        w.finish()
    }

    async fn pace_slot(&self, webhook: &WebhookRef, interval_us: u64, now_us: u64) -> Result<u64> {
        let mut pace = self.shared.pace.lock().unwrap_or_else(|p| p.into_inner());
        let key = format!("{}\0{}", webhook.team, webhook.name);
        let next = pace.entry(key).or_default();
        let slot = (*next).max(now_us);
        *next = slot + interval_us;
        Ok(slot)
    }
}
