//! The journal: the delivery path's records (the inbox, the outbox,
//! executions and their attempts) in an append-only log, beside sled, which
//! keeps the configuration; it is sled's write-ahead log too (`wal.rs`).
//!
//! Why not sled for these: they are a queue. Each record is written once
//! and read back rarely, and a B-tree rewrites a leaf (and later copies a
//! segment) for every insert and delete; here a record costs its own bytes,
//! once. An execution's attempts are appended beside it, not rewritten into
//! it; a delivery's sealed body is stored once, as bytes, and referred to by
//! its retries.
//!
//! On disk: numbered segment files of frames (`frame.rs`), each numbered
//! one more than the one before. A commit writes its entries then a
//! `Commit` frame, in one write; at start, the segments are read in order
//! and only committed entries apply. Only the end of the newest segment may
//! be cut short (a crash mid-write): it is dropped, with a warning. Damage
//! anywhere else stops the start, naming the file and the offset, since
//! what follows it was acknowledged. In memory: the index (`index.rs`);
//! bodies and executions stay on disk and are read where the index points.
//! At every checkpoint the waiting records go to a tree (`snapshot.rs`)
//! and where the executions are to a log per segment (`pieces.rs`), so
//! that a start reads only what came after it, and the records still
//! waiting.
//!
//! Any failed write or sync is fatal: the journal refuses every later
//! write, since after a failed fsync the kernel may have dropped the
//! writes it covered while a retry would report success. The next start
//! recovers from what is on disk.
//!
//! The oldest segments go once past the history's lifetime
//! ([`Journal::expire`]), in order, after any record still waiting in them
//! has been written again at the end.

mod check;
pub mod disk;
mod frame;
mod index;
mod pieces;
mod sealed;
mod snapshot;
pub mod tree;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;

pub use check::{Report, check, salvage};
pub use disk::{Disk, Real};
pub use index::Entry;
use index::{At, Frames, Index, fold};
use pieces::Pieces;
use sealed::{Piece, Sealed};
use snapshot::Position;

pub use tree::{Batch, Tree};

use super::shared::execution_key;

use crate::model::{Delivery, DeliveryId, Event, Execution, SealedBody, WebhookRef};
use crate::store::{Due, Result, Skip, StoreError};

/// Deliveries whose records cannot be read, each with why.
pub type Unreadable = Vec<(crate::model::Delivery, String)>;

/// A segment is closed once it holds this much.
const SEGMENT_BYTES: u64 = 64 << 20;

/// The journal in a directory. Cheap to share behind an `Arc`.
pub struct Journal {
    disk: Arc<dyn Disk>,
    /// Where the index is kept between starts (`snapshot.rs`).
    tree: Tree,
    /// Held to read the history's index (the piece logs and the closed
    /// segments' indexes, `sealed.rs`) outside the state's lock, and to
    /// change it: lookups then never hold up commits.
    history: RwLock<()>,
    /// Where the executions of segments not indexed yet are.
    pieces: Pieces,
    /// How many bytes of segments the start read (tests).
    #[cfg(test)]
    read_at_start: u64,
    /// The closed segments' indexes read last, newest last.
    sealed: Mutex<Vec<(u64, Arc<Sealed>)>>,
    /// The last checkpoint the start found (`wal.rs`): sled held every
    /// write logged before it, durably, when it was written.
    checkpointed: (u64, u64),
    state: Mutex<State>,
}

/// A snapshot taken, to write ([`Journal::freeze`]).
pub struct Frozen {
    position: Position,
    records: Batch,
    whole: bool,
}

impl Frozen {
    /// Where it stands: segment and offset.
    pub fn position(&self) -> (u64, u64) {
        (self.position.seg, self.position.off)
    }
}

/// How soon a scan that passed over deliveries not yet durable looks
/// again (see [`Journal::due`]).
const UNSYNCED_LOOK_MS: u64 = 20;

/// How many closed segments' indexes stay in memory.
const SEALED_KEPT: usize = 8;

/// How far the clock may have stepped back between an execution's id
/// being made and a segment's closing, for lookups (see
/// [`Journal::frames_in`]).
const CLOCK_SLACK_MS: u64 = 10 * 60 * 1000;

/// When the execution under `key` was made, from its id (see
/// `ids::ordered_id`: 16 hex digits of microseconds first), if it says.
fn made_ms(key: &[u8]) -> Option<u64> {
    let key = key.strip_suffix(b"\0")?;
    let id = key.rsplit(|b| *b == 0).next()?;
    let micros = std::str::from_utf8(id.get(..16)?).ok()?;
    u64::from_str_radix(micros, 16).ok().map(|us| us / 1000)
}

/// What a lookup in the history needs of the state: taken under its lock.
struct View {
    /// The segments kept, oldest first, with when each was closed.
    segments: Vec<(u64, Option<u64>)>,
    /// Those with an index of their own.
    indexed: BTreeSet<u64>,
    /// A start read the whole journal and no snapshot followed: memory
    /// holds the whole index, and the piece logs are stale.
    all: bool,
}

struct State {
    index: Index,
    /// Every segment, by number: when it was closed (unix ms; `None` for
    /// the active one, or one closed before closing was recorded).
    segments: BTreeMap<u64, Option<u64>>,
    /// Segments of format 1 (see `frame.rs`).
    legacy: BTreeSet<u64>,
    /// Closed segments with an index of their own (`sealed.rs`).
    indexed: BTreeSet<u64>,
    /// The segment the last snapshot written stands in: every segment
    /// before it is closed, and its executions are in piece logs, or
    /// indexed. A start may read from there, so expiry keeps it.
    snapshot_seg: u64,
    /// The segment written to.
    active_seg: u64,
    active_len: u64,
    active_since: Instant,
    /// The next frame's sequence number.
    next_seq: u64,
    /// Every frame numbered below this is durable.
    synced: u64,
    /// The same, as a place: every frame before it is durable.
    synced_at: (u64, u64),
    /// A segment is closed once it is this old, so that the history's
    /// lifetime can drop it.
    rotate_after: Duration,
    /// Why the journal stopped taking writes, after a failed write or
    /// sync; watched by whoever stops the process.
    failed: tokio::sync::watch::Sender<Option<String>>,
}

/// The last snapshot, if the journal still holds where it stands.
fn usable_snapshot(disk: &dyn Disk, tree: &Tree) -> anyhow::Result<Option<(Position, Index)>> {
    Ok(match snapshot::load(tree)? {
        Some((position, index)) if fits(disk, &position) => Some((position, index)),
        Some(_) => {
            tracing::warn!(
                "the journal no longer holds where its last snapshot stands (salvaged?): \
                 reading all of it"
            );
            None
        }
        None => None,
    })
}

/// Logs what a start read (`bytes`, after a snapshot or not), and syncs
/// the newest segment found: what was read may be a killed process's
/// writes, still only in the page cache, and must be durable before
/// anything is written after them.
fn settle_read(
    disk: &dyn Disk,
    found: &[u64],
    bytes: u64,
    from_snapshot: bool,
) -> anyhow::Result<()> {
    tracing::info!(bytes, from_snapshot, "read the journal after its snapshot");
    let Some(newest) = found.last() else {
        return Ok(());
    };
    let name = segment_name(*newest);
    disk.sync(&name)
        .with_context(|| format!("cannot sync the journal segment {name}"))
}

impl Journal {
    /// Opens (or creates) the journal on `disk` and reads what came after
    /// the last snapshot into memory (all of it without one). Returns it with the sled writes logged after the last
    /// checkpoint, in order, for sled to apply again (see [`Entry::Sled`]).
    /// Damage before the end of the newest segment, or in a record still
    /// waiting, is an error that says where.
    pub fn open(disk: Arc<dyn Disk>) -> anyhow::Result<(Journal, Vec<Vec<u8>>)> {
        let tree = Tree::open(disk.clone())?;
        let start = usable_snapshot(&*disk, &tree)?;
        let from_snapshot = start.is_some();
        let snapshot_seg = start.as_ref().map_or(0, |(p, _)| p.seg);
        let mut lengths = start
            .as_ref()
            .map(|(p, _)| p.pieces.clone())
            .unwrap_or_default();
        let snapshot_at = start.as_ref().map_or((0, 0), |(p, _)| (p.seg, p.off));
        let Read {
            found,
            index,
            redo,
            replayed,
        } = read_from(&*disk, start)?;
        let checkpointed = redo.checkpoint.max(snapshot_at);
        settle_read(&*disk, &found, replayed.bytes, from_snapshot)?;
        // The segment active when the last run stopped is written on
        // until it is closed below: left open, it would hold up expiry
        // for good (expiry stops at the first segment not closed).
        let (active_seg, active_len) = match found.last() {
            Some(&newest)
                if !replayed.closed.contains_key(&newest) && !replayed.legacy.contains(&newest) =>
            {
                (newest, disk.len(&segment_name(newest))?)
            }
            newest => {
                let seg = newest.map_or(1, |last| last + 1);
                create_segment(&*disk, seg)?;
                (seg, 0)
            }
        };
        let mut segments: BTreeMap<u64, Option<u64>> = found
            .iter()
            .map(|seg| (*seg, replayed.closed.get(seg).copied()))
            .collect();
        segments.insert(active_seg, None);
        let indexed = indexes(&*disk, &segments, from_snapshot.then_some(snapshot_seg))?;
        lengths.retain(|seg, _| segments.contains_key(seg) && !indexed.contains(seg));
        let pieces = Pieces::open(&*disk, &lengths)?;
        let state = State {
            index,
            segments,
            legacy: replayed.legacy,
            indexed,
            snapshot_seg,
            active_seg,
            active_len,
            active_since: Instant::now(),
            next_seq: replayed.next_seq.max(1),
            // What open read is on disk; what it cut is gone.
            synced: replayed.next_seq.max(1),
            synced_at: (active_seg, active_len),
            rotate_after: Duration::from_secs(3600),
            failed: tokio::sync::watch::Sender::new(None),
        };
        let journal = Journal {
            disk,
            tree,
            history: RwLock::default(),
            pieces,
            #[cfg(test)]
            read_at_start: replayed.bytes,
            sealed: Mutex::default(),
            checkpointed,
            state: Mutex::new(state),
        };
        if from_snapshot {
            journal.check_waiting()?;
        }
        if active_len > 0 {
            let mut state = journal.state();
            state.rotate(&*journal.disk)?;
        }
        Ok((journal, redo.since_checkpoint()))
    }

    /// How many bytes of segments the start read: those after the
    /// snapshot.
    #[cfg(test)]
    pub fn read_at_start(&self) -> u64 {
        self.read_at_start
    }

    /// Reads every frame a waiting delivery needs (its record, its body,
    /// its execution's): damage there is refused at start, as damage the
    /// start reads is, since what it held was acknowledged. Damage in
    /// settled history is met when read, and by `switchyard store check`.
    fn check_waiting(&self) -> anyhow::Result<()> {
        let needed = {
            let state = self.state();
            let view = state.view();
            let mut needed = Vec::new();
            for w in state.index.outbox.values() {
                let d = &w.delivery;
                let key = execution_key(&d.automation, d.execution_id.as_str()).into_bytes();
                let memory = state.index.memory(&key);
                let frames = self.frames_in(&view, memory, &key)?.unwrap_or_default();
                for at in [w.frame, w.body].into_iter().chain(frames) {
                    needed.push((d.id.clone(), at, state.header(at.seg)));
                }
            }
            needed
        };
        for (id, at, header) in needed {
            if let Err(why) = read_frame(&*self.disk, at, header) {
                let name = segment_name(at.seg);
                anyhow::bail!(
                    "the journal segment {name} is damaged at offset {} ({why}), in a record of \
                     the delivery {id}, which still waits: it was acknowledged, so switchyard \
                     will not start without it. Copy the data directory aside, then restore it \
                     from a backup, or run `switchyard store salvage`, which keeps what comes \
                     before the damage (docs/operations.md, \"When the store is damaged\")",
                    at.off
                );
            }
        }
        Ok(())
    }

    /// Takes a snapshot of the index as it stands at the end of the
    /// journal, synced first (see `snapshot.rs`): its position and waiting
    /// records, and the executions written since the last one, frozen in
    /// memory until [`Journal::write_snapshot`] puts them in their piece
    /// logs. Cheap: the caller holds commits out meanwhile, so that sled's
    /// flush next holds every write before the position.
    pub fn freeze(&self) -> Result<Frozen> {
        let mut state = self.state();
        state.usable()?;
        if state.synced < state.next_seq {
            state.sync_active(&*self.disk)?;
        }
        let position = Position {
            seg: state.active_seg,
            off: state.active_len,
            next_seq: state.next_seq,
            closed: state
                .segments
                .range(..state.active_seg)
                .map(|(s, c)| (*s, *c))
                .collect(),
            legacy: state.legacy.iter().copied().collect(),
            pieces: BTreeMap::new(),
        };
        let records = snapshot::records(&state.index, &self.tree).map_err(StoreError::Other)?;
        snapshot::written(&mut state.index, &records);
        state.index.freeze();
        Ok(Frozen {
            position,
            records,
            whole: state.index.whole,
        })
    }

    /// Drops `frozen` unwritten (its checkpoint failed): the next snapshot
    /// writes every waiting record anew, and the frozen executions.
    pub fn discard(&self, frozen: Frozen) {
        drop(frozen);
        self.state().index.kept.all = true;
    }

    /// Writes `frozen`, with commits going on: the frozen executions to
    /// their piece logs, then the waiting records that changed and the
    /// position, naming the logs' lengths, as one durable batch. Lookups
    /// of executions not in memory wait meanwhile. After a failure, the
    /// next snapshot writes every waiting record anew and the frozen
    /// executions with its own.
    pub fn write_snapshot(&self, frozen: Frozen) -> Result<(u64, u64)> {
        let _history = self.history.write().unwrap_or_else(|p| p.into_inner());
        let executions = self.state().index.frozen.clone();
        let mut position = frozen.position.clone();
        let mut records = frozen.records;
        let written = (self.pieces)
            .write(&*self.disk, &executions, frozen.whole)
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                position.pieces = self.pieces.lengths();
                let position = serde_json::to_vec(&position)?;
                records.insert(snapshot::POSITION.to_vec(), Some(position));
                self.tree.apply(&records)
            });
        let mut state = self.state();
        if let Err(e) = written {
            state.index.kept.all = true;
            return Err(StoreError::Other(e));
        }
        state.index.frozen.clear();
        state.index.whole &= !frozen.whole;
        state.snapshot_seg = frozen.position.seg;
        Ok((frozen.position.seg, frozen.position.off))
    }

    /// [`Journal::freeze`] then [`Journal::write_snapshot`], in one go
    /// (tests).
    #[cfg(test)]
    pub fn snapshot(&self) -> Result<(u64, u64)> {
        let frozen = self.freeze()?;
        self.write_snapshot(frozen)
    }

    /// Writes the index of each closed segment that has none and whose
    /// executions the last snapshot holds (`sealed.rs`), from its piece
    /// log, then removes the log. Commits go on meanwhile. A failure
    /// leaves the log as it was, to try again.
    pub fn index_sealed(&self) -> Result<()> {
        let todo: Vec<u64> = {
            let state = self.state();
            state
                .segments
                .keys()
                .copied()
                .filter(|seg| *seg < state.snapshot_seg && !state.indexed.contains(seg))
                .collect()
        };
        for seg in todo {
            let built = {
                let _history = self.history.read().unwrap_or_else(|p| p.into_inner());
                (self.pieces)
                    .sealed(&*self.disk, seg)
                    .map_err(StoreError::Other)?
            };
            sealed::write(&*self.disk, seg, &built)
                .map_err(|e| io_error("writing the index of", &segment_name(seg), e))?;
            let _history = self.history.write().unwrap_or_else(|p| p.into_inner());
            let mut state = self.state();
            if !state.segments.contains_key(&seg) {
                // Expired meanwhile.
                let _ = self.disk.remove(&sealed::name(seg));
                continue;
            }
            state.indexed.insert(seg);
            // Lookups read the index from here on, and no snapshot writes
            // pieces of a segment before its own: no lock is needed.
            drop((state, _history));
            (self.pieces)
                .forget(&*self.disk, seg)
                .map_err(|e| io_error("removing the piece log of", &segment_name(seg), e))?;
            self.keep_sealed(seg, Arc::new(built));
        }
        Ok(())
    }

    /// Segment `seg`'s index, from memory or the disk.
    fn sealed(&self, seg: u64) -> Result<Arc<Sealed>> {
        if let Some((_, found)) = self.cached().iter().find(|(s, _)| *s == seg) {
            return Ok(found.clone());
        }
        let loaded = sealed::load(&*self.disk, seg).map_err(StoreError::Other)?;
        self.keep_sealed(seg, loaded.clone());
        Ok(loaded)
    }

    fn cached(&self) -> MutexGuard<'_, Vec<(u64, Arc<Sealed>)>> {
        self.sealed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keep_sealed(&self, seg: u64, sealed: Arc<Sealed>) {
        let mut cached = self.cached();
        cached.retain(|(s, _)| *s != seg);
        cached.push((seg, sealed));
        if cached.len() > SEALED_KEPT {
            cached.remove(0);
        }
    }

    /// The piece of segment `seg` of the execution under `key`.
    fn piece(&self, view: &View, seg: u64, key: &[u8]) -> Result<Option<Piece>> {
        if view.indexed.contains(&seg) {
            Ok(self.sealed(seg)?.get(key).cloned())
        } else {
            (self.pieces)
                .get(&*self.disk, seg, key)
                .map_err(StoreError::Other)
        }
    }

    /// The frames of the execution under `key`: `memory`'s (written since
    /// the last snapshot), after those of the segments, newest first, down
    /// to the one holding its record. `None` once that one is gone, or if
    /// there never was one: segments closed before the execution's id was
    /// made (less [`CLOCK_SLACK_MS`]) cannot hold its record.
    fn frames_in(
        &self,
        view: &View,
        memory: Option<Frames>,
        key: &[u8],
    ) -> Result<Option<Vec<At>>> {
        let mut frames = match memory {
            Some(Frames::Whole(frames)) => return Ok(Some(frames)),
            Some(Frames::More(frames)) => frames,
            None => Vec::new(),
        };
        if view.all {
            return Ok(None);
        }
        let made_ms = made_ms(key).map_or(0, |ms| ms.saturating_sub(CLOCK_SLACK_MS));
        let newer = |(_, closed): &&(u64, Option<u64>)| closed.is_none_or(|c| c >= made_ms);
        for (seg, _) in view.segments.iter().rev().take_while(newer) {
            if let Some(piece) = self.piece(view, *seg, key)? {
                frames = [piece.frames, frames].concat();
                if piece.whole {
                    return Ok(Some(snapshot::in_order(frames)));
                }
            }
        }
        Ok(None)
    }

    /// [`Journal::frames_in`], the locks taken: none when memory holds
    /// the record (most lookups: attempts follow their execution closely).
    fn frames(&self, key: &[u8]) -> Result<Option<Vec<At>>> {
        if let Some(Frames::Whole(frames)) = self.state().index.memory(key) {
            return Ok(Some(frames));
        }
        let _history = self.history.read().unwrap_or_else(|p| p.into_inner());
        let (view, memory) = {
            let state = self.state();
            (state.view(), state.index.memory(key))
        };
        self.frames_in(&view, memory, key)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes segments at least this often, so that a short history
    /// lifetime can drop them.
    pub fn rotate_every(&self, every: Duration) {
        self.state().rotate_after = every.max(Duration::from_secs(1));
    }

    /// Closes the active segment at the next commit (tests).
    #[cfg(test)]
    pub fn rotate_soon(&self) {
        self.state().rotate_after = Duration::ZERO;
    }

    /// Writes `entries` as one commit and applies them. Each sealed body is
    /// written once: a delivery whose body an execution of the same commit
    /// carries, or which waits already (a retry), refers to it. Returns
    /// the mark that covers the commit (see [`Journal::marks`]).
    pub fn append(&self, entries: Vec<Entry>) -> Result<u64> {
        let mut state = self.state();
        state.write(&*self.disk, entries, true)?;
        Ok(state.next_seq)
    }

    /// Makes every commit so far durable. A failure is fatal (see the
    /// module's comment).
    pub fn sync(&self) -> Result<()> {
        let (name, upto, at) = {
            let state = self.state();
            state.usable()?;
            if state.synced >= state.next_seq {
                return Ok(());
            }
            let at = (state.active_seg, state.active_len);
            (segment_name(state.active_seg), state.next_seq, at)
        };
        // Outside the lock: commits go on while the disk syncs.
        match self.disk.sync(&name) {
            Ok(()) => {
                let mut state = self.state();
                state.synced = state.synced.max(upto);
                state.synced_at = state.synced_at.max(at);
                Ok(())
            }
            Err(e) => Err(self.state().fail("syncing", &name, e)),
        }
    }

    /// The next frame's sequence number, and the number below which every
    /// frame is durable.
    pub fn marks(&self) -> (u64, u64) {
        let state = self.state();
        (state.next_seq, state.synced)
    }

    /// Where the last checkpoint the start found stands (`(0, 0)`: none).
    pub fn checkpointed(&self) -> (u64, u64) {
        self.checkpointed
    }

    /// sled's writes logged by the commits between the positions `from`
    /// and `to`, in order: what sled lacks when it holds less than a
    /// checkpoint said (`wal.rs`). An error when the journal no longer
    /// holds them all (`(0, 0)`: from its very beginning).
    pub fn sled_writes_between(&self, from: (u64, u64), to: (u64, u64)) -> Result<Vec<Vec<u8>>> {
        let (segments, legacy) = {
            let state = self.state();
            let segments: Vec<u64> = state.segments.keys().copied().collect();
            (segments, state.legacy.clone())
        };
        let first = segments.first().copied().unwrap_or(1);
        let held = match from {
            (0, 0) => first == 1,
            (seg, _) => segments.contains(&seg),
        };
        if !held {
            return Err(corrupt(&format!(
                "the journal no longer holds segment {} (its oldest is {}), from which on sled \
                 lacks writes",
                segment_name(from.0.max(1)),
                segment_name(first)
            )));
        }
        let mut out = Vec::new();
        for seg in segments.into_iter().filter(|s| (from.0..=to.0).contains(s)) {
            let name = segment_name(seg);
            let base = if seg == from.0 { from.1 } else { 0 };
            let bytes = self
                .disk
                .read_from(&name, base)
                .map_err(|e| io_error("reading", &name, e))?;
            let segment = Segment {
                name,
                seg,
                base: base as usize,
                bytes,
                legacy: legacy.contains(&seg),
                newest: false,
            };
            let mut redo = Redo::default();
            let mut scratch = (Replayed::default(), Index::default());
            read_frames(&segment, &mut scratch.0, &mut scratch.1, &mut redo);
            out.extend(
                redo.writes
                    .into_iter()
                    .filter(|(at, _)| (at.seg, at.off) < to)
                    .map(|(_, writes)| writes),
            );
        }
        Ok(out)
    }

    /// Stops the journal taking writes because another part of the store
    /// failed (sled): the store is fail-stop as a whole. Returns the error
    /// to answer with.
    pub fn stop(&self, why: String) -> StoreError {
        self.state().stop(why)
    }

    /// Resolves, with the reason, once the journal takes no more writes.
    pub async fn failed(&self) -> String {
        let mut failed = self.state().failed.subscribe();
        let why = match failed.wait_for(Option::is_some).await {
            Ok(why) => why.clone(),
            // The sender lives as long as the journal.
            Err(_) => None,
        };
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }
    /// The events in the inbox, by id.
    pub fn inbox(&self) -> Vec<Event> {
        let state = self.state();
        state.index.inbox.values().map(|(e, _)| e.clone()).collect()
    }

    pub fn has_event(&self, id: &str) -> bool {
        self.state().index.inbox.contains_key(id)
    }

    pub fn has_execution(&self, key: &[u8]) -> Result<bool> {
        Ok(self.frames(key)?.is_some())
    }

    /// See `DeliveryRecords::due_deliveries`; besides, the deliveries
    /// whose bodies cannot be read, with why, for the quarantine. Only
    /// deliveries whose commit is durable go: one sent before its sync
    /// would reach a receiver for state a power cut can still take.
    pub fn due(&self, now_ms: u64, limit: usize, skip: Skip<'_>) -> Result<(Due, Unreadable)> {
        let (picked, next) = {
            let state = self.state();
            let mut picked = Vec::new();
            let mut next = None;
            let mut unsynced = false;
            for ((due, id), waiting) in &state.index.outbox {
                if *due > now_ms {
                    next = Some(*due);
                    break;
                }
                if skip(id.as_str()) || !state.index.may_go(&waiting.delivery) {
                    continue;
                }
                if (waiting.frame.seg, waiting.frame.off) >= state.synced_at {
                    unsynced = true;
                    continue;
                }
                if picked.len() == limit {
                    next = Some(now_ms);
                    break;
                }
                picked.push((
                    waiting.delivery.clone(),
                    waiting.body,
                    state.header(waiting.body.seg),
                ));
            }
            // Those not yet durable go once a sync covers them: their
            // writer hands them over then, and a look soon after finds
            // any it does not.
            if unsynced {
                let soon = now_ms.saturating_add(UNSYNCED_LOOK_MS);
                next = Some(next.map_or(soon, |n| n.min(soon)));
            }
            (picked, next)
        };
        let mut due = Vec::with_capacity(picked.len());
        let mut unreadable = Vec::new();
        for (mut delivery, body, header) in picked {
            match read_body(&*self.disk, body, header) {
                Ok(body) => {
                    delivery.body_sealed = SealedBody::new(body);
                    due.push(delivery);
                }
                // One bad record must not hold back the rest.
                Err(e) => unreadable.push((delivery, e.to_string())),
            }
        }
        Ok(((due, next), unreadable))
    }

    /// The execution keys of those of the deliveries `ids` that wait.
    pub fn executions_waiting(&self, ids: &[DeliveryId]) -> HashSet<Vec<u8>> {
        let state = self.state();
        let index = &state.index;
        ids.iter()
            .filter_map(|id| {
                let waiting = index.outbox.get(&(*index.due_of.get(id)?, id.clone()))?;
                let d = &waiting.delivery;
                Some(execution_key(&d.automation, d.execution_id.as_str()).into_bytes())
            })
            .collect()
    }

    /// Whether the delivery `id` still waits, due at `due_ms`.
    pub fn waits(&self, id: &DeliveryId, due_ms: u64) -> bool {
        self.state().index.due_of.get(id) == Some(&due_ms)
    }

    /// The deliveries to `webhook` due after `after_ms`, without bodies.
    pub fn waiting_for(&self, webhook: &WebhookRef, after_ms: u64) -> Vec<Delivery> {
        let state = self.state();
        let later = state
            .index
            .outbox
            .range((after_ms + 1, DeliveryId::from(""))..);
        later
            .map(|(_, waiting)| &waiting.delivery)
            .filter(|d| d.webhook == *webhook)
            .cloned()
            .collect()
    }

    pub fn pending(&self) -> usize {
        self.state().index.outbox.len()
    }

    pub fn first_due(&self) -> Option<u64> {
        let state = self.state();
        state.index.outbox.keys().next().map(|(due, _)| *due)
    }

    /// The execution under `key`, its attempts applied.
    pub fn execution(&self, key: &[u8]) -> Result<Option<Execution>> {
        let Some(frames) = self.frames(key)? else {
            return Ok(None);
        };
        let frames = self.state().with_headers(&frames);
        read_execution(&*self.disk, &frames).map(Some)
    }

    /// The executions whose keys start with `prefix`, newest first.
    pub fn executions(&self, prefix: &[u8], limit: usize) -> Result<Vec<Execution>> {
        let found = self.executions_under(prefix, limit)?;
        let found: Vec<Vec<(At, usize)>> = {
            let state = self.state();
            found
                .iter()
                .map(|frames| state.with_headers(frames))
                .collect()
        };
        found
            .iter()
            .map(|f| read_execution(&*self.disk, f))
            .collect()
    }

    /// Drops the oldest closed segments that were closed before
    /// `before_ms` (the history's lifetime), in order, stopping at the
    /// first younger one, and none at or after `checkpoint` (sled may still
    /// need what they logged). Events and deliveries still waiting in them
    /// are written again, durably, first. Returns how many executions went.
    pub fn expire(&self, before_ms: u64, checkpoint: u64) -> Result<usize> {
        let _history = self.history.write().unwrap_or_else(|p| p.into_inner());
        let mut state = self.state();
        state.usable()?;
        let old = state.expirable(before_ms, checkpoint);
        if old.is_empty() {
            return Ok(0);
        }
        // Under the same lock as the reading, so that nothing settles in
        // between and comes back.
        let live: Vec<Entry> = self.still_waiting(&state, &old)?;
        let kept = live
            .iter()
            .filter(|e| matches!(e, Entry::Execution { .. }))
            .count();
        let view = state.view();
        let index = &state.index;
        let mut gone = (index.executions.values().chain(index.frozen.values()))
            .filter(|f| matches!(f, Frames::Whole(f) if old.contains(&f[0].seg)))
            .count();
        for seg in old.iter().filter(|_| !view.all) {
            gone += self.records_in(&view, *seg)?;
        }
        if !live.is_empty() {
            state.write(&*self.disk, live, false)?;
            state.sync_active(&*self.disk)?;
        }
        state.index.forget_executions(&old);
        // Oldest first, each removal durable before the next: a crash
        // leaves the history with a prefix gone, never a hole. An index
        // goes before its segment, so none outlives it.
        for seg in &old {
            self.remove_segment(&mut state, *seg)?;
        }
        let forgotten = gone.saturating_sub(kept);
        tracing::info!(
            segments = old.len(),
            executions = forgotten,
            "dropped journal segments past the history's lifetime"
        );
        Ok(forgotten)
    }

    /// Removes segment `seg`, its index and its piece log, durably.
    fn remove_segment(&self, state: &mut State, seg: u64) -> Result<()> {
        state.segments.remove(&seg);
        state.legacy.remove(&seg);
        if state.indexed.remove(&seg) {
            self.cached().retain(|(s, _)| *s != seg);
            let name = sealed::name(seg);
            self.disk
                .remove(&name)
                .map_err(|e| io_error("removing", &name, e))?;
        }
        (self.pieces)
            .forget(&*self.disk, seg)
            .map_err(|e| io_error("removing the piece log of", &segment_name(seg), e))?;
        let name = segment_name(seg);
        self.disk
            .remove(&name)
            .and_then(|()| self.disk.sync_dir())
            .map_err(|e| state.fail("removing", &name, e))
    }

    /// How many executions have their record in segment `seg`.
    fn records_in(&self, view: &View, seg: u64) -> Result<usize> {
        if view.indexed.contains(&seg) {
            return Ok(self.sealed(seg)?.whole_under(b"").count());
        }
        let pieces = (self.pieces)
            .under(&*self.disk, seg, b"")
            .map_err(StoreError::Other)?;
        Ok(pieces.iter().filter(|(_, p)| p.whole).count())
    }

    /// The frames of up to `limit` executions under `prefix`, highest key
    /// first. Execution ids sort by time, so the segments are read newest
    /// first, and one more once `limit` are found (ids near a segment's
    /// start may sort before a few at the end of the one before).
    fn executions_under(&self, prefix: &[u8], limit: usize) -> Result<Vec<Vec<At>>> {
        let _history = self.history.read().unwrap_or_else(|p| p.into_inner());
        let (view, memory) = {
            let state = self.state();
            let index = &state.index;
            let under = |map: &BTreeMap<Vec<u8>, Frames>| {
                map.range(prefix.to_vec()..)
                    .take_while(|(k, _)| k.starts_with(prefix))
                    .map(|(k, _)| k.clone())
                    .collect::<Vec<_>>()
            };
            let memory: BTreeMap<Vec<u8>, Frames> =
                [under(&index.frozen), under(&index.executions)]
                    .concat()
                    .into_iter()
                    .filter_map(|k| index.memory(&k).map(|f| (k, f)))
                    .collect();
            (state.view(), memory)
        };
        let mut keys: BTreeSet<Vec<u8>> = memory
            .iter()
            .filter(|(_, f)| matches!(f, Frames::Whole(_)))
            .map(|(k, _)| k.clone())
            .collect();
        let mut one_more = false;
        for (seg, _) in view.segments.iter().rev().filter(|_| !view.all) {
            if keys.len() >= limit {
                if one_more {
                    break;
                }
                one_more = true;
            }
            if view.indexed.contains(seg) {
                keys.extend(self.sealed(*seg)?.whole_under(prefix).map(<[u8]>::to_vec));
                continue;
            }
            let pieces = (self.pieces)
                .under(&*self.disk, *seg, prefix)
                .map_err(StoreError::Other)?;
            keys.extend(pieces.into_iter().filter(|(_, p)| p.whole).map(|(k, _)| k));
        }
        let mut found = Vec::new();
        for key in keys.iter().rev() {
            if found.len() == limit {
                break;
            }
            if let Some(frames) = self.frames_in(&view, memory.get(key).cloned(), key)? {
                found.push(frames);
            }
        }
        Ok(found)
    }

    /// What in `segments` still waits, as entries to write again, bodies
    /// included: events in the inbox, deliveries in the outbox, and the
    /// executions of those deliveries (their attempts are still to come).
    fn still_waiting(&self, state: &State, segments: &BTreeSet<u64>) -> Result<Vec<Entry>> {
        let disk = &*self.disk;
        let view = state.view();
        let old = |at: &At| segments.contains(&at.seg);
        let mut executions = Vec::new();
        let mut again = Vec::new();
        for (event, at) in state.index.inbox.values() {
            if old(at) {
                again.push(Entry::Event {
                    event: Box::new(event.clone()),
                });
            }
        }
        for w in state.index.outbox.values() {
            let d = &w.delivery;
            let key = execution_key(&d.automation, d.execution_id.as_str()).into_bytes();
            let memory = state.index.memory(&key);
            if let Some(frames) = self.frames_in(&view, memory, &key)?
                && frames.iter().any(old)
            {
                let execution = read_execution(disk, &state.with_headers(&frames))?;
                executions.push(Entry::Execution {
                    execution: Box::new(execution),
                    body: false,
                });
            }
            if old(&w.frame) || old(&w.body) {
                let mut delivery = d.clone();
                let body = read_body(disk, w.body, state.header(w.body.seg))?;
                delivery.body_sealed = SealedBody::new(body);
                again.push(Entry::Queued {
                    delivery,
                    body: None,
                });
            }
        }
        executions.extend(again);
        Ok(executions)
    }

    /// Every frame, raw, for `switchyard admin dump-records`.
    pub fn raw(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (segments, legacy) = {
            let state = self.state();
            let segments: Vec<u64> = state.segments.keys().copied().collect();
            (segments, state.legacy.clone())
        };
        let mut out = Vec::new();
        for seg in segments {
            let name = segment_name(seg);
            let bytes = self
                .disk
                .read(&name)
                .map_err(|e| io_error("reading", &name, e))?;
            let mut off = 0;
            let decode = if legacy.contains(&seg) {
                frame::decode_v1
            } else {
                frame::decode
            };
            while let frame::Read::Frame { payload, len, .. } = decode(&bytes[off..]) {
                let key = format!("{seg}:{off}").into_bytes();
                out.push((key, payload.to_vec()));
                off += len;
            }
        }
        Ok(out)
    }
}

impl State {
    /// The oldest closed segments closed before `before_ms`, in order up
    /// to the first younger one, and none at or after `checkpoint` (sled
    /// may still need what they logged) or the last durable snapshot (a
    /// start reads from it).
    fn expirable(&self, before_ms: u64, checkpoint: u64) -> BTreeSet<u64> {
        let durable = Some(self.snapshot_seg).filter(|seg| *seg > 0);
        let kept_from = checkpoint
            .min(self.active_seg)
            .min(durable.unwrap_or(u64::MAX));
        self.segments
            .iter()
            .take_while(|(seg, closed)| {
                **seg < kept_from && closed.is_some_and(|at| at < before_ms)
            })
            .map(|(seg, _)| *seg)
            .collect()
    }

    /// `Ok` unless the journal has failed.
    fn usable(&self) -> Result<()> {
        match &*self.failed.borrow() {
            None => Ok(()),
            Some(why) => Err(StoreError::Failed(why.clone())),
        }
    }

    /// Notes a failed write or sync: no more writes (see the module's
    /// comment). Returns the error to answer with.
    fn fail(&mut self, doing: &str, name: &str, e: std::io::Error) -> StoreError {
        self.stop(format!(
            "{doing} the journal segment {name} failed ({e}); the store takes no more writes. \
             Restart switchyard: it recovers what was acknowledged from the disk"
        ))
    }

    /// No more writes, for `why`; the first failure is the one to tell.
    fn stop(&self, why: String) -> StoreError {
        let first = self.failed.borrow().clone();
        let why = first.unwrap_or_else(|| {
            tracing::error!("{why}");
            self.failed.send_replace(Some(why.clone()));
            why
        });
        StoreError::Failed(why)
    }

    /// [`Journal::append`], on the state held; `reuse` false writes every
    /// body anew (when moving records out of a segment about to go).
    fn write(&mut self, disk: &dyn Disk, entries: Vec<Entry>, reuse: bool) -> Result<()> {
        self.usable()?;
        self.rotate_if_due(disk)?;
        self.write_commit(disk, entries, reuse)
    }

    /// Writes `entries` as one commit to the active segment.
    fn write_commit(&mut self, disk: &dyn Disk, entries: Vec<Entry>, reuse: bool) -> Result<()> {
        let seg = self.active_seg;
        let base = self.active_len;
        let mut buf = Vec::with_capacity(entries.len() * 2048);
        let mut bodies: HashMap<SealedBody, At> = HashMap::new();
        let mut placed = Vec::with_capacity(entries.len());
        let mut seq = self.next_seq;
        for mut entry in entries {
            let waiting = reuse.then_some(&self.index);
            let body = take_body(&mut entry, &bodies, waiting)?;
            let json = serde_json::to_vec(&entry)?;
            let off = base + buf.len() as u64;
            let len =
                frame::encode(&mut buf, seq, self.synced, &json, &body.bytes).ok_or_else(|| {
                    StoreError::Other(anyhow::anyhow!(
                        "a record of {} bytes is larger than the journal takes ({} bytes)",
                        json.len() + body.bytes.len(),
                        frame::MAX_PAYLOAD
                    ))
                })? as u32;
            seq += 1;
            let at = At { seg, off, len };
            if let Some(sealed) = body.sealed {
                bodies.insert(sealed, at);
            }
            placed.push((entry, at));
        }
        frame::encode(&mut buf, seq, self.synced, br#"{"op":"commit"}"#, &[])
            .expect("a small frame");
        seq += 1;
        let name = segment_name(seg);
        if let Err(e) = disk.write_at(&name, base, &buf) {
            if !is_full(&e) {
                return Err(self.fail("writing", &name, e));
            }
            // A write refused for space was reported at once, and nothing
            // of it was synced: cut what part of it landed, answer 503,
            // and go on (unlike a failed sync, this loses nothing).
            if let Err(e) = disk.set_len(&name, base) {
                return Err(self.fail("cutting back", &name, e));
            }
            tracing::error!(segment = %name, "the journal cannot be written: the disk is full");
            return Err(StoreError::Full);
        }
        self.next_seq = seq;
        self.active_len += buf.len() as u64;
        for (entry, at) in placed {
            self.index.apply(entry, at);
        }
        Ok(())
    }

    /// Syncs the active segment, the state held.
    fn sync_active(&mut self, disk: &dyn Disk) -> Result<()> {
        let name = segment_name(self.active_seg);
        match disk.sync(&name) {
            Ok(()) => {
                self.synced = self.next_seq;
                self.synced_at = (self.active_seg, self.active_len);
                Ok(())
            }
            Err(e) => Err(self.fail("syncing", &name, e)),
        }
    }

    /// The header size of frames in `seg`.
    fn header(&self, seg: u64) -> usize {
        if self.legacy.contains(&seg) {
            frame::HEADER_V1
        } else {
            frame::HEADER
        }
    }

    fn with_headers(&self, frames: &[At]) -> Vec<(At, usize)> {
        frames.iter().map(|at| (*at, self.header(at.seg))).collect()
    }

    /// What a lookup in the history needs (see [`View`]).
    fn view(&self) -> View {
        View {
            segments: self.segments.iter().map(|(s, c)| (*s, *c)).collect(),
            indexed: self.indexed.clone(),
            all: self.index.whole,
        }
    }

    /// Closes the active segment when full or old: a `Closed` commit, a
    /// sync, then the next segment, its directory entry durable.
    fn rotate_if_due(&mut self, disk: &dyn Disk) -> Result<()> {
        let full = self.active_len >= SEGMENT_BYTES;
        let old = self.active_len > 0 && self.active_since.elapsed() >= self.rotate_after;
        if !(full || old) {
            return Ok(());
        }
        self.rotate(disk)
    }

    /// Closes the active segment and opens the next.
    fn rotate(&mut self, disk: &dyn Disk) -> Result<()> {
        let at_ms = crate::ids::now_ms();
        self.active_since = Instant::now();
        self.write_commit(disk, vec![Entry::Closed { at_ms }], true)?;
        self.sync_active(disk)?;
        self.segments.insert(self.active_seg, Some(at_ms));
        let seg = self.active_seg + 1;
        create_segment(disk, seg).map_err(|e| self.fail("creating", &segment_name(seg), e))?;
        self.segments.insert(seg, None);
        self.active_seg = seg;
        self.active_len = 0;
        Ok(())
    }
}

/// A body to write in an entry's frame, and the sealed text it came from
/// (for later entries of the commit to refer to).
struct Body {
    bytes: Vec<u8>,
    sealed: Option<SealedBody>,
}

/// Takes the sealed body out of `entry`, for its frame's bytes, unless a
/// frame already holds it.
fn take_body(
    entry: &mut Entry,
    bodies: &HashMap<SealedBody, At>,
    waiting: Option<&Index>,
) -> Result<Body> {
    let none = Body {
        bytes: Vec::new(),
        sealed: None,
    };
    match entry {
        Entry::Execution { execution, body } => {
            let Some(sealed) = execution.body_sealed.take() else {
                return Ok(none);
            };
            *body = true;
            Ok(Body {
                bytes: sealed.bytes().to_vec(),
                sealed: Some(sealed),
            })
        }
        Entry::Queued { delivery, body } => {
            let sealed = std::mem::take(&mut delivery.body_sealed);
            if let Some(at) = bodies
                .get(&sealed)
                .copied()
                .or_else(|| waiting?.body_of(&delivery.id))
            {
                *body = Some(at);
                return Ok(none);
            }
            Ok(Body {
                bytes: sealed.bytes().to_vec(),
                sealed: Some(sealed),
            })
        }
        Entry::Sled { writes } => Ok(Body {
            bytes: std::mem::take(writes),
            sealed: None,
        }),
        _ => Ok(none),
    }
}

/// The closed segments of `segments` that have an index of their own
/// (`sealed.rs`): after a start from a snapshot standing in segment
/// `snapshot_seg`, those before it whose index file is there (a crash may
/// have left their piece logs too, which go); after a start that read
/// everything, none, every index file removed (the journal may have been
/// cut back since they were written).
fn indexes(
    disk: &dyn Disk,
    segments: &BTreeMap<u64, Option<u64>>,
    snapshot_seg: Option<u64>,
) -> anyhow::Result<BTreeSet<u64>> {
    let mut indexed = BTreeSet::new();
    for name in disk.list().context("cannot list the journal's directory")? {
        let Some(seg) = name
            .strip_suffix(".idx")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if snapshot_seg.is_some_and(|before| seg < before) && segments.contains_key(&seg) {
            indexed.insert(seg);
        } else {
            disk.remove(&name)
                .with_context(|| format!("cannot remove the journal index {name}"))?;
        }
    }
    Ok(indexed)
}

/// Whether the journal on `disk` still holds where `position` stands: its
/// segment, at least that long, the frame there (if any) the one it names.
/// A salvage may have cut it away; the start then reads everything.
fn fits(disk: &dyn Disk, position: &Position) -> bool {
    let Ok(bytes) = disk.read_from(&segment_name(position.seg), position.off) else {
        return false;
    };
    bytes.is_empty()
        || matches!(frame::decode(&bytes), frame::Read::Frame { seq, .. } if seq == position.next_seq)
}

/// Sled's writes met in the journal, and the last checkpoint.
#[derive(Default)]
struct Redo {
    writes: Vec<(At, Vec<u8>)>,
    checkpoint: (u64, u64),
}

impl Redo {
    fn since_checkpoint(self) -> Vec<Vec<u8>> {
        let from = self.checkpoint;
        self.writes
            .into_iter()
            .filter(|(at, _)| (at.seg, at.off) >= from)
            .map(|(_, writes)| writes)
            .collect()
    }
}

/// What replaying the segments so far has found.
#[derive(Default)]
struct Replayed {
    /// The sequence number the next frame must carry (`0`: any, before
    /// the first frame of format 2).
    next_seq: u64,
    /// Segments of format 1.
    legacy: BTreeSet<u64>,
    /// When each segment was closed, where it says so.
    closed: HashMap<u64, u64>,
    /// How many bytes of segments were read.
    bytes: u64,
}

/// Applies the committed entries of one segment to `index` (and notes
/// sled's writes in `redo`). The newest segment's end may be cut short: it
/// is truncated to its last commit, with a warning. Anything else that
/// does not read is damage, and an error naming the file and the offset.
fn replay(
    disk: &dyn Disk,
    (seg, base): (u64, usize),
    newest: bool,
    replayed: &mut Replayed,
    index: &mut Index,
    redo: &mut Redo,
) -> anyhow::Result<()> {
    let name = segment_name(seg);
    let bytes = disk
        .read_from(&name, base as u64)
        .with_context(|| format!("cannot read the journal segment {name}"))?;
    replayed.bytes += bytes.len() as u64;
    // Format 1 segments all come before the first of format 2.
    let legacy = replayed.next_seq == 0 && !bytes.is_empty() && !bytes.starts_with(&frame::MAGIC);
    if legacy {
        replayed.legacy.insert(seg);
    }
    let segment = Segment {
        name,
        seg,
        base,
        bytes,
        legacy,
        newest,
    };
    let read = read_frames(&segment, replayed, index, redo);
    if read.committed == segment.bytes.len() {
        return Ok(());
    }
    segment.cut_or_refuse(disk, read, replayed)
}

/// One segment as replay reads it, from offset `base` on.
struct Segment {
    name: String,
    seg: u64,
    base: usize,
    bytes: Vec<u8>,
    /// Written in format 1 (no magic, no sequence numbers).
    legacy: bool,
    /// The journal's last segment, whose end a crash may have cut short.
    newest: bool,
}

/// How far [`read_frames`] got in a segment.
struct FramesRead {
    /// Where reading stopped.
    off: usize,
    /// The end of the last commit.
    committed: usize,
    /// The next sequence number after that commit.
    seq_at_commit: u64,
    /// Why reading stopped before the end, if a frame did not read.
    bad: Option<&'static str>,
}

/// Applies every committed entry of `segment` to `index` (sled's writes to
/// `redo`), in order, up to the first frame that does not read.
fn read_frames(
    segment: &Segment,
    replayed: &mut Replayed,
    index: &mut Index,
    redo: &mut Redo,
) -> FramesRead {
    let legacy = segment.legacy;
    let (mut off, mut committed, mut seq_at_commit) = (0, 0, replayed.next_seq);
    let mut pending = Vec::new();
    let bad = loop {
        let (seq, payload, len) = match segment.decode(off) {
            frame::Read::End => break None,
            frame::Read::Bad(why) => break Some(why),
            frame::Read::Frame {
                seq, payload, len, ..
            } => (seq, payload, len),
        };
        if !legacy && replayed.next_seq != 0 && seq != replayed.next_seq {
            break Some("a frame out of sequence (stale or misplaced bytes)");
        }
        if !legacy {
            replayed.next_seq = seq + 1;
        }
        let at = At {
            seg: segment.seg,
            off: (segment.base + off) as u64,
            len: len as u32,
        };
        off += len;
        let split = frame::split(payload);
        let entry = split.and_then(|(json, _)| serde_json::from_slice::<Entry>(json).ok());
        match entry {
            Some(Entry::Commit) => {
                apply_commit(pending.drain(..), segment.seg, replayed, index, redo);
                committed = off;
                seq_at_commit = replayed.next_seq;
            }
            Some(Entry::Sled { .. }) => {
                let body = split.map(|(_, body)| body.to_vec()).unwrap_or_default();
                pending.push((Entry::Sled { writes: body }, at));
            }
            Some(entry) => pending.push((entry, at)),
            None => {
                break Some(
                    "a checked frame whose record cannot be read (written by a newer build?)",
                );
            }
        }
    };
    FramesRead {
        off,
        committed,
        seq_at_commit,
        bad,
    }
}

/// Applies the entries of one commit, read from segment `seg`.
fn apply_commit(
    entries: impl Iterator<Item = (Entry, At)>,
    seg: u64,
    replayed: &mut Replayed,
    index: &mut Index,
    redo: &mut Redo,
) {
    for (entry, at) in entries {
        match entry {
            Entry::Sled { writes } => redo.writes.push((at, writes)),
            Entry::Checkpoint { seg, off } => redo.checkpoint = (seg, off),
            Entry::Closed { at_ms } => {
                replayed.closed.insert(seg, at_ms);
            }
            entry => index.apply(entry, at),
        }
    }
}

impl Segment {
    /// The frame at `off`, in the segment's format.
    fn decode(&self, off: usize) -> frame::Read<'_> {
        match self.legacy {
            true => frame::decode_v1(&self.bytes[off..]),
            false => frame::decode(&self.bytes[off..]),
        }
    }

    /// A segment that does not read to its end: the newest one's torn
    /// tail is cut off, with a warning; anything else is damage, and an
    /// error naming the file and the offset.
    fn cut_or_refuse(
        &self,
        disk: &dyn Disk,
        read: FramesRead,
        replayed: &mut Replayed,
    ) -> anyhow::Result<()> {
        let (name, base, bytes) = (&self.name, self.base, &self.bytes);
        let why = read.bad.unwrap_or("a commit without its end");
        let at = base
            + if read.bad.is_some() {
                read.off
            } else {
                read.committed
            };
        let later = !self.legacy && frame_after(&bytes[read.off..], replayed.next_seq);
        if !self.newest || later {
            return Err(self.damaged(at, why, read.committed).into());
        }
        tracing::warn!(
            segment = %name,
            kept = base + read.committed,
            dropped = bytes.len() - read.committed,
            "the journal ends in a commit cut short (a crash mid-write); dropping it"
        );
        disk.set_len(name, (base + read.committed) as u64)?;
        disk.sync(name)?;
        replayed.next_seq = read.seq_at_commit;
        Ok(())
    }

    /// The error for damage at offset `at` (the last commit ends at
    /// `committed`), saying how to start without what follows.
    fn damaged(&self, at: usize, why: &str, committed: usize) -> Damaged {
        let name = &self.name;
        let without = if self.newest {
            format!(
                "to start without what it holds from offset {at} on, cut it there \
                 (truncate -s {at} {name})"
            )
        } else {
            "to start without it, move it and every later segment out of the journal's directory"
                .to_string()
        };
        Damaged {
            seg: self.seg,
            at: at as u64,
            kept: (self.base + committed) as u64,
            message: format!(
                "the journal segment {name} is damaged at offset {at} ({why}), before the end of \
                 the journal: what follows was acknowledged, so switchyard will not start without \
                 it. Copy the data directory aside, then restore it from a backup, or, {without}; \
                 `switchyard store salvage` does this for you (docs/operations.md, \"When the \
                 store is damaged\")"
            ),
        }
    }
}

/// Everything the segments hold, read in order.
struct Read {
    found: Vec<u64>,
    index: Index,
    redo: Redo,
    replayed: Replayed,
}

/// Reads the whole journal (`store check` and `salvage` do).
fn read_all(disk: &dyn Disk) -> anyhow::Result<Read> {
    read_from(disk, None)
}

/// Reads the journal from where the snapshot `start` stands, onto its
/// index; from the beginning without one, the index then to be written
/// whole at the next snapshot.
fn read_from(disk: &dyn Disk, start: Option<(Position, Index)>) -> anyhow::Result<Read> {
    let found = segments(disk)?;
    let (from, index, replayed) = match start {
        Some((position, index)) => {
            let replayed = Replayed {
                bytes: 0,
                next_seq: position.next_seq,
                legacy: position.legacy.into_iter().collect(),
                closed: position
                    .closed
                    .into_iter()
                    .filter_map(|(seg, closed)| Some((seg, closed?)))
                    .collect(),
            };
            ((position.seg, position.off as usize), index, replayed)
        }
        None => {
            let mut index = Index::default();
            index.kept.all = true;
            index.whole = true;
            ((0, 0), index, Replayed::default())
        }
    };
    let mut read = Read {
        found,
        index,
        redo: Redo::default(),
        replayed,
    };
    for (i, &seg) in read.found.iter().enumerate() {
        if seg < from.0 {
            continue;
        }
        let newest = i + 1 == read.found.len();
        let base = if seg == from.0 { from.1 } else { 0 };
        let (replayed, index, redo) = (&mut read.replayed, &mut read.index, &mut read.redo);
        replay(disk, (seg, base), newest, replayed, index, redo)?;
    }
    Ok(read)
}

/// Damage before the end of the journal, where a start stops.
#[derive(Debug)]
pub struct Damaged {
    seg: u64,
    /// Where the damage is.
    at: u64,
    /// Where the last whole commit before it ends.
    kept: u64,
    message: String,
}

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Damaged {}

/// Whether a whole frame anywhere in `bytes` says that the frame numbered
/// `bad` was durable before it was written: then what stopped the reading
/// at `bad` is damage, not a write torn by a crash (whose sectors may
/// reach the disk in any order, so later frames alone prove nothing).
fn frame_after(bytes: &[u8], bad: u64) -> bool {
    (0..bytes.len()).any(|i| {
        bytes[i..].starts_with(&frame::MAGIC)
            && matches!(frame::decode(&bytes[i..]), frame::Read::Frame { synced, .. } if synced > bad)
    })
}

/// An execution read from its frames: the record, then its attempts.
fn read_execution(disk: &dyn Disk, frames: &[(At, usize)]) -> Result<Execution> {
    let mut entries = frames
        .iter()
        .map(|(at, header)| read_entry(disk, *at, *header));
    let Some(first) = entries.next() else {
        return Err(corrupt("an execution with no record"));
    };
    let (Entry::Execution { mut execution, .. }, body) = first? else {
        return Err(corrupt("an execution's first record is not an execution"));
    };
    if !body.is_empty() {
        execution.body_sealed = Some(SealedBody::new(body));
    }
    let attempts = entries.map(|e| e.map(|(entry, _)| entry));
    Ok(fold(*execution, attempts.collect::<Result<Vec<_>>>()?))
}

fn read_body(disk: &dyn Disk, at: At, header: usize) -> Result<Vec<u8>> {
    let (_, body) = read_frame(disk, at, header)?;
    Ok(body)
}

fn read_entry(disk: &dyn Disk, at: At, header: usize) -> Result<(Entry, Vec<u8>)> {
    let (json, body) = read_frame(disk, at, header)?;
    let entry = serde_json::from_slice(&json)
        .context("reading a journal record")
        .map_err(StoreError::Other)?;
    Ok((entry, body))
}

/// The JSON and body of the frame at `at`: checked when the journal was
/// read at start, or written by this process.
fn read_frame(disk: &dyn Disk, at: At, header: usize) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = vec![0; at.len as usize];
    let name = segment_name(at.seg);
    disk.read_at(&name, at.off, &mut buf)
        .map_err(|e| io_error("reading", &name, e))?;
    // Checked again: the disk may have changed since the start read it.
    let read = match header {
        frame::HEADER => frame::decode(&buf),
        _ => frame::decode_v1(&buf),
    };
    let damaged = |why: &str| {
        corrupt(&format!(
            "a damaged journal record at {name}:{}: {why}",
            at.off
        ))
    };
    let payload = match read {
        frame::Read::Frame { payload, .. } => payload,
        frame::Read::End => return Err(damaged("no bytes")),
        frame::Read::Bad(why) => return Err(damaged(why)),
    };
    let (json, body) = frame::split(payload).ok_or_else(|| damaged("a record cut short"))?;
    Ok((json.to_vec(), body.to_vec()))
}

/// The segment numbers on `disk`, in order. A gap is damage: segments go
/// only oldest first.
fn segments(disk: &dyn Disk) -> anyhow::Result<Vec<u64>> {
    let mut found: Vec<u64> = disk
        .list()
        .context("cannot list the journal's directory")?
        .iter()
        .filter_map(|name| name.strip_suffix(".log").and_then(|n| n.parse().ok()))
        .collect();
    found.sort_unstable();
    if let Some(w) = found.windows(2).find(|w| w[1] != w[0] + 1) {
        anyhow::bail!(
            "the journal segments {} to {} are missing: records acknowledged in them are lost. \
             Restore the data directory from a backup",
            segment_name(w[0] + 1),
            segment_name(w[1] - 1)
        );
    }
    Ok(found)
}

fn segment_name(seg: u64) -> String {
    format!("{seg:016}.log")
}

/// A new, empty segment; its directory entry made durable.
fn create_segment(disk: &dyn Disk, seg: u64) -> std::io::Result<()> {
    disk.create(&segment_name(seg))?;
    disk.sync_dir()
}

/// Whether `e` says the disk is full (ENOSPC, EDQUOT).
fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(28 | 122))
}

/// A failed read.
fn io_error(doing: &str, name: &str, e: std::io::Error) -> StoreError {
    StoreError::Other(anyhow::Error::new(e).context(format!("{doing} the journal segment {name}")))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Other(anyhow::anyhow!("{what}"))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::model::{Attempt, Status};
    use crate::store::contract::{delivery, event, execution};
    use disk::sim::Sim;

    const BODY: &str = "abcdef0123456789";

    /// What matching one event writes: the event out of the inbox, its
    /// execution and its delivery, one body between them.
    fn fired(id: &str) -> Vec<Entry> {
        let mut execution = execution(id, 1);
        let mut delivery = delivery(&format!("d_{id}"), 5);
        delivery.execution_id = execution.id.clone();
        delivery.body_sealed = crate::model::SealedBody::from_hex(BODY).unwrap();
        execution.body_sealed = Some(crate::model::SealedBody::from_hex(BODY).unwrap());
        vec![
            Entry::Taken {
                id: format!("ev_{id}"),
            },
            Entry::Execution {
                execution: Box::new(execution),
                body: false,
            },
            Entry::Queued {
                delivery,
                body: None,
            },
        ]
    }

    /// An event into the inbox.
    fn arrived(id: &str, at_ms: u64) -> Entry {
        Entry::Event {
            event: Box::new(event(id, at_ms)),
        }
    }

    /// What delivering `d_{id}` writes: settled, and its attempt.
    pub(in crate::store::sled) fn attempted(id: &str) -> Vec<Entry> {
        let e = execution(id, 1);
        vec![
            Entry::Settled {
                id: format!("d_{id}").into(),
            },
            Entry::Attempt {
                automation: e.automation,
                execution_id: e.id,
                status: Status::Finished,
                error: None,
                attempt: Attempt {
                    at_ms: 9,
                    status: Some(200),
                    latency_ms: 1.0,
                    error: None,
                    next_attempt_at_ms: None,
                },
                at_ms: 9,
            },
        ]
    }

    fn key(id: &str) -> Vec<u8> {
        let e = execution(id, 1);
        execution_key(&e.automation, e.id.as_str()).into_bytes()
    }

    /// What is due, once what was written is durable.
    fn due(journal: &Journal) -> Vec<Delivery> {
        journal.sync().unwrap();
        let ((due, _), unreadable) = journal.due(u64::MAX, usize::MAX, &|_| false).unwrap();
        assert!(unreadable.is_empty(), "{unreadable:?}");
        due
    }

    fn bytes_on_disk(disk: &Sim) -> Vec<u8> {
        segments(disk)
            .unwrap()
            .iter()
            .flat_map(|seg| disk.read(&segment_name(*seg)).unwrap())
            .collect()
    }

    /// The journal on `disk`, with no index kept: it reads everything.
    fn open(disk: &Sim) -> Journal {
        Journal::open(Arc::new(disk.clone())).unwrap().0
    }

    /// A journal of two segments, with a byte flipped in the middle of the
    /// older one; and how many deliveries waited in it.
    pub(super) fn damaged_journal() -> (Sim, usize) {
        let disk = Sim::new();
        for batch in 0..2 {
            let journal = open(&disk);
            for i in 0..10 {
                journal.append(fired(&format!("{batch}-{i}"))).unwrap();
            }
            journal.sync().unwrap();
        }
        let first = segment_name(1);
        let middle = disk.read(&first).unwrap().len() / 2;
        disk.flip(&first, middle);
        (disk, 20)
    }

    use crate::model::Delivery;

    #[test]
    fn records_survive_a_reopen_and_a_body_is_stored_once() {
        let disk = Sim::new();
        {
            let journal = open(&disk);
            journal.append(vec![arrived("ev_a", 1)]).unwrap();
            journal.append(vec![arrived("ev_b", 2)]).unwrap();
            journal.append(fired("a")).unwrap();
            journal.append(fired("b")).unwrap();
            journal.append(attempted("b")).unwrap();
            journal.sync().unwrap();
        }
        let journal = open(&disk);
        assert!(journal.inbox().is_empty());
        let waiting = due(&journal);
        assert_eq!(waiting.len(), 1, "b was settled");
        assert_eq!(
            (
                waiting[0].id.as_str(),
                waiting[0].body_sealed.to_hex().as_str()
            ),
            ("d_a", BODY)
        );
        let a = journal.execution(&key("a")).unwrap().unwrap();
        assert_eq!((a.status, a.attempts.len()), (Status::Pending, 0));
        assert_eq!(
            a.body_sealed.as_ref().map(SealedBody::to_hex).as_deref(),
            Some(BODY)
        );
        let b = journal.execution(&key("b")).unwrap().unwrap();
        assert_eq!(
            (b.status, b.attempts.len(), b.updated_at_ms),
            (Status::Finished, 1, 9)
        );
        let body = hex::decode(BODY).unwrap();
        let on_disk = bytes_on_disk(&disk);
        let copies = on_disk.windows(body.len()).filter(|w| *w == body).count();
        assert_eq!(copies, 2, "one body each for a and b, as bytes");
        assert!(
            !String::from_utf8_lossy(&on_disk).contains(BODY),
            "not as hex"
        );
        // A retry refers to the body already written.
        let mut retry = waiting[0].clone();
        retry.due_ms = 50;
        journal
            .append(vec![
                Entry::Settled {
                    id: retry.id.clone(),
                },
                Entry::Queued {
                    delivery: retry,
                    body: None,
                },
            ])
            .unwrap();
        let on_disk = bytes_on_disk(&disk);
        assert_eq!(
            on_disk.windows(body.len()).filter(|w| *w == body).count(),
            2
        );
        assert_eq!(due(&journal)[0].body_sealed.to_hex(), BODY);
        assert_eq!(journal.first_due(), Some(50));
    }

    /// A commit cut at any byte, or with any byte flipped, vanishes whole;
    /// everything committed before it stays, and the file is truncated to it.
    #[test]
    fn a_torn_tail_is_dropped_and_every_acknowledged_record_kept() {
        let disk = Sim::new();
        let (acknowledged, whole) = {
            let journal = open(&disk);
            journal.append(vec![arrived("ev_a", 1)]).unwrap();
            journal.append(fired("a")).unwrap();
            journal.sync().unwrap();
            let acknowledged = bytes_on_disk(&disk);
            let mut tail = vec![arrived("ev_b", 2)];
            tail.extend(fired("b"));
            journal.append(tail).unwrap();
            (acknowledged, bytes_on_disk(&disk))
        };
        let check = |bytes: &[u8], whole_tail: bool, what: &str| {
            let disk = Sim::new();
            disk.put(&segment_name(1), bytes);
            let journal = open(&disk);
            assert!(journal.execution(&key("a")).unwrap().is_some(), "{what}");
            let ids: Vec<String> = due(&journal)
                .into_iter()
                .map(|d| d.id.to_string())
                .collect();
            let expected = if whole_tail {
                vec!["d_a", "d_b"]
            } else {
                vec!["d_a"]
            };
            assert_eq!(ids, expected, "{what}");
            assert_eq!(
                journal.execution(&key("b")).unwrap().is_some(),
                whole_tail,
                "{what}"
            );
            assert!(journal.inbox().is_empty(), "{what}");
            // Cut to the last commit, then closed by the start (a
            // `Closed` commit after it): the next segment is written.
            let kept = disk.read(&segment_name(1)).unwrap();
            let last = if whole_tail { &whole } else { &acknowledged };
            assert_eq!(
                &kept[..last.len()],
                last.as_slice(),
                "{what}: truncated to the last commit"
            );
            assert!(
                kept.len() > last.len() && disk.read(&segment_name(2)).is_ok(),
                "{what}: the segment was closed and the next opened"
            );
            // What is left is whole: it opens again as it is.
            drop(journal);
            let again = open(&disk);
            assert_eq!(due(&again).len(), expected.len(), "{what}, reopened");
        };
        for cut in acknowledged.len()..=whole.len() {
            check(&whole[..cut], cut == whole.len(), &format!("cut at {cut}"));
        }
        for at in acknowledged.len()..whole.len() {
            let mut flipped = whole.clone();
            flipped[at] ^= 0x10;
            check(&flipped, false, &format!("byte {at} flipped"));
        }
    }

    /// Finding 2 of issue 67: the segment active when a host stops is
    /// closed by the next start, so expiry goes on across restarts rather
    /// than stopping for good at that segment.
    #[test]
    fn expiry_goes_on_across_restarts() {
        let disk = Sim::new();
        for run in 0..5 {
            let journal = open(&disk);
            for i in 0..3 {
                journal.append(fired(&format!("r{run}-{i}"))).unwrap();
            }
            journal.sync().unwrap();
            let seg = journal.state().active_seg;
            journal.expire(u64::MAX, seg).unwrap();
            let kept = journal.state().segments.len();
            assert!(kept <= 2, "after restart {run}, {kept} segments are kept");
        }
    }

    /// Finding 3 of issue 67: a delivery is due only once its commit is
    /// durable; sent before, a power cut could leave the receiver holding
    /// a delivery for state the store does not have.
    #[test]
    fn a_delivery_is_due_only_once_its_commit_is_durable() {
        let disk = Sim::new();
        let journal = open(&disk);
        journal.append(fired("a")).unwrap();
        let ((due_now, next), _) = journal.due(u64::MAX, 10, &|_| false).unwrap();
        assert!(due_now.is_empty(), "due before its commit was synced");
        assert!(next.is_some(), "looked at again soon");
        assert_eq!(due(&journal).len(), 1);
    }

    #[test]
    fn expiry_drops_old_segments_and_keeps_what_still_waits() {
        let disk = Sim::new();
        let journal = open(&disk);
        journal.append(vec![arrived("ev_a", 1)]).unwrap();
        journal.append(fired("a")).unwrap();
        journal.append(fired("b")).unwrap();
        journal.append(attempted("b")).unwrap();
        journal.append(vec![arrived("ev_c", 3)]).unwrap();
        // Close the segment, as time would.
        journal.state().rotate_after = Duration::ZERO;
        journal.append(vec![arrived("ev_d", 4)]).unwrap();
        journal.state().rotate_after = Duration::from_secs(3600);
        let later = crate::ids::now_ms() + 1000;
        assert_eq!(journal.expire(later, 1).unwrap(), 0, "sled may need it");
        assert_eq!(journal.expire(later, 3).unwrap(), 1, "b, settled, went");
        assert!(disk.read(&segment_name(1)).is_err());
        let check = |journal: &Journal| {
            assert!(journal.execution(&key("b")).unwrap().is_none());
            let a = journal.execution(&key("a")).unwrap().unwrap();
            assert_eq!(
                a.body_sealed.as_ref().map(SealedBody::to_hex).as_deref(),
                Some(BODY),
                "a's delivery still waits"
            );
            let waiting = due(journal);
            assert_eq!(
                (waiting.len(), waiting[0].body_sealed.to_hex().as_str()),
                (1, BODY)
            );
            let inbox: Vec<String> = journal.inbox().into_iter().map(|e| e.id).collect();
            assert_eq!(inbox, ["ev_c", "ev_d"]);
        };
        check(&journal);
        assert_eq!(journal.expire(later, 3).unwrap(), 0, "nothing more is old");
        drop(journal);
        check(&open(&disk));
    }

    /// Finding 5 of issue 53: with expiry by file time, a clock step could
    /// drop a newer segment (its settled markers) and keep an older one
    /// (its queued records). Segments go oldest first, whatever they say.
    #[test]
    fn expiry_goes_in_order_whatever_the_clock_says() {
        let disk = Sim::new();
        let journal = open(&disk);
        journal.append(fired("a")).unwrap();
        journal.state().rotate_after = Duration::ZERO;
        journal.append(attempted("a")).unwrap();
        journal.append(vec![arrived("ev_b", 2)]).unwrap();
        journal.state().rotate_after = Duration::from_secs(3600);
        // The clock stepped back between the two closings: segment 2 says
        // it closed long before segment 1.
        {
            let mut state = journal.state();
            state.segments.insert(1, Some(5_000));
            state.segments.insert(2, Some(1_000));
        }
        assert_eq!(journal.expire(2_000, u64::MAX).unwrap(), 0);
        assert!(disk.read(&segment_name(2)).is_ok(), "2 goes only after 1");
        drop(journal);
        let journal = open(&disk);
        assert!(due(&journal).is_empty(), "a's delivery stays settled");
    }

    fn open_in(disk: &Sim) -> anyhow::Result<Journal> {
        Ok(Journal::open(Arc::new(disk.clone()))?.0)
    }

    /// Removes the snapshot: the next start reads the journal whole.
    fn forget_snapshot(disk: &Sim) {
        for name in disk.list().unwrap() {
            if name.ends_with(".snap") {
                disk.remove(&name).unwrap();
            }
        }
    }

    fn ids(executions: Vec<Execution>) -> Vec<String> {
        executions.into_iter().map(|e| e.id.to_string()).collect()
    }

    /// Issue 53, finding 7: a start reads the journal from the last
    /// snapshot on. Damage in settled history before it does not stop the
    /// start (nothing read it), and is reported when that history is read;
    /// without the snapshot, the same start reads it and refuses.
    #[test]
    fn a_start_reads_only_what_came_after_the_snapshot() {
        let disk = Sim::new();
        let journal = open_in(&disk).unwrap();
        for i in 0..10 {
            journal.append(fired(&format!("a{i}"))).unwrap();
            journal.append(attempted(&format!("a{i}"))).unwrap();
        }
        journal.append(fired("waits")).unwrap();
        let snapshot_at = journal.snapshot().unwrap();
        journal.append(fired("after")).unwrap();
        journal.append(attempted("a3")).unwrap();
        journal.append(vec![arrived("ev_late", 7)]).unwrap();
        journal.sync().unwrap();
        let all = ids(journal.executions(b"", usize::MAX).unwrap());
        drop(journal);
        assert_eq!(all.len(), 12);

        // Damage a settled execution's record, before the snapshot.
        let bytes = disk.read(&segment_name(1)).unwrap();
        let record = br#""op":"execution""#;
        let at = bytes
            .windows(record.len())
            .position(|w| w == record)
            .expect("an execution's record");
        assert!((at as u64) < snapshot_at.1);
        disk.flip(&segment_name(1), at + 3);

        let journal = open_in(&disk).expect("the start reads only after the snapshot");
        let waiting: Vec<String> = due(&journal)
            .into_iter()
            .map(|d| d.id.to_string())
            .collect();
        assert_eq!(waiting, ["d_after", "d_waits"]);
        assert_eq!(journal.inbox().len(), 1);
        assert_eq!(
            journal
                .execution(&key("a3"))
                .unwrap()
                .unwrap()
                .attempts
                .len(),
            2
        );
        let damaged = journal.executions(b"", usize::MAX).unwrap_err().to_string();
        assert!(
            damaged.contains("damaged journal record at 0000000000000001.log"),
            "{damaged}"
        );
        assert!(journal.execution(&key("a5")).unwrap().is_some());
        drop(journal);
        forget_snapshot(&disk);
        let Err(e) = open_in(&disk) else {
            panic!("a start that reads everything must refuse the damage");
        };
        assert!(format!("{e:#}").contains("is damaged at offset"), "{e:#}");
    }

    /// History listings merge what memory, the snapshot's tree and the
    /// closed segments' indexes hold, newest first, whatever the limit,
    /// attempts included (some made segments after their execution); a
    /// reopened journal holds the same, and so does one whose segment
    /// index was damaged (built again) or that is read whole.
    #[test]
    fn history_reads_the_same_across_the_snapshot() {
        let disk = Sim::new();
        let journal = open_in(&disk).unwrap();
        let mut expected = Vec::new();
        for i in 0..30 {
            let id = format!("{:02}", i);
            journal.append(fired(&id)).unwrap();
            if i % 3 == 0 {
                // Some attempts a segment or two later.
                let late = format!("{:02}", i - i % 2 * 3);
                journal.append(attempted(&late)).unwrap();
            }
            if i % 7 == 6 {
                journal.rotate_soon();
            }
            if i % 5 == 4 {
                journal.rotate_every(Duration::from_secs(3600));
                journal.snapshot().unwrap();
                journal.index_sealed().unwrap();
            }
            expected.push(execution(&id, 1).id.to_string());
        }
        let indexes = disk
            .lengths()
            .keys()
            .filter(|n| n.ends_with(".idx"))
            .count();
        assert!(indexes >= 2, "{:?}", disk.lengths());
        expected.sort();
        expected.reverse();
        let check = |journal: &Journal, what: &str| {
            for limit in [1, 5, 29, 30, 100] {
                let got = ids(journal.executions(b"", limit).unwrap());
                let want: Vec<String> = expected.iter().take(limit).cloned().collect();
                assert_eq!(got, want, "{what}, limit {limit}");
            }
            let attempts: Vec<usize> = journal
                .executions(b"", usize::MAX)
                .unwrap()
                .iter()
                .map(|e| e.attempts.len())
                .collect();
            assert_eq!(attempts.iter().sum::<usize>(), 10, "{what}");
        };
        check(&journal, "running");
        journal.sync().unwrap();
        drop(journal);
        let reopened = open_in(&disk).unwrap();
        // An execution made now is in no segment closed an hour ago: none
        // is read.
        for closed in reopened.state().segments.values_mut().flatten() {
            *closed = crate::ids::now_ms() - 3_600_000;
        }
        reopened.cached().clear();
        let fresh = execution("x", 1);
        let fresh = execution_key(&fresh.automation, &crate::ids::ordered_id()).into_bytes();
        assert!(!reopened.has_execution(&fresh).unwrap());
        assert!(reopened.cached().is_empty(), "a closed segment was read");
        check(&reopened, "reopened");
        disk.flip(&sealed::name(1), 40);
        check(&open_in(&disk).unwrap(), "an index damaged");
        let logs: Vec<String> = disk
            .lengths()
            .into_keys()
            .filter(|n| n.ends_with(".pcs"))
            .collect();
        assert!(!logs.is_empty(), "{:?}", disk.lengths());
        for log in &logs {
            disk.flip(log, 40);
        }
        check(&open_in(&disk).unwrap(), "a piece log damaged");
        check(&open(&disk), "read whole");
    }

    /// The snapshot holds what waits, and nothing that has gone, whatever
    /// commits come between a snapshot's freezing and its writing.
    #[test]
    fn the_snapshot_holds_only_what_waits() {
        let disk = Sim::new();
        let journal = open_in(&disk).unwrap();
        let waiting = |j: &Journal| -> Vec<String> {
            let keys = j.tree.scan(b"o").into_iter().map(|(k, _)| k[1..].to_vec());
            keys.map(|k| String::from_utf8(k).unwrap()).collect()
        };
        for id in ["a", "b", "c"] {
            journal.append(fired(id)).unwrap();
        }
        journal.snapshot().unwrap();
        assert_eq!(waiting(&journal), ["d_a", "d_b", "d_c"]);
        journal.append(attempted("a")).unwrap();
        journal.append(attempted("b")).unwrap();
        journal.append(fired("d")).unwrap();
        let frozen = journal.freeze().unwrap();
        journal.append(attempted("c")).unwrap();
        journal.append(fired("e")).unwrap();
        journal.write_snapshot(frozen).unwrap();
        assert_eq!(waiting(&journal), ["d_c", "d_d"]);
        journal.snapshot().unwrap();
        assert_eq!(waiting(&journal), ["d_d", "d_e"]);
        journal.append(attempted("d")).unwrap();
        journal.append(attempted("e")).unwrap();
        journal.snapshot().unwrap();
        assert!(waiting(&journal).is_empty());
        drop(journal);
        assert!(due(&open_in(&disk).unwrap()).is_empty());
    }

    /// A delivery still waiting whose record is damaged stops a start from
    /// the snapshot too, naming the file and the offset.
    #[test]
    fn damage_in_a_waiting_record_stops_the_start() {
        let disk = Sim::new();
        let journal = open_in(&disk).unwrap();
        journal.append(fired("waits")).unwrap();
        journal.snapshot().unwrap();
        drop(journal);
        let bytes = disk.read(&segment_name(1)).unwrap();
        let body = hex::decode(BODY).unwrap();
        let at = bytes.windows(body.len()).position(|w| w == body).unwrap();
        disk.flip(&segment_name(1), at);
        let Err(e) = open_in(&disk) else {
            panic!("a damaged waiting delivery was started over");
        };
        let e = format!("{e:#}");
        assert!(
            e.contains("0000000000000001.log is damaged at offset") && e.contains("d_waits"),
            "{e}"
        );
    }

    /// Expiry drops the executions the snapshot holds with their segments;
    /// and a journal cut back by salvage (the snapshot past its end) is
    /// read whole again.
    #[test]
    fn expiry_and_salvage_leave_the_snapshot_true() {
        let disk = Sim::new();
        let journal = open_in(&disk).unwrap();
        journal.append(fired("old")).unwrap();
        journal.append(attempted("old")).unwrap();
        journal.append(fired("waits")).unwrap();
        journal.snapshot().unwrap();
        journal.rotate_soon();
        journal.append(fired("new")).unwrap();
        journal.rotate_every(Duration::from_secs(3600));
        let later = crate::ids::now_ms() + 1000;
        // A start would read from the snapshot, in segment 1.
        assert_eq!(journal.expire(later, 2).unwrap(), 0, "kept for the start");
        let (seg, _) = journal.snapshot().unwrap();
        assert_eq!(seg, 2);
        assert_eq!(journal.expire(later, seg).unwrap(), 1, "old went");
        let left = |j: &Journal| {
            let mut ids = ids(j.executions(b"", usize::MAX).unwrap());
            ids.sort();
            ids
        };
        let expected = ["new", "waits"].map(|id| execution(id, 1).id.to_string());
        assert_eq!(left(&journal), expected);
        journal.snapshot().unwrap();
        journal.sync().unwrap();
        drop(journal);
        assert_eq!(left(&open_in(&disk).unwrap()), expected);

        // Cut the journal back before where the snapshot stands, as
        // salvage may: the start reads it whole, never the index's stale
        // entries, and the next snapshot replaces them.
        disk.set_len(&segment_name(2), 0).unwrap();
        let journal = open_in(&disk).unwrap();
        assert!(left(&journal).is_empty());
        assert!(due(&journal).is_empty());
        journal.snapshot().unwrap();
        drop(journal);
        let journal = open_in(&disk).unwrap();
        assert!(left(&journal).is_empty());
        let logs = disk.lengths().into_keys().filter(|n| n.ends_with(".pcs"));
        assert_eq!(logs.count(), 0);
    }
}
