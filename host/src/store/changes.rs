//! What changed among the records hosts keep in memory (`Kept`), record by
//! record. Each record has a path, its table and then what names it
//! (`webhooks/<team>/<name>`); a write counts against it, on this host as
//! it commits and, on a shared store, as another host's is announced. A
//! value read under a [`Changes::stamp`] serves while the stamp stands, so
//! a change to one record drops only what was read from it: a team's key
//! or membership changing leaves its webhooks and automations kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The tables kept, each with the columns that name a record in its path,
/// in order. PostgreSQL's triggers announce the same paths
/// (`migrations/0023_record_changes.sql`; a test holds the two equal).
pub const KEPT: &[(&str, &[&str])] = &[
    ("secrets", &["team"]),
    ("webhooks", &["team", "name"]),
    ("automations", &["scope"]),
    ("api_keys", &["hash"]),
    ("members", &["kind", "group_name", "user_id"]),
    ("projects", &["team", "name"]),
];

/// Most paths counted before the counts start afresh (and everything is
/// taken as changed, which is what starting afresh must mean).
const MAX_PATHS: usize = 100_000;

/// The counts. One per store, shared by its handles.
#[derive(Default)]
pub struct Changes {
    /// Moves when anything may have changed (a lost notification channel).
    everything: AtomicU64,
    /// Writes per path; a table's own name counts writes to any of its
    /// records (an engine that cannot say which).
    paths: Mutex<HashMap<String, u64>>,
}

/// A record's path: its table, then the parts that name it.
pub fn path<P: AsRef<str>>(table: &str, parts: &[P]) -> String {
    let mut path = table.to_string();
    for part in parts {
        path.push('/');
        path.push_str(part.as_ref());
    }
    path
}

impl Changes {
    /// Anything may have changed.
    pub fn everything(&self) {
        self.everything.fetch_add(1, Ordering::SeqCst);
    }

    /// The record at `path` (or, given a table's name, any of its records)
    /// changed.
    pub fn changed(&self, path: &str) {
        let mut paths = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        if paths.len() >= MAX_PATHS && !paths.contains_key(path) {
            // Past any stamp the old counts made (a stamp reads a few paths,
            // each with its table), so none comes round again.
            let made: u64 = paths.values().sum();
            paths.clear();
            self.everything
                .fetch_add(made.saturating_mul(16) + 1, Ordering::SeqCst);
        }
        *paths.entry(path.to_string()).or_default() += 1;
    }

    /// A number that moves whenever any record at `paths` changes (or its
    /// table as a whole, or everything). Take it before reading them.
    pub fn stamp<P: AsRef<str>>(&self, paths: &[P]) -> u64 {
        let counts = self.paths.lock().unwrap_or_else(|p| p.into_inner());
        let count = |p: &str| counts.get(p).copied().unwrap_or(0);
        let records: u64 = paths
            .iter()
            .map(|p| p.as_ref())
            .map(|p| count(p) + count(p.split('/').next().unwrap_or(p)))
            .sum();
        // Every count only grows, so the sum moves whenever one does.
        records + self.everything.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_moves_the_stamps_that_read_it_and_no_other() {
        let changes = Changes::default();
        let hook = ["webhooks/ml/ci", "secrets/ml"];
        let key = ["api_keys/abc"];
        let (h, k) = (changes.stamp(&hook), changes.stamp(&key));
        changes.changed("api_keys/abc");
        assert_eq!(changes.stamp(&hook), h, "a key's change keeps the webhook");
        assert_ne!(changes.stamp(&key), k);
        let h = changes.stamp(&hook);
        changes.changed("secrets/ml");
        assert_ne!(changes.stamp(&hook), h, "a secret of its team moves it");
        let h = changes.stamp(&hook);
        changes.changed("webhooks");
        assert_ne!(changes.stamp(&hook), h, "its table as a whole moves it");
        let (h, k) = (changes.stamp(&hook), changes.stamp(&key));
        changes.everything();
        assert!(changes.stamp(&hook) != h && changes.stamp(&key) != k);
    }
}
