//! An automation's cooldown and rate limit (W&B's): whether a firing goes
//! or is recorded as `Skipped`. The store keeps each automation's recent
//! firing times and applies [`admit`] to them atomically, so the limit
//! holds across hosts sharing the store.

use crate::error::{Error, Result};
pub use crate::model::{SkipReason, Skipped, Throttle};

const HOUR_MS: u64 = 3_600_000;

/// The longest cooldown: a week.
pub const MAX_COOLDOWN_S: u64 = 7 * 24 * 3600;

/// Refuses limits that cannot be meant.
pub fn check(throttle: &Throttle) -> Result<()> {
    if throttle.cooldown_s.is_some_and(|c| c > MAX_COOLDOWN_S) {
        return Err(Error::invalid(
            "cooldown_s",
            format!("cooldown_s is at most {MAX_COOLDOWN_S} (a week); leave it out for none"),
        ));
    }
    if throttle.max_per_hour == Some(0) {
        return Err(Error::invalid(
            "max_per_hour",
            "max_per_hour must be at least 1; to stop an automation firing, delete it",
        ));
    }
    Ok(())
}

/// Whether a firing at `now_ms` goes, given `fires` (when the automation
/// fired before, oldest first). One that goes is added to `fires`, which
/// keeps only what a later check needs: the last hour, and the latest.
pub fn admit(throttle: &Throttle, fires: &mut Vec<u64>, now_ms: u64) -> Result<(), Skipped> {
    let since = |at: u64| now_ms.saturating_sub(at);
    if let (Some(cooldown), Some(&last)) = (throttle.cooldown_s, fires.last())
        && since(last) < cooldown.saturating_mul(1000)
    {
        return Err(Skipped {
            reason: SkipReason::Cooldown,
            message: format!(
                "it fired {:.1} s before, within its cooldown_s of {cooldown}",
                since(last) as f64 / 1000.0
            ),
        });
    }
    let in_hour = fires.iter().filter(|&&at| since(at) < HOUR_MS).count();
    if let Some(max) = throttle.max_per_hour
        && in_hour >= max as usize
    {
        return Err(Skipped {
            reason: SkipReason::RateLimit,
            message: format!("it fired {in_hour} times in the last hour, its max_per_hour"),
        });
    }
    fires.retain(|&at| since(at) < HOUR_MS);
    fires.push(now_ms);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cooldown_holds_back_until_it_has_passed() {
        let throttle = Throttle {
            cooldown_s: Some(60),
            max_per_hour: None,
        };
        let mut fires = Vec::new();
        assert!(admit(&throttle, &mut fires, 1_000_000).is_ok());
        let held = admit(&throttle, &mut fires, 1_059_999).unwrap_err();
        assert_eq!(held.reason, SkipReason::Cooldown);
        assert!(held.message.contains("60"), "{}", held.message);
        assert!(admit(&throttle, &mut fires, 1_060_000).is_ok());
        assert_eq!(fires, [1_000_000, 1_060_000]);
    }

    #[test]
    fn a_rate_limit_counts_the_last_sixty_minutes() {
        let throttle = Throttle {
            cooldown_s: None,
            max_per_hour: Some(2),
        };
        let mut fires = Vec::new();
        for at in [0, 1_000] {
            assert!(admit(&throttle, &mut fires, at).is_ok());
        }
        let held = admit(&throttle, &mut fires, HOUR_MS - 1).unwrap_err();
        assert_eq!(held.reason, SkipReason::RateLimit);
        assert!(
            admit(&throttle, &mut fires, HOUR_MS).is_ok(),
            "the first aged out"
        );
        assert_eq!(fires, [1_000, HOUR_MS], "only the last hour is kept");
    }

    #[test]
    fn without_limits_everything_fires_and_the_latest_is_kept() {
        let mut fires = vec![0];
        assert!(admit(&Throttle::default(), &mut fires, 10 * HOUR_MS).is_ok());
        assert_eq!(fires, [10 * HOUR_MS]);
    }

    #[test]
    fn limits_that_cannot_be_meant_name_their_field() {
        let zero = Throttle {
            cooldown_s: None,
            max_per_hour: Some(0),
        };
        assert!(
            check(&zero)
                .unwrap_err()
                .to_string()
                .contains("max_per_hour")
        );
        let long = Throttle {
            cooldown_s: Some(MAX_COOLDOWN_S + 1),
            max_per_hour: None,
        };
        assert!(check(&long).unwrap_err().to_string().contains("cooldown_s"));
    }
}
