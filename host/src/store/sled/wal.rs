//! The journal as sled's write-ahead log.
//!
//! Every commit logs its writes to sled's trees in the journal, in the same
//! journal commit as its delivery records, before applying them to sled. A
//! commit is then durable once the journal is (one `fdatasync`), and sled is
//! flushed by a checkpointer now and then rather than at every group
//! commit, which cost more than the rest of the delivery path together
//! (sled's flush runs on threads of its own, about 40% of a busy host's CPU).
//!
//! A checkpoint is a sled flush, the journal's index with it, then an
//! [`Entry::Checkpoint`] naming the journal position taken before it. At open, sled's writes logged after the
//! last checkpoint are applied again, in order: each sets a key to its
//! final value, so applying one that sled already held changes nothing.

use std::sync::{Condvar, Mutex, Weak};
use std::time::Duration;

use anyhow::{Context, bail};

use super::journal::{Entry, Frozen, Journal};
use super::{Overlay, Shared, T};

/// How long after a write the checkpointer flushes, so that a second's
/// writes share one flush.
const EVERY: Duration = Duration::from_secs(1);

/// Whether anything was written since the last checkpoint: sled's writes
/// to flush, or the journal's, for its snapshot to follow (else a start
/// after a burst of deliveries would replay them all). The checkpointer
/// sleeps until then, so an idle store wakes no thread.
#[derive(Default)]
pub(super) struct Dirty {
    dirty: Mutex<bool>,
    marked: Condvar,
}

impl Dirty {
    /// Notes writes to flush.
    pub(super) fn mark(&self) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if !*dirty {
            *dirty = true;
            self.marked.notify_one();
        }
    }

    /// Takes the mark: whatever is written after this needs a flush too.
    fn take(&self) {
        *self.dirty.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }

    /// Waits until marked, or `limit` passes; says which.
    pub(super) fn wait(&self, limit: Duration) -> bool {
        let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        let (dirty, _) = self
            .marked
            .wait_timeout_while(dirty, limit, |dirty| !*dirty)
            .unwrap_or_else(|p| p.into_inner());
        *dirty
    }
}

/// The journal entry for a commit's writes to sled:
/// `(tree name len u8, name, key len u32, key, 0 | 1 value len u32 value)*`.
pub(super) fn entry(overlay: &Overlay) -> Entry {
    let mut writes = Vec::new();
    for ((t, key), value) in overlay {
        let name = t.name().as_bytes();
        writes.push(name.len() as u8);
        writes.extend_from_slice(name);
        writes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        writes.extend_from_slice(key);
        match value {
            None => writes.push(0),
            Some(value) => {
                writes.push(1);
                writes.extend_from_slice(&(value.len() as u32).to_le_bytes());
                writes.extend_from_slice(value);
            }
        }
    }
    Entry::Sled { writes }
}

/// Applies logged writes to sled's trees again, in order, and flushes.
pub(super) fn redo(shared: &Shared, logged: Vec<Vec<u8>>) -> anyhow::Result<()> {
    let commits = logged.len();
    for writes in logged {
        for (t, key, value) in decode(&writes)? {
            match value {
                Some(value) => shared.tree(t).insert(key, value)?,
                None => shared.tree(t).remove(key)?,
            };
        }
    }
    if commits > 0 {
        shared.db.flush()?;
        tracing::info!(
            commits,
            "applied the store's logged writes again after an unclean stop"
        );
    }
    Ok(())
}

/// Flushes sled, then records that everything logged before the position
/// taken first is in it (see [`checkpoint`]), then writes the journal's
/// snapshot taken there. Holds the writer lock through the flush, so that
/// no commit is half applied at the position and none reaches sled between
/// the journal's sync and sled's flush; one checkpoint at a time.
pub(super) fn checkpoint_now(shared: &Shared) -> crate::store::Result<(u64, u64)> {
    let _one = shared
        .checkpointing
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    shared.dirty.take();
    let frozen = {
        // Uncontended at open, which may run on an async thread.
        let _writer = match shared.writer.try_lock() {
            Ok(writer) => writer,
            Err(_) => shared.writer.blocking_lock(),
        };
        checkpoint(&shared.journal, || {
            shared.db.flush().map(|_| ()).map_err(super::io)
        })?
    };
    shared.journal.write_snapshot(frozen)
}

/// The checkpoint protocol, `flush` being sled's: the journal is synced
/// before sled is flushed (write-ahead: sled never holds a write whose
/// frame, and the rest of its commit, a crash could still take), the
/// journal's index frozen at that position (`journal/snapshot.rs`), then a
/// `Checkpoint` names it. The caller keeps commits out meanwhile, then
/// writes the frozen snapshot with commits going on: written after sled's
/// flush, it never stands past what sled holds.
pub(super) fn checkpoint(
    journal: &Journal,
    flush: impl FnOnce() -> crate::store::Result<()>,
) -> crate::store::Result<Frozen> {
    journal.sync()?;
    let frozen = journal.freeze()?;
    let (seg, off) = frozen.position();
    let done = flush().and_then(|()| {
        journal
            .append(vec![Entry::Checkpoint { seg, off }])
            .map(|_| ())
    });
    match done {
        Ok(()) => Ok(frozen),
        Err(e) => {
            journal.discard(frozen);
            Err(e)
        }
    }
}

/// Checkpoints [`EVERY`] after sled has unflushed writes, for as long as
/// the store is open. Waits for a write in between (looking once a minute
/// whether the store is still open).
pub(super) fn spawn_checkpointer(shared: Weak<Shared>) {
    let Some((dirty, reserve)) = shared
        .upgrade()
        .map(|s| (s.dirty.clone(), s.reserve.clone()))
    else {
        return;
    };
    std::thread::Builder::new()
        .name("store-checkpoint".into())
        .spawn(move || {
            loop {
                // While the disk is full, looks every second for room to
                // set the reserve aside again.
                let limit = Duration::from_secs(if reserve.is_full() { 1 } else { 60 });
                let marked = dirty.wait(limit);
                if marked {
                    std::thread::sleep(EVERY);
                }
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                reserve.restore();
                if !marked {
                    continue;
                }
                match shared.noting_full(checkpoint_now(&shared)) {
                    // Closed segments' indexes, outside the writer's lock.
                    Ok(_) => {
                        if let Err(e) = shared.journal.index_sealed() {
                            tracing::warn!(error = %e, "indexing a closed journal segment failed; retrying at the next checkpoint");
                        }
                    }
                    // Logged; the host stops.
                    Err(crate::store::StoreError::Failed(_)) => return,
                    Err(e) => {
                        tracing::error!(error = %e, "checkpointing the store failed; retrying");
                        shared.dirty.mark();
                    }
                }
            }
        })
        .expect("spawning the store's checkpoint thread");
}

/// The writes an [`entry`] holds.
/// One logged write: tree, key, value (`None` removes).
type Write = (T, Vec<u8>, Option<Vec<u8>>);

fn decode(mut bytes: &[u8]) -> anyhow::Result<Vec<Write>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let name = String::from_utf8(take(&mut bytes, 1, true)?.to_vec())?;
        let t = *T::ALL
            .iter()
            .find(|t| t.name() == name)
            .with_context(|| format!("the journal names a tree this build lacks: {name}"))?;
        let key = take(&mut bytes, 4, true)?.to_vec();
        let value = match take(&mut bytes, 1, false)? {
            [0] => None,
            _ => Some(take(&mut bytes, 4, true)?.to_vec()),
        };
        out.push((t, key, value));
    }
    Ok(out)
}

/// The next `n` bytes of `bytes`, or (when `sized`) the next run of bytes
/// whose length the next `n` bytes give, little-endian.
fn take<'a>(bytes: &mut &'a [u8], n: usize, sized: bool) -> anyhow::Result<&'a [u8]> {
    let len = if sized {
        let mut raw = [0u8; 8];
        raw[..n].copy_from_slice(bytes.get(..n).context("a logged write cut short")?);
        *bytes = &bytes[n..];
        u64::from_le_bytes(raw) as usize
    } else {
        n
    };
    if bytes.len() < len {
        bail!("a logged write cut short");
    }
    let (head, rest) = bytes.split_at(len);
    *bytes = rest;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Engine;
    use crate::store::records::*;

    /// A copy of the data directory taken right after a durable commit, and
    /// before any checkpoint, is what a crash leaves: sled has not flushed,
    /// and the commit must come back from the journal.
    #[tokio::test]
    async fn a_durable_commit_survives_a_crash_before_sled_flushes() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::Sled::open(&dir.path().join("a")).unwrap();
        let user = crate::store::contract::user("u1", "operator", 0);
        assert!(store.insert_user(&user).await.unwrap());
        store.durable().await.unwrap();
        let crashed = dir.path().join("b");
        copy_dir(&dir.path().join("a"), &crashed);
        let reopened = super::super::Sled::open(&crashed).unwrap();
        assert_eq!(reopened.user_named("operator").await.unwrap(), Some(user));
    }

    fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    #[test]
    fn writes_decode_as_they_were_logged() {
        let mut overlay = Overlay::new();
        overlay.insert((T::Tags, b"k1".to_vec()), Some(b"v1".to_vec()));
        overlay.insert((T::Meta, b"gone".to_vec()), None);
        overlay.insert((T::Meta, Vec::new()), Some(Vec::new()));
        let Entry::Sled { writes } = entry(&overlay) else {
            panic!("not a sled entry");
        };
        let decoded = decode(&writes).unwrap();
        let expected: Vec<_> = overlay.into_iter().map(|((t, k), v)| (t, k, v)).collect();
        assert_eq!(decoded, expected);
        assert!(decode(&writes[..writes.len() - 1]).is_err());
    }
}
