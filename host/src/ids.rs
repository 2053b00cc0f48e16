//! Identifiers, secrets and timestamps.

use std::time::{SystemTime, UNIX_EPOCH};

/// Fills `buf` from the thread's CSPRNG (ChaCha, seeded and reseeded from
/// the operating system): ids, nonces and keys come from here. A system
/// call per id, as `getrandom` makes, was 1% of the host's time per event.
pub fn fill_random(buf: &mut [u8]) {
    rand::RngCore::fill_bytes(&mut rand::rng(), buf);
}

/// `bytes` random bytes, as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    fill_random(&mut buf);
    hex::encode(buf)
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A new id that sorts by creation time: 16 hex digits of microseconds since
/// the epoch, then 8 random hex digits so ids made on different hosts in the
/// same microsecond differ. On one host each id is later than the last,
/// even in the same microsecond (a FIFO webhook's order rests on it).
pub fn ordered_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let previous = LAST.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        Some(now.max(last + 1))
    });
    let micros = now.max(previous.unwrap_or(0) + 1);
    format!("{micros:016x}{}", random_hex(4))
}

#[cfg(test)]
mod tests {
    #[test]
    fn ordered_ids_made_one_after_another_sort_in_that_order() {
        let ids: Vec<String> = (0..10_000).map(|_| super::ordered_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
