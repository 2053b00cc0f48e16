//! Inference usage totals.

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::decode;
use super::shared::usage_prefix;
use crate::model::{Totals, UsageRow};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl UsageRecords for Sled {
    async fn add_usage(&self, at: UsageAt<'_>, add: &Totals) -> Result<()> {
        let key = format!(
            "{}{}\0{}\0{}",
            usage_prefix(at.scope),
            at.day,
            at.model,
            at.key_id
        );
        let key = key.into_bytes();
        let w = self.writer().await;
        let mut totals: Totals = w.get_json(T::Usage, &key)?.unwrap_or_default();
        totals.add(add);
        w.put_json(T::Usage, key, &totals)?;
        w.finish()
    }

    async fn usage(&self, scope: &str) -> Result<Vec<UsageRow>> {
        let prefix = usage_prefix(scope);
        let mut rows = Vec::new();
        for (key, value) in self.scan(T::Usage, prefix.as_bytes())? {
            let key = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let mut parts = key.splitn(3, '\0');
            let (Some(day), Some(model), Some(key_id)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            rows.push(UsageRow {
                day: day.into(),
                model: model.into(),
                key_id: key_id.into(),
                totals: decode(T::Usage, &value)?,
            });
        }
        Ok(rows)
    }
}
