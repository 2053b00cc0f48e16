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

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use anyhow::{Context, bail};

use super::journal::{Entry, Frozen, Journal};
use super::{Overlay, Shared, T};

/// Commits in the journal whose writes sled does not hold yet. sled writes
/// its log out on threads of its own, whenever it likes, so a write handed
/// to it may be on disk before the journal's frame that logs it: after a
/// power cut sled would hold a commit the journal cut as a torn tail.
/// Writes therefore reach sled only once the journal's sync covers their
/// commit ([`Unapplied::apply_synced`]); readers see them here meanwhile.
#[derive(Default)]
pub(super) struct Unapplied {
    waiting: Mutex<Waiting>,
    /// How many commits wait: reads skip the lock when none do.
    count: AtomicUsize,
    /// One applier at a time, so that commits reach sled in order.
    applying: Mutex<()>,
}

#[derive(Default)]
struct Waiting {
    /// In commit order, each with the journal mark that covers it.
    commits: VecDeque<(u64, Arc<Overlay>)>,
    /// Each key's latest unapplied value, with its commit's mark.
    latest: BTreeMap<(T, Vec<u8>), Marked>,
}

/// A value (`None`: deleted) and the mark of the commit that wrote it.
type Marked = (u64, Option<Vec<u8>>);

impl Unapplied {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a commit appended to the journal under `mark`.
    pub(super) fn push(&self, mark: u64, overlay: Overlay) {
        let mut waiting = self.waiting();
        for (key, value) in &overlay {
            waiting.latest.insert(key.clone(), (mark, value.clone()));
        }
        waiting.commits.push_back((mark, Arc::new(overlay)));
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// The unapplied value of `key`, if a waiting commit wrote it
    /// (`Some(None)`: deleted).
    pub(super) fn get(&self, t: T, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if self.count.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let waiting = self.waiting();
        waiting
            .latest
            .get(&(t, key.to_vec()))
            .map(|(_, value)| value.clone())
    }

    /// Lays the unapplied writes to `t` for which `within` holds over
    /// `found`, a reading of sled.
    pub(super) fn over(
        &self,
        t: T,
        from: &[u8],
        within: impl Fn(&[u8]) -> bool,
        found: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    ) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let waiting = self.waiting();
        let writes = waiting
            .latest
            .range((t, from.to_vec())..)
            .take_while(|((tree, key), _)| *tree == t && within(key));
        for ((_, key), (_, value)) in writes {
            match value {
                Some(value) => found.insert(key.clone(), value.clone()),
                None => found.remove(key),
            };
        }
    }

    /// Whether any write to `t` waits.
    pub(super) fn touches(&self, t: T) -> bool {
        self.count.load(Ordering::SeqCst) > 0
            && self
                .waiting()
                .latest
                .range((t, Vec::new())..)
                .next()
                .is_some_and(|((tree, _), _)| *tree == t)
    }

    /// Hands every waiting commit covered by `synced` (a journal mark) to
    /// `apply`, in order; each leaves this queue only once applied, so a
    /// reader finds its writes here or in sled, never in neither.
    pub(super) fn apply_synced(
        &self,
        synced: u64,
        mut apply: impl FnMut(&Overlay) -> crate::store::Result<()>,
    ) -> crate::store::Result<()> {
        let _one = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let next = {
                let waiting = self.waiting();
                match waiting.commits.front() {
                    Some((mark, overlay)) if *mark <= synced => (*mark, overlay.clone()),
                    _ => return Ok(()),
                }
            };
            let (mark, overlay) = next;
            apply(&overlay)?;
            let mut waiting = self.waiting();
            waiting.commits.pop_front();
            for key in overlay.keys() {
                if waiting.latest.get(key).is_some_and(|(m, _)| *m == mark) {
                    waiting.latest.remove(key);
                }
            }
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

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

/// The writes to apply to sled again at open: those logged since the last
/// checkpoint and, when sled holds less than that checkpoint said (its
/// files lost what a power cut took), those since the position sled does
/// hold. Refused, naming the files, when the journal no longer has them:
/// a store that lost acknowledged state does not start.
pub(super) fn to_redo(shared: &Shared, since: Vec<Vec<u8>>) -> anyhow::Result<Vec<Vec<u8>>> {
    let checkpoint = shared.journal.checkpointed();
    let held = match sled_at(shared.tree(T::Meta))? {
        Some(at) => at,
        // An older build's store: it records its position from the first
        // checkpoint on.
        None if super::read_schema_version(shared)?.is_some() => return Ok(since),
        // sled holds nothing at all.
        None => (0, 0),
    };
    if held >= checkpoint {
        return Ok(since);
    }
    tracing::warn!(
        sled = ?held,
        checkpoint = ?checkpoint,
        "sled's files hold less than the journal's last checkpoint says (a power cut took \
         writes they had not made durable); applying the journal's writes again from where \
         sled stands"
    );
    let mut writes = shared
        .journal
        .sled_writes_between(held, checkpoint)
        .map_err(|e| {
            anyhow::anyhow!(
                "sled's files in {} hold the store up to journal position {held:?}, but the \
                 journal's last checkpoint is at {checkpoint:?} and {e}: acknowledged state is \
                 lost, so switchyard will not start. Copy the data directory aside and restore \
                 it from a backup (docs/operations.md, \"When the store is damaged\")",
                shared.dir.display()
            )
        })?;
    writes.extend(since);
    Ok(writes)
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
        checkpoint(&shared.journal, |(seg, off)| {
            // Every commit is synced now: sled gets them all, then the
            // position they reach, and is made durable (a real fsync,
            // `vendor/README.md`) before the checkpoint names it.
            shared.apply_synced()?;
            shared
                .tree(T::Meta)
                .insert(SLED_AT, position_bytes(seg, off).as_slice())
                .map_err(|e| shared.sled_failed("recording its journal position in", e))?;
            shared
                .db
                .flush()
                .map(|_| ())
                .map_err(|e| shared.sled_failed("flushing", e))
        })?
    };
    shared.journal.write_snapshot(frozen)
}

/// sled's `meta` key for the journal position it holds durably: every
/// write logged before it is in sled's files (see [`checkpoint_now`]).
pub(super) const SLED_AT: &[u8] = b"journal_position";

fn position_bytes(seg: u64, off: u64) -> [u8; 16] {
    let mut bytes = [0; 16];
    bytes[..8].copy_from_slice(&seg.to_be_bytes());
    bytes[8..].copy_from_slice(&off.to_be_bytes());
    bytes
}

/// The journal position sled says it holds, if it says (`meta`: its meta tree).
pub(super) fn sled_at(meta: &sled::Tree) -> anyhow::Result<Option<(u64, u64)>> {
    let Some(bytes) = meta.get(SLED_AT)? else {
        return Ok(None);
    };
    let bytes: [u8; 16] = bytes
        .as_ref()
        .try_into()
        .context("sled's journal position is not 16 bytes")?;
    let (seg, off) = bytes.split_at(8);
    Ok(Some((
        u64::from_be_bytes(seg.try_into()?),
        u64::from_be_bytes(off.try_into()?),
    )))
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
    flush: impl FnOnce((u64, u64)) -> crate::store::Result<()>,
) -> crate::store::Result<Frozen> {
    journal.sync()?;
    let frozen = journal.freeze()?;
    let (seg, off) = frozen.position();
    let done = flush((seg, off)).and_then(|()| {
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

pub(super) fn decode(mut bytes: &[u8]) -> anyhow::Result<Vec<Write>> {
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
pub(super) mod tests {
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

    pub(in crate::store::sled) fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
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
