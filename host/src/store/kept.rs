//! Values read from the store, kept while the stamp of the records they
//! were read from (`store::Changes`) stands, and a minute at most, a
//! last resort should a change go unheard. The delivery path's
//! configuration and the reads that let a request's caller in are kept
//! this way.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest an entry serves, whatever its stamp says.
const MAX_AGE: Duration = Duration::from_secs(60);

/// Most entries of each kind; past it, the aged go, and if that is not
/// enough the kind starts afresh.
const MAX_ENTRIES: usize = 10_000;

/// Entries of one kind, each with the stamp it was read under.
pub struct Kept<K, V>(Mutex<HashMap<K, (u64, Instant, V)>>);

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Kept(Mutex::new(HashMap::new()))
    }
}

impl<K: Hash + Eq, V: Clone> Kept<K, V> {
    /// The value kept for `key`, if it was read under stamp `epoch` and is
    /// fresh.
    pub fn get(&self, key: &K, epoch: u64) -> Option<V> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (at_epoch, at, value) = map.get(key)?;
        (*at_epoch == epoch && at.elapsed() < MAX_AGE).then(|| value.clone())
    }

    /// Keeps `value`, read under stamp `epoch` (taken before the read, so
    /// that a change while reading leaves the entry already stale).
    pub fn keep(&self, key: K, epoch: u64, value: V) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.retain(|_, (_, at, _)| at.elapsed() < MAX_AGE);
        }
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(key, (epoch, Instant::now(), value));
    }
}
