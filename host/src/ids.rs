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
/// the epoch, then 8 random hex digits so ids made in the same microsecond differ.
pub fn ordered_id() -> String {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    format!("{micros:016x}{}", random_hex(4))
}
