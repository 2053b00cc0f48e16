//! Rate-limit claims, in their tree: a claim reads its window and writes
//! under the writer lock, so claims on one limit take turns. One row per
//! (bucket, time), to which claims and corrections add.

use async_trait::async_trait;

use super::{Sled, T, Writer};
use crate::store::Result;
use crate::store::records::*;

/// `bucket \0 at_ms`: where a bucket's claims made at `at_ms` start.
fn key(bucket: &str, at_ms: u64) -> Vec<u8> {
    [bucket.as_bytes(), b"\0", &at_ms.to_be_bytes()].concat()
}

/// A claim's key: its time, then eight zero bytes (rows written before
/// claims were folded have random ones there; both read the same).
fn claim_key(bucket: &str, at_ms: u64) -> Vec<u8> {
    [key(bucket, at_ms), vec![0; 8]].concat()
}

/// Adds `amount` to the row of `bucket`'s claims made at `at_ms`.
fn add(w: &Writer<'_>, bucket: &str, at_ms: u64, amount: i64) -> Result<()> {
    let k = claim_key(bucket, at_ms);
    let before = w
        .get(T::RateClaims, &k)?
        .and_then(|v| v.as_slice().try_into().ok().map(i64::from_be_bytes))
        .unwrap_or(0);
    w.put(T::RateClaims, k, (before + amount).to_be_bytes().to_vec());
    Ok(())
}

/// When the claim under `key` was made.
fn made_at(key: &[u8]) -> Option<u64> {
    let at = key.len().checked_sub(16)?;
    key[at..at + 8].try_into().ok().map(u64::from_be_bytes)
}

#[async_trait]
impl LimitRecords for Sled {
    async fn claim_limit(&self, claim: LimitClaim<'_>) -> Result<Granted> {
        let LimitClaim {
            bucket,
            limit,
            window: (since_ms, now_ms),
            need,
            want,
        } = claim;
        let w = self.writer().await;
        let (mut used, mut oldest_ms) = (0i64, None);
        let end = [bucket.as_bytes(), b"\x01"].concat();
        for (k, v) in w.range(T::RateClaims, &key(bucket, since_ms + 1), &end)? {
            oldest_ms = oldest_ms.or(made_at(&k));
            used += v.as_slice().try_into().map(i64::from_be_bytes).unwrap_or(0);
        }
        let room = i64::try_from(limit).unwrap_or(i64::MAX) - used;
        let granted = match u64::try_from(room) {
            Ok(room) if room >= need => want.min(room),
            _ => 0,
        };
        if granted > 0 {
            let amount = i64::try_from(granted).unwrap_or(i64::MAX);
            add(&w, bucket, now_ms, amount)?;
            w.finish()?;
        }
        Ok(Granted {
            granted,
            used,
            oldest_ms,
        })
    }

    async fn adjust_limits(&self, corrections: &[(String, u64, i64)]) -> Result<()> {
        if corrections.is_empty() {
            return Ok(());
        }
        let w = self.writer().await;
        for (bucket, at_ms, amount) in corrections {
            add(&w, bucket, *at_ms, *amount)?;
        }
        w.finish()
    }

    async fn purge_limits(&self, before_ms: u64, except: Option<&str>) -> Result<usize> {
        let w = self.writer().await;
        let mut removed = 0;
        for (k, _) in w.all(T::RateClaims)? {
            let kept = except.is_some_and(|end| {
                let bucket = &k[..k.len().saturating_sub(17)];
                bucket.ends_with(end.as_bytes())
            });
            if !kept && made_at(&k).is_some_and(|at| at < before_ms) {
                w.delete(T::RateClaims, k.clone());
                removed += 1;
            }
        }
        w.finish()?;
        Ok(removed)
    }
}
