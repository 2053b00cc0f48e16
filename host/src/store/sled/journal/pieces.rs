//! Where the executions of segments without an index of their own yet
//! (`sealed.rs`) are, between starts: the active segment, mostly. Each
//! snapshot appends the executions it froze to one log per segment,
//! `NNNN.pcs`, as one checked frame (`frame.rs`) of [`Piece`]s, synced
//! before the snapshot's position names the log's new length. A start
//! cuts each log back to the length its snapshot names: what follows
//! belongs to a snapshot that never became durable, and the start reads
//! it again from the journal. A log is read into memory when first looked
//! up, and goes once its segment's index is written.
//!
//! Files, not the snapshot's tree: a key per execution made sled's pages
//! (and its start) grow with the history, and cost each commit a write.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use anyhow::Context;

use super::disk::Disk;
use super::frame;
use super::index::Frames;
use super::sealed::{self, Piece, Sealed};
use super::snapshot::in_order;

/// The piece logs, by segment.
#[derive(Default)]
pub struct Pieces {
    logs: Mutex<BTreeMap<u64, Log>>,
}

/// One segment's log: its length, durable, and what it holds once read.
#[derive(Default)]
struct Log {
    len: u64,
    read: Option<BTreeMap<Vec<u8>, Piece>>,
}

pub fn name(seg: u64) -> String {
    format!("{seg:016}.pcs")
}

fn seg_of(name: &str) -> Option<u64> {
    name.strip_suffix(".pcs")?.parse().ok()
}

impl Pieces {
    /// The logs on `disk`, each cut back to the length `lengths` names;
    /// any other is removed (a segment indexed since, or a log begun after
    /// the snapshot). One missing or shorter is built again when read.
    pub fn open(disk: &dyn Disk, lengths: &BTreeMap<u64, u64>) -> anyhow::Result<Pieces> {
        for name in disk.list().context("cannot list the journal's directory")? {
            let Some(seg) = seg_of(&name) else {
                continue;
            };
            let cut = match lengths.get(&seg) {
                Some(len) => disk
                    .read_from(&name, *len)
                    .is_ok_and(|past| !past.is_empty())
                    .then(|| disk.set_len(&name, *len).and_then(|()| disk.sync(&name))),
                None => Some(disk.remove(&name)),
            };
            cut.transpose()
                .with_context(|| format!("cannot cut back the journal index {name}"))?;
        }
        let logs = lengths
            .iter()
            .map(|(seg, len)| {
                (
                    *seg,
                    Log {
                        len: *len,
                        read: None,
                    },
                )
            })
            .collect();
        Ok(Pieces {
            logs: Mutex::new(logs),
        })
    }

    fn logs(&self) -> MutexGuard<'_, BTreeMap<u64, Log>> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Each log's length, for the snapshot's position.
    pub fn lengths(&self) -> BTreeMap<u64, u64> {
        self.logs()
            .iter()
            .map(|(seg, log)| (*seg, log.len))
            .collect()
    }

    /// Appends `executions` (frozen by a snapshot), a piece per execution
    /// and segment, durably; when `whole` (they are every execution there
    /// is), each log is written anew and logs of other segments go.
    pub fn write(
        &self,
        disk: &dyn Disk,
        executions: &BTreeMap<Vec<u8>, Frames>,
        whole: bool,
    ) -> std::io::Result<()> {
        let by_segment = split(executions);
        let mut logs = self.logs();
        if whole {
            for seg in logs.keys().copied().collect::<Vec<_>>() {
                if !by_segment.contains_key(&seg) {
                    logs.remove(&seg);
                    disk.remove(&name(seg))?;
                }
            }
        }
        for (seg, entries) in by_segment {
            let name = name(seg);
            let mut out = Vec::new();
            let json = format!(r#"{{"segment":{seg}}}"#);
            frame::encode(
                &mut out,
                0,
                0,
                json.as_bytes(),
                &sealed::encode_entries(&entries),
            )
            .ok_or_else(|| std::io::Error::other("a snapshot's index is too large"))?;
            let fresh = whole || !logs.contains_key(&seg);
            if fresh {
                disk.create(&name)?;
                logs.insert(seg, Log::default());
            }
            let log = logs.get_mut(&seg).expect("inserted");
            disk.write_at(&name, log.len, &out)?;
            disk.sync(&name)?;
            if fresh {
                disk.sync_dir()?;
            }
            log.len += out.len() as u64;
            if whole {
                log.read = Some(BTreeMap::new());
            }
            if let Some(read) = &mut log.read {
                merge(read, entries);
            }
        }
        Ok(())
    }

    /// Calls `f` with segment `seg`'s pieces, its log read first if need
    /// be (built from the segment if it does not read: it is derived).
    fn with<R>(
        &self,
        disk: &dyn Disk,
        seg: u64,
        f: impl FnOnce(&BTreeMap<Vec<u8>, Piece>) -> R,
    ) -> anyhow::Result<R> {
        let mut logs = self.logs();
        let Some(log) = logs.get_mut(&seg) else {
            return Ok(f(&BTreeMap::new()));
        };
        if log.read.is_none() {
            log.read = Some(match read(disk, seg, log.len) {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(index = %name(seg), error = %e, "a journal index does not read; building it from its segment");
                    sealed::build(disk, seg)?
                        .into_entries()
                        .into_iter()
                        .collect()
                }
            });
        }
        Ok(f(log.read.as_ref().expect("read")))
    }

    /// The piece of segment `seg` of the execution under `key`.
    pub fn get(&self, disk: &dyn Disk, seg: u64, key: &[u8]) -> anyhow::Result<Option<Piece>> {
        self.with(disk, seg, |read| read.get(key).cloned())
    }

    /// Segment `seg`'s pieces under `prefix`, in key order.
    pub fn under(
        &self,
        disk: &dyn Disk,
        seg: u64,
        prefix: &[u8],
    ) -> anyhow::Result<Vec<(Vec<u8>, Piece)>> {
        self.with(disk, seg, |read| {
            read.range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, p)| (k.clone(), p.clone()))
                .collect()
        })
    }

    /// Segment `seg`'s pieces as its index.
    pub fn sealed(&self, disk: &dyn Disk, seg: u64) -> anyhow::Result<Sealed> {
        Ok(Sealed::from(self.under(disk, seg, b"")?))
    }

    /// Removes segment `seg`'s log (its index holds it now, or it is gone).
    pub fn forget(&self, disk: &dyn Disk, seg: u64) -> std::io::Result<()> {
        if self.logs().remove(&seg).is_some() {
            disk.remove(&name(seg))?;
        }
        Ok(())
    }
}

/// `executions`' frames as a piece per segment; only the first piece of
/// one can start with its record.
fn split(executions: &BTreeMap<Vec<u8>, Frames>) -> BTreeMap<u64, Vec<(Vec<u8>, Piece)>> {
    let mut by_segment: BTreeMap<u64, Vec<(Vec<u8>, Piece)>> = BTreeMap::new();
    for (key, frames) in executions {
        let (record, frames) = match frames {
            Frames::Whole(frames) => (true, frames),
            Frames::More(frames) => (false, frames),
        };
        for (i, run) in frames.chunk_by(|a, b| a.seg == b.seg).enumerate() {
            let piece = Piece {
                whole: record && i == 0,
                frames: run.to_vec(),
            };
            by_segment
                .entry(run[0].seg)
                .or_default()
                .push((key.clone(), piece));
        }
    }
    by_segment
}

/// Adds `entries` (written later) to `read`: a piece holding the record
/// replaces what came before; one of attempts only follows it.
fn merge(read: &mut BTreeMap<Vec<u8>, Piece>, entries: Vec<(Vec<u8>, Piece)>) {
    for (key, piece) in entries {
        match read.get_mut(&key) {
            Some(base) if !piece.whole => {
                let frames = std::mem::take(&mut base.frames);
                base.frames = in_order([frames, piece.frames].concat());
            }
            _ => {
                read.insert(key, piece);
            }
        }
    }
}

/// Segment `seg`'s log, its first `len` bytes, merged.
fn read(disk: &dyn Disk, seg: u64, len: u64) -> anyhow::Result<BTreeMap<Vec<u8>, Piece>> {
    let bytes = disk.read(&name(seg))?;
    let mut bytes = bytes
        .get(..len as usize)
        .context("a log shorter than its snapshot says")?;
    let mut read = BTreeMap::new();
    while !bytes.is_empty() {
        let frame::Read::Frame { payload, len, .. } = frame::decode(bytes) else {
            anyhow::bail!("a frame that does not read");
        };
        let (_, body) = frame::split(payload).context("a frame cut short")?;
        merge(&mut read, sealed::decode_entries(body, seg)?);
        bytes = &bytes[len..];
    }
    Ok(read)
}
