//! The three run-metric tests, on a metric's recent values (oldest first,
//! the newest just logged). Each answers what fired, or `None`.

use crate::exports::switchyard::plugin::filter::{
    Aggregation, ChangeCondition, ChangeDirection, ChangeType, Comparison, Fired, MetricTest,
    ThresholdCondition, ZscoreCondition, ZscoreDirection,
};
use crate::fired;

/// Floating-point slack, so that a change of exactly the amount counts
/// although `(110 - 100) / 100` is not exactly `0.1` in binary.
const SLACK: f64 = 1e-9;

/// What `test` says of `values`.
pub fn test(test: &MetricTest, values: &[f64]) -> Option<Fired> {
    match test {
        MetricTest::Threshold(t) => threshold(t, values),
        MetricTest::Change(c) => change(c, values),
        MetricTest::Zscore(z) => zscore(z, values),
    }
}

/// The last `n` values (all of them, when fewer).
fn last(values: &[f64], n: u32) -> &[f64] {
    &values[values.len().saturating_sub(n as usize)..]
}

fn aggregate(how: Aggregation, values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    Some(match how {
        Aggregation::Average => values.iter().sum::<f64>() / values.len() as f64,
        Aggregation::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        Aggregation::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// The aggregate of the last `window` values (of all, when fewer) against
/// the threshold.
fn threshold(t: &ThresholdCondition, values: &[f64]) -> Option<Fired> {
    let value = aggregate(t.aggregation, last(values, t.window))?;
    let th = t.threshold;
    let holds = match t.comparison {
        Comparison::Gt => value > th,
        Comparison::Gte => value >= th,
        Comparison::Lt => value < th,
        Comparison::Lte => value <= th,
        Comparison::Eq => value == th,
        Comparison::Ne => value != th,
    };
    holds.then(|| fired(value, None, None))
}

/// The aggregate of the last `window` values against that of the up to
/// `prior_window` values before them. Needs a full current window and at
/// least one prior value; a relative change from 0 never fires.
fn change(c: &ChangeCondition, values: &[f64]) -> Option<Fired> {
    let split = values.len().checked_sub(c.window as usize)?;
    let current = aggregate(c.aggregation, &values[split..])?;
    let previous = aggregate(c.aggregation, last(&values[..split], c.prior_window))?;
    let delta = match c.change_type {
        ChangeType::Absolute => current - previous,
        ChangeType::Relative if previous == 0.0 => return None,
        ChangeType::Relative => (current - previous) / previous.abs(),
    };
    let moved = match c.direction {
        ChangeDirection::Increase => delta,
        ChangeDirection::Decrease => -delta,
        ChangeDirection::Any => delta.abs(),
    };
    (moved >= c.amount * (1.0 - SLACK)).then(|| fired(current, Some(previous), None))
}

/// The latest value's z-score against the mean and (population) standard
/// deviation of the last `window` values, itself included. Nothing fires
/// until the window is full, nor when every value in it is the same.
fn zscore(z: &ZscoreCondition, values: &[f64]) -> Option<Fired> {
    if values.len() < z.window as usize {
        return None;
    }
    let window = last(values, z.window);
    let n = window.len() as f64;
    let mean = window.iter().sum::<f64>() / n;
    let sd = (window.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    if sd == 0.0 {
        return None;
    }
    let latest = *window.last()?;
    let score = (latest - mean) / sd;
    let beyond = match z.direction {
        ZscoreDirection::Above => score >= z.threshold,
        ZscoreDirection::Below => score <= -z.threshold,
        ZscoreDirection::Any => score.abs() >= z.threshold,
    };
    beyond.then(|| fired(latest, None, Some(score)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relative(amount: f64) -> ChangeCondition {
        ChangeCondition {
            window: 1,
            prior_window: 2,
            aggregation: Aggregation::Average,
            change_type: ChangeType::Relative,
            direction: ChangeDirection::Increase,
            amount,
        }
    }

    #[test]
    fn a_relative_change_of_exactly_the_amount_fires_and_just_under_does_not() {
        let values = [100.0, 100.0, 110.0];
        let hit = change(&relative(0.1), &values).expect("10% is 10%");
        assert_eq!((hit.value, hit.previous), (110.0, Some(100.0)));
        assert!(change(&relative(0.1), &[100.0, 100.0, 109.99]).is_none());
        assert!(
            change(&relative(0.1), &[110.0]).is_none(),
            "no prior window"
        );
        assert!(change(&relative(0.1), &[0.0, 5.0]).is_none(), "from zero");
    }

    #[test]
    fn an_absolute_decrease_compares_the_windows_aggregates() {
        let drop = ChangeCondition {
            window: 2,
            prior_window: 2,
            change_type: ChangeType::Absolute,
            direction: ChangeDirection::Decrease,
            amount: 0.5,
            aggregation: Aggregation::Average,
        };
        // Prior [2, 2] → 2; current [1.5, 1.5] → 1.5: down by 0.5.
        let hit = change(&drop, &[9.0, 2.0, 2.0, 1.5, 1.5]).unwrap();
        assert_eq!((hit.value, hit.previous), (1.5, Some(2.0)));
        assert!(change(&drop, &[2.0, 2.0, 1.6, 1.6]).is_none());
    }

    #[test]
    fn a_zscore_waits_for_a_full_window_and_ignores_a_flat_one() {
        let above = ZscoreCondition {
            window: 4,
            direction: ZscoreDirection::Above,
            threshold: 1.5,
        };
        assert!(
            zscore(&above, &[1.0, 1.0, 9.0]).is_none(),
            "window not full"
        );
        assert!(zscore(&above, &[2.0, 2.0, 2.0, 2.0]).is_none(), "sd is 0");
        // Mean 3, sd √12 ≈ 3.46: z of 9 is √3 ≈ 1.73.
        let hit = zscore(&above, &[1.0, 1.0, 1.0, 9.0]).unwrap();
        assert_eq!(hit.value, 9.0);
        assert!((hit.zscore.unwrap() - 3f64.sqrt()).abs() < 1e-12);
        let below = ZscoreCondition {
            direction: ZscoreDirection::Below,
            ..above
        };
        assert!(zscore(&below, &[1.0, 1.0, 1.0, 9.0]).is_none());
    }
}
