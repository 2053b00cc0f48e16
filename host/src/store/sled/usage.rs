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
    async fn add_usage(&self, scope: &str, add: &UsageRow) -> Result<()> {
        let (prefix, row) = (usage_prefix(scope), add);
        // A deployment is a fourth part; rows without one keep the
        // three-part keys written before routes.
        let mut key = format!("{prefix}{}\0{}\0{}", row.day, row.model, row.key_id);
        if !row.deployment.is_empty() {
            key = format!("{key}\0{}", row.deployment);
        }
        let key = key.into_bytes();
        let w = self.writer().await;
        let mut totals: Totals = w.get_json(T::Usage, &key)?.unwrap_or_default();
        totals.add(&add.totals);
        w.put_json(T::Usage, key, &totals)?;
        w.finish()
    }

    async fn usage(&self, scope: &str) -> Result<Vec<UsageRow>> {
        let prefix = usage_prefix(scope);
        let mut rows = Vec::new();
        for (key, value) in self.scan(T::Usage, prefix.as_bytes())? {
            let key = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let mut parts = key.splitn(4, '\0');
            let (Some(day), Some(model), Some(key_id)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            rows.push(UsageRow {
                day: day.into(),
                model: model.into(),
                key_id: key_id.into(),
                deployment: parts.next().unwrap_or_default().into(),
                totals: decode(T::Usage, &value)?,
            });
        }
        Ok(rows)
    }
}
