//! The inference response cache, in its tree: each answer behind the time
//! it expires.

use async_trait::async_trait;

use super::{Sled, T};
use crate::store::Result;
use crate::store::records::*;

/// Splits a stored value into when it expires and the answer.
fn split(value: &[u8]) -> Option<(u64, &[u8])> {
    let (at, answer) = value.split_at_checked(8)?;
    Some((u64::from_be_bytes(at.try_into().ok()?), answer))
}

#[async_trait]
impl CacheRecords for Sled {
    async fn cached(&self, key: &str, now_ms: u64) -> Result<Option<Vec<u8>>> {
        let Some(value) = self.get(T::ResponseCache, key.as_bytes())? else {
            return Ok(None);
        };
        Ok(split(&value)
            .filter(|(expires, _)| *expires > now_ms)
            .map(|(_, answer)| answer.to_vec()))
    }

    async fn cache(&self, key: &str, answer: &[u8], expires_ms: u64) -> Result<()> {
        let value = [&expires_ms.to_be_bytes()[..], answer].concat();
        let w = self.writer().await;
        w.put(T::ResponseCache, key.as_bytes().to_vec(), value);
        w.finish()
    }

    async fn trim_cache(&self, now_ms: u64, max_bytes: u64) -> Result<usize> {
        let mut kept = Vec::new();
        let mut gone = Vec::new();
        for (key, value) in self.all(T::ResponseCache)? {
            match split(&value) {
                Some((expires, answer)) if expires > now_ms => {
                    kept.push((expires, key, answer.len() as u64))
                }
                _ => gone.push(key),
            }
        }
        // The latest to expire are kept first.
        kept.sort_by(|a, b| b.cmp(a));
        let mut total = 0;
        for (_, key, size) in kept {
            total += size;
            if total > max_bytes {
                gone.push(key);
            }
        }
        if gone.is_empty() {
            return Ok(0);
        }
        let w = self.writer().await;
        for key in &gone {
            w.delete(T::ResponseCache, key.clone());
        }
        w.finish()?;
        Ok(gone.len())
    }
}
