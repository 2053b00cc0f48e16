//! The journal: the delivery path's records (the inbox, the outbox,
//! executions and their attempts) in an append-only log, beside sled, which
//! keeps the configuration.
//!
//! Why not sled for these: they are a queue. Each record is written once
//! and read back rarely, and a B-tree rewrites a leaf (and later copies a
//! segment) for every insert and delete; here a record costs its own bytes,
//! once. An execution's attempts are appended beside it, not rewritten into
//! it; a delivery's sealed body is stored once, as bytes, and referred to by
//! its retries.
//!
//! On disk: numbered segment files of frames (`frame.rs`). A commit writes
//! its entries then a `Commit` frame, in one `write`; at start, the segments
//! are read in order and only committed entries apply, so a commit cut short
//! by a crash vanishes whole and the file is truncated there, with a
//! warning. In memory: the index (`index.rs`); bodies and executions stay on
//! disk and are read where the index points. A segment is dropped whole
//! once it is past the history's lifetime ([`Journal::expire`]), after any
//! record still waiting in it has been written again at the end.

mod frame;
mod index;

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

pub use index::Entry;
use index::{At, Index, fold};

use super::shared::execution_key;

use crate::model::{Event, Execution};
use crate::store::{Due, Result, Skip, StoreError};

/// A segment is closed once it holds this much.
const SEGMENT_BYTES: u64 = 64 << 20;

/// The journal in a directory. Cheap to share behind an `Arc`.
pub struct Journal {
    dir: PathBuf,
    state: Mutex<State>,
}

struct State {
    index: Index,
    /// The segment written to, open for appending.
    active: Arc<File>,
    active_seg: u64,
    active_len: u64,
    active_since: Instant,
    /// A segment is closed once it is this old, so that the history's
    /// lifetime can drop it.
    rotate_after: Duration,
    /// Open segments, for reading.
    readers: HashMap<u64, Arc<File>>,
}

impl Journal {
    /// Opens (or creates) the journal in `dir` and reads it into memory.
    /// Returns it with the sled writes logged after the last checkpoint, in
    /// order, for sled to apply again (see [`Entry::Sled`]).
    pub fn open(dir: &Path) -> anyhow::Result<(Journal, Vec<Vec<u8>>)> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the journal directory {}", dir.display()))?;
        let mut index = Index::default();
        let mut redo = Redo::default();
        let segments = segments(dir)?;
        for &seg in &segments {
            replay(&segment_path(dir, seg), seg, &mut index, &mut redo)?;
        }
        let active_seg = segments.last().map_or(1, |last| last + 1);
        let active = create_segment(dir, active_seg)?;
        let mut readers = HashMap::new();
        for seg in segments {
            readers.insert(seg, Arc::new(File::open(segment_path(dir, seg))?));
        }
        readers.insert(
            active_seg,
            Arc::new(File::open(segment_path(dir, active_seg))?),
        );
        let state = State {
            index,
            active: Arc::new(active),
            active_seg,
            active_len: 0,
            active_since: Instant::now(),
            rotate_after: Duration::from_secs(3600),
            readers,
        };
        let journal = Journal {
            dir: dir.to_path_buf(),
            state: Mutex::new(state),
        };
        Ok((journal, redo.since_checkpoint()))
    }

    /// Where the next commit goes: a checkpoint taken here covers every
    /// commit before it.
    pub fn position(&self) -> (u64, u64) {
        let state = self.state();
        (state.active_seg, state.active_len)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes segments at least this often, so that a short history
    /// lifetime can drop them.
    pub fn rotate_every(&self, every: Duration) {
        self.state().rotate_after = every.max(Duration::from_secs(1));
    }

    /// Writes `entries` as one commit and applies them. Each sealed body is
    /// written once: a delivery whose body an execution of the same commit
    /// carries, or which waits already (a retry), refers to it.
    pub fn append(&self, entries: Vec<Entry>) -> Result<()> {
        self.state().write(&self.dir, entries, true)
    }

    /// Makes every commit so far durable.
    pub fn sync(&self) -> Result<()> {
        let active = self.state().active.clone();
        active.sync_data().map_err(write_error)
    }

    /// The events in the inbox, by id.
    pub fn inbox(&self) -> Vec<Event> {
        let state = self.state();
        state.index.inbox.values().map(|(e, _)| e.clone()).collect()
    }

    pub fn has_event(&self, id: &str) -> bool {
        self.state().index.inbox.contains_key(id)
    }

    pub fn has_execution(&self, key: &[u8]) -> bool {
        self.state().index.executions.contains_key(key)
    }

    /// See `DeliveryRecords::due_deliveries`.
    pub fn due(&self, now_ms: u64, limit: usize, skip: Skip<'_>) -> Result<Due> {
        let (picked, next) = {
            let state = self.state();
            let mut picked = Vec::new();
            let mut next = None;
            for ((due, id), waiting) in &state.index.outbox {
                if *due > now_ms {
                    next = Some(*due);
                    break;
                }
                if skip(id) {
                    continue;
                }
                if picked.len() == limit {
                    next = Some(now_ms);
                    break;
                }
                let reader = state.reader(waiting.body.seg)?;
                picked.push((waiting.delivery.clone(), waiting.body, reader));
            }
            (picked, next)
        };
        let mut due = Vec::with_capacity(picked.len());
        for (mut delivery, body, reader) in picked {
            delivery.body_sealed = hex::encode(read_body(&reader, body)?);
            due.push(delivery);
        }
        Ok((due, next))
    }

    /// Whether the delivery `id` still waits, due at `due_ms`.
    pub fn waits(&self, id: &str, due_ms: u64) -> bool {
        self.state().index.due_of.get(id) == Some(&due_ms)
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
        let frames = {
            let state = self.state();
            let Some(frames) = state.index.executions.get(key) else {
                return Ok(None);
            };
            state.with_readers(frames)?
        };
        read_execution(&frames).map(Some)
    }

    /// The executions whose keys start with `prefix`, newest first.
    pub fn executions(&self, prefix: &[u8], limit: usize) -> Result<Vec<Execution>> {
        let found: Vec<_> = {
            let state = self.state();
            let under = state
                .index
                .executions
                .range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(_, frames)| frames)
                .collect::<Vec<_>>();
            under
                .into_iter()
                .rev()
                .take(limit)
                .map(|frames| state.with_readers(frames))
                .collect::<Result<_>>()?
        };
        found.iter().map(|f| read_execution(f)).collect()
    }

    /// Drops every segment last written before `before` (the history's
    /// lifetime), with the executions recorded in it; events and deliveries
    /// still waiting there are written again first. Returns how many
    /// executions went.
    pub fn expire(&self, before: SystemTime) -> Result<usize> {
        let mut state = self.state();
        let old: BTreeSet<u64> = state
            .readers
            .iter()
            .filter(|(seg, file)| {
                **seg != state.active_seg
                    && file
                        .metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t < before)
            })
            .map(|(seg, _)| *seg)
            .collect();
        if old.is_empty() {
            return Ok(0);
        }
        // Under the same lock as the reading, so that nothing settles in
        // between and comes back.
        let live: Vec<Entry> = state.still_waiting(&old)?;
        if !live.is_empty() {
            state.write(&self.dir, live, false)?;
            state.active.sync_data().map_err(write_error)?;
        }
        let forgotten = state.index.forget_executions(&old);
        for seg in &old {
            state.readers.remove(seg);
            std::fs::remove_file(segment_path(&self.dir, *seg)).map_err(write_error)?;
        }
        tracing::info!(
            segments = old.len(),
            executions = forgotten,
            "dropped journal segments past the history's lifetime"
        );
        Ok(forgotten)
    }

    /// Every frame, raw, for `switchyard admin dump-records`.
    pub fn raw(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for seg in segments(&self.dir).map_err(StoreError::Other)? {
            let bytes = std::fs::read(segment_path(&self.dir, seg)).map_err(write_error)?;
            let mut off = 0;
            while let Some((payload, len)) = frame::decode(&bytes[off..]) {
                let key = format!("{seg}:{off}").into_bytes();
                out.push((key, payload.to_vec()));
                off += len;
            }
        }
        Ok(out)
    }
}

impl State {
    /// [`Journal::append`], on the state held; `reuse` false writes every
    /// body anew (when moving records out of a segment about to go).
    fn write(&mut self, dir: &Path, entries: Vec<Entry>, reuse: bool) -> Result<()> {
        self.rotate_if_due(dir)?;
        let seg = self.active_seg;
        let base = self.active_len;
        let mut buf = Vec::with_capacity(entries.len() * 2048);
        let mut bodies: HashMap<String, At> = HashMap::new();
        let mut placed = Vec::with_capacity(entries.len());
        for mut entry in entries {
            let waiting = reuse.then_some(&self.index);
            let body = take_body(&mut entry, &bodies, waiting)?;
            let json = serde_json::to_vec(&entry)?;
            let off = base + buf.len() as u64;
            let len = frame::encode(&mut buf, &json, &body.bytes) as u32;
            let at = At { seg, off, len };
            if let Some(sealed) = body.sealed {
                bodies.insert(sealed, at);
            }
            placed.push((entry, at));
        }
        frame::encode(&mut buf, br#"{"op":"commit"}"#, &[]);
        if let Err(e) = self.active.write_all_at(&buf, base) {
            // Nothing of a failed commit may stay for the next one to follow.
            let _ = self.active.set_len(base);
            return Err(write_error(e));
        }
        self.active_len += buf.len() as u64;
        for (entry, at) in placed {
            self.index.apply(entry, at);
        }
        Ok(())
    }

    fn reader(&self, seg: u64) -> Result<Arc<File>> {
        self.readers
            .get(&seg)
            .cloned()
            .ok_or_else(|| corrupt(&format!("journal segment {seg} is gone")))
    }

    fn with_readers(&self, frames: &[At]) -> Result<Vec<(At, Arc<File>)>> {
        frames
            .iter()
            .map(|at| Ok((*at, self.reader(at.seg)?)))
            .collect()
    }

    /// What in `segments` still waits, as entries to write again, bodies
    /// included: events in the inbox, deliveries in the outbox, and the
    /// executions of those deliveries (their attempts are still to come).
    fn still_waiting(&self, segments: &BTreeSet<u64>) -> Result<Vec<Entry>> {
        let old = |at: &At| segments.contains(&at.seg);
        let mut executions = Vec::new();
        let mut again = Vec::new();
        for (event, at) in self.index.inbox.values() {
            if old(at) {
                again.push(Entry::Event {
                    event: Box::new(event.clone()),
                });
            }
        }
        for w in self.index.outbox.values() {
            let d = &w.delivery;
            let key = execution_key(&d.execution, &d.execution_id).into_bytes();
            if let Some(frames) = self.index.executions.get(&key)
                && frames.iter().any(old)
            {
                let execution = read_execution(&self.with_readers(frames)?)?;
                executions.push(Entry::Execution {
                    execution: Box::new(execution),
                    body: false,
                });
            }
            if old(&w.frame) || old(&w.body) {
                let mut delivery = d.clone();
                delivery.body_sealed = hex::encode(read_body(&*self.reader(w.body.seg)?, w.body)?);
                again.push(Entry::Queued {
                    delivery,
                    body: None,
                });
            }
        }
        executions.extend(again);
        Ok(executions)
    }

    fn rotate_if_due(&mut self, dir: &Path) -> Result<()> {
        let full = self.active_len >= SEGMENT_BYTES;
        let old = self.active_len > 0 && self.active_since.elapsed() >= self.rotate_after;
        if !(full || old) {
            return Ok(());
        }
        self.active.sync_data().map_err(write_error)?;
        let seg = self.active_seg + 1;
        let file = create_segment(dir, seg).map_err(StoreError::Other)?;
        let reader = File::open(segment_path(dir, seg)).map_err(write_error)?;
        self.readers.insert(seg, Arc::new(reader));
        self.active = Arc::new(file);
        self.active_seg = seg;
        self.active_len = 0;
        self.active_since = Instant::now();
        Ok(())
    }
}

/// A body to write in an entry's frame, and the sealed text it came from
/// (for later entries of the commit to refer to).
struct Body {
    bytes: Vec<u8>,
    sealed: Option<String>,
}

/// Takes the sealed body out of `entry`, for its frame's bytes, unless a
/// frame already holds it.
fn take_body(
    entry: &mut Entry,
    bodies: &HashMap<String, At>,
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
                bytes: unhex(&sealed)?,
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
                bytes: unhex(&sealed)?,
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

fn unhex(sealed: &str) -> Result<Vec<u8>> {
    hex::decode(sealed)
        .context("a sealed body that is not hex")
        .map_err(StoreError::Other)
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

/// Applies the committed entries of one segment to `index` (and notes
/// sled's writes in `redo`); truncates the segment where its valid,
/// committed data ends, with a warning.
fn replay(path: &Path, seg: u64, index: &mut Index, redo: &mut Redo) -> anyhow::Result<()> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read the journal segment {}", path.display()))?;
    let mut off = 0;
    let mut committed = 0;
    let mut pending = Vec::new();
    while let Some((payload, len)) = frame::decode(&bytes[off..]) {
        let at = At {
            seg,
            off: off as u64,
            len: len as u32,
        };
        off += len;
        let split = frame::split(payload);
        let entry = split.and_then(|(json, _)| serde_json::from_slice::<Entry>(json).ok());
        match entry {
            Some(Entry::Commit) => {
                for (entry, at) in pending.drain(..) {
                    match entry {
                        Entry::Sled { writes } => redo.writes.push((at, writes)),
                        Entry::Checkpoint { seg, off } => redo.checkpoint = (seg, off),
                        entry => index.apply(entry, at),
                    }
                }
                committed = off;
            }
            Some(Entry::Sled { .. }) => {
                let body = split.map(|(_, body)| body.to_vec()).unwrap_or_default();
                pending.push((Entry::Sled { writes: body }, at));
            }
            Some(entry) => pending.push((entry, at)),
            None => {
                tracing::error!(segment = %path.display(), offset = at.off, "a journal record that cannot be read; set aside");
            }
        }
    }
    if committed < bytes.len() {
        tracing::warn!(
            segment = %path.display(),
            kept = committed,
            dropped = bytes.len() - committed,
            "the journal ends in a commit cut short (a crash mid-write); dropping it"
        );
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(committed as u64)?;
        file.sync_all()?;
    }
    Ok(())
}

/// An execution read from its frames: the record, then its attempts.
fn read_execution(frames: &[(At, Arc<File>)]) -> Result<Execution> {
    let mut entries = frames.iter().map(|(at, file)| read_entry(file, *at));
    let Some(first) = entries.next() else {
        return Err(corrupt("an execution with no record"));
    };
    let (Entry::Execution { mut execution, .. }, body) = first? else {
        return Err(corrupt("an execution's first record is not an execution"));
    };
    if !body.is_empty() {
        execution.body_sealed = Some(hex::encode(body));
    }
    let attempts = entries.map(|e| e.map(|(entry, _)| entry));
    Ok(fold(*execution, attempts.collect::<Result<Vec<_>>>()?))
}

fn read_body(file: &File, at: At) -> Result<Vec<u8>> {
    let (_, body) = read_frame(file, at)?;
    Ok(body)
}

fn read_entry(file: &File, at: At) -> Result<(Entry, Vec<u8>)> {
    let (json, body) = read_frame(file, at)?;
    let entry = serde_json::from_slice(&json)
        .context("reading a journal record")
        .map_err(StoreError::Other)?;
    Ok((entry, body))
}

/// The JSON and body of the frame at `at`.
fn read_frame(file: &File, at: At) -> Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = vec![0; at.len as usize];
    file.read_exact_at(&mut buf, at.off).map_err(write_error)?;
    let (json, body) = frame::split(frame::payload(&buf)).ok_or_else(|| {
        corrupt(&format!(
            "a damaged journal record at {}:{}",
            at.seg, at.off
        ))
    })?;
    Ok((json.to_vec(), body.to_vec()))
}

/// The segment numbers in `dir`, in order.
fn segments(dir: &Path) -> anyhow::Result<Vec<u64>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if let Some(seg) = name.strip_suffix(".log").and_then(|n| n.parse().ok()) {
            found.push(seg);
        }
    }
    found.sort_unstable();
    Ok(found)
}

fn segment_path(dir: &Path, seg: u64) -> PathBuf {
    dir.join(format!("{seg:016}.log"))
}

/// A new, empty segment; its directory entry made durable.
fn create_segment(dir: &Path, seg: u64) -> anyhow::Result<File> {
    let path = segment_path(dir, seg);
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot create the journal segment {}", path.display()))?;
    File::open(dir)?.sync_all()?;
    Ok(file)
}

/// A failed write: a full disk is the store being unavailable (503, and
/// nothing acknowledged is lost), anything else an I/O error.
fn write_error(e: std::io::Error) -> StoreError {
    // ENOSPC, EDQUOT
    if matches!(e.raw_os_error(), Some(28 | 122)) {
        tracing::error!(error = %e, "the journal cannot be written: the disk is full");
        return StoreError::Unavailable;
    }
    StoreError::Other(anyhow::Error::new(e).context("writing the journal"))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Other(anyhow::anyhow!("{what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Attempt, Status};
    use crate::store::contract::{delivery, event, execution};

    const BODY: &str = "abcdef0123456789";

    /// What matching one event writes: the event out of the inbox, its
    /// execution and its delivery, one body between them.
    fn fired(id: &str) -> Vec<Entry> {
        let mut execution = execution(id, 1);
        let mut delivery = delivery(&format!("d_{id}"), 5);
        delivery.execution_id = execution.id.clone();
        delivery.body_sealed = BODY.into();
        execution.body_sealed = Some(BODY.into());
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

    fn attempted(id: &str) -> Vec<Entry> {
        let e = execution(id, 1);
        vec![
            Entry::Settled {
                id: format!("d_{id}"),
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
        execution_key(&e.automation, &e.id).into_bytes()
    }

    fn due(journal: &Journal) -> Vec<Delivery> {
        journal.due(u64::MAX, usize::MAX, &|_| false).unwrap().0
    }

    fn bytes_on_disk(dir: &Path) -> Vec<u8> {
        segments(dir)
            .unwrap()
            .iter()
            .flat_map(|seg| std::fs::read(segment_path(dir, *seg)).unwrap())
            .collect()
    }

    use crate::model::Delivery;

    #[test]
    fn records_survive_a_reopen_and_a_body_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        {
            let journal = Journal::open(dir.path()).unwrap().0;
            journal.append(vec![arrived("ev_a", 1)]).unwrap();
            journal.append(vec![arrived("ev_b", 2)]).unwrap();
            journal.append(fired("a")).unwrap();
            journal.append(fired("b")).unwrap();
            journal.append(attempted("b")).unwrap();
            journal.sync().unwrap();
        }
        let journal = Journal::open(dir.path()).unwrap().0;
        assert!(journal.inbox().is_empty());
        let waiting = due(&journal);
        assert_eq!(waiting.len(), 1, "b was settled");
        assert_eq!(
            (waiting[0].id.as_str(), waiting[0].body_sealed.as_str()),
            ("d_a", BODY)
        );
        let a = journal.execution(&key("a")).unwrap().unwrap();
        assert_eq!((a.status, a.attempts.len()), (Status::Pending, 0));
        assert_eq!(a.body_sealed.as_deref(), Some(BODY));
        let b = journal.execution(&key("b")).unwrap().unwrap();
        assert_eq!(
            (b.status, b.attempts.len(), b.updated_at_ms),
            (Status::Finished, 1, 9)
        );
        let body = hex::decode(BODY).unwrap();
        let disk = bytes_on_disk(dir.path());
        let copies = disk.windows(body.len()).filter(|w| *w == body).count();
        assert_eq!(copies, 2, "one body each for a and b, as bytes");
        assert!(!String::from_utf8_lossy(&disk).contains(BODY), "not as hex");
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
        let disk = bytes_on_disk(dir.path());
        assert_eq!(disk.windows(body.len()).filter(|w| *w == body).count(), 2);
        assert_eq!(due(&journal)[0].body_sealed, BODY);
        assert_eq!(journal.first_due(), Some(50));
    }

    /// A commit cut at any byte, or with any byte flipped, vanishes whole;
    /// everything committed before it stays, and the file is truncated to it.
    #[test]
    fn a_torn_tail_is_dropped_and_every_acknowledged_record_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (acknowledged, whole) = {
            let journal = Journal::open(dir.path()).unwrap().0;
            journal.append(vec![arrived("ev_a", 1)]).unwrap();
            journal.append(fired("a")).unwrap();
            journal.sync().unwrap();
            let acknowledged = bytes_on_disk(dir.path());
            let mut tail = vec![arrived("ev_b", 2)];
            tail.extend(fired("b"));
            journal.append(tail).unwrap();
            (acknowledged, bytes_on_disk(dir.path()))
        };
        let check = |bytes: &[u8], whole_tail: bool, what: &str| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(segment_path(dir.path(), 1), bytes).unwrap();
            let journal = Journal::open(dir.path()).unwrap().0;
            assert!(journal.execution(&key("a")).unwrap().is_some(), "{what}");
            let ids: Vec<String> = due(&journal).into_iter().map(|d| d.id).collect();
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
            let kept = std::fs::metadata(segment_path(dir.path(), 1))
                .unwrap()
                .len() as usize;
            let expected_len = if whole_tail {
                whole.len()
            } else {
                acknowledged.len()
            };
            assert_eq!(kept, expected_len, "{what}: truncated to the last commit");
            // What is left is whole: it opens again as it is.
            drop(journal);
            let again = Journal::open(dir.path()).unwrap().0;
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

    #[test]
    fn expiry_drops_old_segments_and_keeps_what_still_waits() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap().0;
        journal.append(vec![arrived("ev_a", 1)]).unwrap();
        journal.append(fired("a")).unwrap();
        journal.append(fired("b")).unwrap();
        journal.append(attempted("b")).unwrap();
        journal.append(vec![arrived("ev_c", 3)]).unwrap();
        // Close the segment, as time would, then age it.
        journal.state().rotate_after = Duration::ZERO;
        journal.append(vec![arrived("ev_d", 4)]).unwrap();
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(segment_path(dir.path(), 1))
            .unwrap()
            .set_modified(hour_ago - Duration::from_secs(60))
            .unwrap();
        assert_eq!(journal.expire(hour_ago).unwrap(), 1, "b, settled, went");
        assert!(!segment_path(dir.path(), 1).exists());
        let check = |journal: &Journal| {
            assert!(journal.execution(&key("b")).unwrap().is_none());
            let a = journal.execution(&key("a")).unwrap().unwrap();
            assert_eq!(
                a.body_sealed.as_deref(),
                Some(BODY),
                "a's delivery still waits"
            );
            let waiting = due(journal);
            assert_eq!((waiting.len(), waiting[0].body_sealed.as_str()), (1, BODY));
            let inbox: Vec<String> = journal.inbox().into_iter().map(|e| e.id).collect();
            assert_eq!(inbox, ["ev_c", "ev_d"]);
        };
        check(&journal);
        assert_eq!(journal.expire(hour_ago).unwrap(), 0, "nothing more is old");
        drop(journal);
        check(&Journal::open(dir.path()).unwrap().0);
    }
}
