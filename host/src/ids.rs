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

/// The (year, month, day) of a day counted from 1970-01-01, by the
/// civil-from-days algorithm.
pub fn civil(days: u64) -> (i64, u32, u32) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The day (counted from 1970-01-01) of a civil date, by the
/// days-from-civil algorithm.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    u64::try_from(era * 146_097 + doe - 719_468).unwrap_or(0)
}

/// Unix ms of the start of the UTC month holding `ms`, and of the next.
pub fn month_bounds_ms(ms: u64) -> (u64, u64) {
    const DAY_MS: u64 = 86_400_000;
    let (y, m, _) = civil(ms / DAY_MS);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (
        days_from_civil(y, m, 1) * DAY_MS,
        days_from_civil(ny, nm, 1) * DAY_MS,
    )
}

#[cfg(test)]
mod civil_tests {
    #[test]
    fn months_start_on_the_first() {
        // 2026-11-29T12:00Z, 2026-11-01, 2026-12-01.
        assert_eq!(
            super::month_bounds_ms(1_795_953_600_000),
            (1_793_491_200_000, 1_796_083_200_000)
        );
        assert_eq!(super::days_from_civil(2000, 2, 29), 11_016);
        assert_eq!(super::civil(11_016), (2000, 2, 29));
    }
}
