//! Warm instances kept between calls, each reused only for the team it first
//! served.
//!
//! Instantiating a component afresh for every call isolates calls fully, but
//! for an interpreter's component (componentize-py, jco) it is most of the
//! call: linking its modules and faulting in its memory image cost ~1 ms,
//! where the render itself takes ~20 µs. A kept instance can remember only
//! what its own team gave it: another team never gets it. An instance that
//! trapped, ran out of time or hit a limit is never kept.

use std::sync::Mutex;

/// The team of calls made for no team: the host's own probes, and an
/// operator's trial calls. No team is named so.
pub const HOST: &str = "";

/// Calls an instance serves before it is replaced, so nothing a guest
/// accumulates can grow for ever.
pub const MAX_CALLS: u32 = 1_000;

/// The idle instances of one plugin, the most recently used last.
pub struct Warm<T> {
    idle: Mutex<Vec<Idle<T>>>,
    max_idle: usize,
}

struct Idle<T> {
    team: String,
    calls: u32,
    instance: T,
}

impl<T> Warm<T> {
    /// Keeps at most `max_idle` idle instances, across all teams.
    pub fn new(max_idle: usize) -> Warm<T> {
        Warm {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }

    /// The most recently used idle instance that served `team`, with the
    /// calls it has served.
    pub fn take(&self, team: &str) -> Option<(T, u32)> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let at = idle.iter().rposition(|i| i.team == team)?;
        let Idle {
            calls, instance, ..
        } = idle.remove(at);
        Some((instance, calls))
    }

    /// Keeps `instance`, which has now served `calls` calls, for `team`'s
    /// next call, unless it is worn out; the least recently used goes when
    /// too many are idle.
    pub fn keep(&self, team: &str, instance: T, calls: u32) {
        if calls >= MAX_CALLS {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.push(Idle {
            team: team.to_string(),
            calls,
            instance,
        });
        if idle.len() > self.max_idle {
            // Dropped outside the lock: tearing down a store takes a while.
            let oldest = idle.remove(0);
            drop(idle);
            drop(oldest);
        }
    }

    /// Instances idle now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is idle.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_goes_back_only_to_the_team_it_served() {
        let warm = Warm::new(3);
        warm.keep("a", "instance of a", 1);
        assert_eq!(warm.take("b"), None);
        assert_eq!(warm.take("a"), Some(("instance of a", 1)));
        assert_eq!(warm.take("a"), None);
    }

    #[test]
    fn a_worn_out_instance_is_not_kept() {
        let warm = Warm::new(3);
        warm.keep("a", 1, MAX_CALLS);
        assert!(warm.is_empty());
    }

    #[test]
    fn the_least_recently_used_goes_first() {
        let warm = Warm::new(3);
        for i in 0..4 {
            warm.keep(&format!("team {i}"), i, 1);
        }
        assert_eq!(warm.len(), 3);
        assert_eq!(warm.take("team 0"), None);
        assert_eq!(warm.take("team 3"), Some((3, 1)));
    }
}
