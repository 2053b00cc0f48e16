//! Circuit breakers: a webhook that keeps failing gets a rest instead of
//! every due retry at full speed. After `failures` consecutive failed
//! attempts, or a failure ratio over the last `window`, its circuit opens:
//! deliveries wait (without spending attempts) for a cool-off, then one
//! probe goes. A success closes the circuit and the held deliveries go; a
//! failure reopens it for twice as long, up to the cap.
//!
//! Each breaker also knows since when every attempt has failed, for
//! disabling an endpoint dead for days (`disable_after_hours`).
//!
//! Each host decides for itself, in memory, so the delivery path reads
//! nothing more per send; every transition is also written to the store,
//! where the API and console show it and a restarted host finds it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::model::{BreakerSettings, Circuit, Health};

/// The reason of a circuit a failed probe opened again.
pub const PROBE_FAILED: &str = "the probe failed";

/// What to do with a due delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Send it.
    Send,
    /// Send it as the probe of a half-open circuit.
    Probe,
    /// Hold it until this unix ms.
    Hold(u64),
}

/// One webhook's breaker on this host.
#[derive(Debug, Default)]
struct Breaker {
    circuit: Option<Circuit>,
    consecutive: u32,
    /// The last attempts' outcomes, `true` for a failure.
    recent: VecDeque<bool>,
    /// Unix ms of the first failed attempt since the last success.
    failing_since: Option<u64>,
}

/// The breakers of every webhook this host sends to.
#[derive(Default)]
pub struct Breakers {
    by_webhook: Mutex<HashMap<String, Breaker>>,
}

/// A webhook's health that changed, to write to the store.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The health now.
    pub health: Health,
    /// Whether its circuit moved (else only when it began failing did).
    pub circuit_moved: bool,
}

/// A change, if there was one.
pub type Changed = Option<Change>;

impl Breakers {
    /// Starts `webhook`'s breaker from what the store says, unless this
    /// host already has one.
    pub fn seed(&self, webhook: &str, stored: Option<Health>) {
        let mut map = self.lock();
        map.entry(webhook.to_string()).or_insert_with(|| Breaker {
            circuit: (stored.as_ref())
                .and_then(|h| Some(h.circuit.clone()).filter(|c| *c != Circuit::Closed)),
            failing_since: stored.and_then(|h| h.failing_since_ms),
            ..Breaker::default()
        });
    }

    /// Whether `webhook` has a breaker on this host yet.
    pub fn knows(&self, webhook: &str) -> bool {
        self.lock().contains_key(webhook)
    }

    /// What to do with a delivery due at `now`; `probe_wait_ms` is how long
    /// a probe may take, after which another may go.
    pub fn gate(
        &self,
        webhook: &str,
        settings: &BreakerSettings,
        now: u64,
        probe_wait_ms: u64,
    ) -> (Gate, Changed) {
        if !settings.enabled {
            return (Gate::Send, None);
        }
        let mut map = self.lock();
        let Some(breaker) = map.get_mut(webhook) else {
            return (Gate::Send, None);
        };
        match breaker.circuit.clone() {
            None | Some(Circuit::Closed) => (Gate::Send, None),
            Some(Circuit::Open {
                until_ms,
                cooloff_ms,
                ..
            }) => {
                if now < until_ms {
                    return (Gate::Hold(until_ms), None);
                }
                let probing = Circuit::HalfOpen {
                    since_ms: now,
                    cooloff_ms,
                };
                breaker.circuit = Some(probing);
                (Gate::Probe, breaker.moved())
            }
            Some(Circuit::HalfOpen {
                since_ms,
                cooloff_ms,
            }) => {
                if now < since_ms + probe_wait_ms {
                    return (Gate::Hold(since_ms + probe_wait_ms), None);
                }
                // The probe never came back: another goes.
                breaker.circuit = Some(Circuit::HalfOpen {
                    since_ms: now,
                    cooloff_ms,
                });
                (Gate::Probe, breaker.moved())
            }
        }
    }

    /// Counts an attempt's outcome (`failed`; `probe` if it was one) and
    /// returns the health if it changed.
    pub fn record(
        &self,
        webhook: &str,
        settings: &BreakerSettings,
        failed: bool,
        probe: bool,
        now: u64,
    ) -> Changed {
        let mut map = self.lock();
        let breaker = map.entry(webhook.to_string()).or_default();
        let began = match (failed, breaker.failing_since) {
            (true, None) => Some(Some(now)),
            (false, Some(_)) => Some(None),
            _ => None,
        };
        if let Some(since) = began {
            breaker.failing_since = since;
        }
        let moved = settings.enabled && breaker.count_against(settings, failed, probe, now);
        (moved || began.is_some()).then(|| Change {
            health: breaker.health(),
            circuit_moved: moved,
        })
    }

    /// When every attempt to `webhook` has failed for `after_ms` by `now`:
    /// since when, with its health to write, failing counted afresh from
    /// here (the caller disables it).
    pub fn overdue(&self, webhook: &str, after_ms: u64, now: u64) -> Option<(u64, Health)> {
        let mut map = self.lock();
        let breaker = map.get_mut(webhook)?;
        let since = breaker.failing_since?;
        if now.saturating_sub(since) < after_ms {
            return None;
        }
        breaker.failing_since = None;
        Some((since, breaker.health()))
    }

    /// The health of `webhook` as this host sees it.
    pub fn health(&self, webhook: &str) -> Health {
        let map = self.lock();
        map.get(webhook).map_or(
            Health {
                circuit: Circuit::Closed,
                failing_since_ms: None,
            },
            Breaker::health,
        )
    }

    /// How many circuits are open and half open on this host.
    pub fn counts(&self) -> (usize, usize) {
        let map = self.lock();
        let count = |f: fn(&Circuit) -> bool| {
            map.values()
                .filter(|b| b.circuit.as_ref().is_some_and(f))
                .count()
        };
        (
            count(|c| matches!(c, Circuit::Open { .. })),
            count(|c| matches!(c, Circuit::HalfOpen { .. })),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Breaker>> {
        self.by_webhook.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Breaker {
    fn health(&self) -> Health {
        Health {
            circuit: self.circuit.clone().unwrap_or(Circuit::Closed),
            failing_since_ms: self.failing_since,
        }
    }

    /// The change of a circuit that moved.
    fn moved(&self) -> Changed {
        Some(Change {
            health: self.health(),
            circuit_moved: true,
        })
    }

    /// Counts an attempt against the circuit; whether it moved.
    fn count_against(
        &mut self,
        settings: &BreakerSettings,
        failed: bool,
        probe: bool,
        now: u64,
    ) -> bool {
        if probe || matches!(self.circuit, Some(Circuit::HalfOpen { .. })) {
            self.after_probe(settings, failed, now);
            return true;
        }
        if matches!(self.circuit, Some(Circuit::Open { .. })) {
            // An attempt that started before the circuit opened.
            return false;
        }
        self.count(settings, failed);
        let Some((why, failures)) = self.tripped(settings) else {
            return false;
        };
        self.reset(Some(Circuit::Open {
            until_ms: now + settings.cooloff_ms,
            cooloff_ms: settings.cooloff_ms,
            reason: why,
            failures,
        }));
        true
    }

    fn count(&mut self, settings: &BreakerSettings, failed: bool) {
        self.consecutive = if failed { self.consecutive + 1 } else { 0 };
        self.recent.push_back(failed);
        while self.recent.len() > settings.window.max(1) as usize {
            self.recent.pop_front();
        }
    }

    /// Why the circuit should open, and after how many failed attempts,
    /// if it should.
    fn tripped(&self, settings: &BreakerSettings) -> Option<(String, u32)> {
        if self.consecutive >= settings.failures.max(1) {
            let why = format!("{} consecutive failed attempts", self.consecutive);
            return Some((why, self.consecutive));
        }
        let failed = self.recent.iter().filter(|f| **f).count();
        let full = self.recent.len() >= settings.window.max(1) as usize;
        let ratio = failed as f64 / self.recent.len().max(1) as f64;
        (full && ratio >= settings.failure_ratio).then(|| {
            let why = format!("{failed} of the last {} attempts failed", self.recent.len());
            (why, failed as u32)
        })
    }

    fn after_probe(&mut self, settings: &BreakerSettings, failed: bool, now: u64) {
        if !failed {
            self.reset(None);
            return;
        }
        let last = match &self.circuit {
            Some(Circuit::HalfOpen { cooloff_ms, .. } | Circuit::Open { cooloff_ms, .. }) => {
                *cooloff_ms
            }
            _ => settings.cooloff_ms,
        };
        let cooloff_ms = last.saturating_mul(2).min(settings.max_cooloff_ms.max(1));
        self.reset(Some(Circuit::Open {
            until_ms: now + cooloff_ms,
            cooloff_ms,
            reason: PROBE_FAILED.into(),
            failures: 1,
        }));
    }

    fn reset(&mut self, circuit: Option<Circuit>) {
        self.circuit = circuit;
        self.consecutive = 0;
        self.recent.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The circuit, if it moved.
    fn moved(changed: Changed) -> Option<Circuit> {
        changed
            .filter(|c| c.circuit_moved)
            .map(|c| c.health.circuit)
    }

    fn settings() -> BreakerSettings {
        BreakerSettings {
            failures: 3,
            window: 10,
            failure_ratio: 0.5,
            cooloff_ms: 100,
            max_cooloff_ms: 300,
            enabled: true,
        }
    }

    #[test]
    fn consecutive_failures_open_a_probe_closes_and_a_failed_probe_doubles_the_cooloff() {
        let (b, s) = (Breakers::default(), settings());
        for _ in 0..2 {
            assert_eq!(moved(b.record("w", &s, true, false, 0)), None);
        }
        assert!(matches!(
            moved(b.record("w", &s, true, false, 0)),
            Some(Circuit::Open { until_ms: 100, .. })
        ));
        assert_eq!(b.gate("w", &s, 50, 1000), (Gate::Hold(100), None));
        let (gate, changed) = b.gate("w", &s, 100, 1000);
        assert_eq!(gate, Gate::Probe);
        assert!(matches!(moved(changed), Some(Circuit::HalfOpen { .. })));
        assert_eq!(
            b.gate("w", &s, 101, 1000).0,
            Gate::Hold(1100),
            "one probe at a time"
        );
        // Fails: 200 ms now, then capped at 300.
        let reopened = moved(b.record("w", &s, true, true, 150));
        assert!(matches!(
            reopened,
            Some(Circuit::Open {
                until_ms: 350,
                cooloff_ms: 200,
                ..
            })
        ));
        b.gate("w", &s, 350, 1000);
        let capped = moved(b.record("w", &s, true, true, 400));
        assert!(matches!(
            capped,
            Some(Circuit::Open {
                cooloff_ms: 300,
                ..
            })
        ));
        b.gate("w", &s, 700, 1000);
        assert_eq!(
            moved(b.record("w", &s, false, true, 710)),
            Some(Circuit::Closed)
        );
        assert_eq!(b.gate("w", &s, 711, 1000), (Gate::Send, None));
    }

    #[test]
    fn a_failure_ratio_over_the_window_opens_and_successes_in_between_do_not_reset_it() {
        let (b, s) = (Breakers::default(), settings());
        let mut opened = None;
        for i in 0..10 {
            opened = opened.or(moved(b.record("w", &s, i % 2 == 0, false, 0)));
        }
        assert!(
            matches!(opened, Some(Circuit::Open { ref reason, .. }) if reason.contains("5 of the last 10"))
        );
        let off = BreakerSettings {
            enabled: false,
            ..s
        };
        let b = Breakers::default();
        for _ in 0..20 {
            assert_eq!(moved(b.record("w", &off, true, false, 0)), None);
        }
        assert_eq!(b.gate("w", &off, 0, 0), (Gate::Send, None));
    }

    #[test]
    fn failing_begins_at_the_first_failure_ends_at_a_success_and_falls_due_once() {
        let b = Breakers::default();
        let s = BreakerSettings {
            enabled: false,
            ..settings()
        };
        let began = b.record("w", &s, true, false, 10).expect("began failing");
        assert_eq!(began.health.failing_since_ms, Some(10));
        assert!(!began.circuit_moved);
        assert_eq!(
            b.record("w", &s, true, false, 20),
            None,
            "nothing new to write"
        );
        assert_eq!(b.overdue("w", 100, 109), None);
        let (since, health) = b.overdue("w", 100, 110).expect("due");
        assert_eq!((since, health.failing_since_ms), (10, None));
        assert_eq!(b.overdue("w", 100, 1000), None, "once, then afresh");
        assert!(b.record("w", &s, true, false, 200).is_some());
        let ended = b.record("w", &s, false, false, 210).expect("ended");
        assert_eq!(ended.health.failing_since_ms, None);
        assert_eq!(b.health("w").failing_since_ms, None);
    }
}
