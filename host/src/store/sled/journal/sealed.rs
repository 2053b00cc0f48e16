//! The index of a closed segment: for each execution with a frame in it,
//! those frames, and whether the first is the execution's record (then
//! older segments hold nothing more of it) or only attempts. Written by
//! the checkpointer once the segment is closed and snapshotted, from the
//! snapshot's tree (which holds the same until then), beside it as
//! `NNNN.idx`, one frame of `frame.rs` (so checked), and gone with it.
//! Derived data: one that does not read is built again from the segment.
//!
//! The history's index thus lives on disk, a file per segment: a start
//! reads none of it, and memory holds only the few last read.

use std::sync::Arc;

use anyhow::Context;

use super::index::{At, Frames, Index};
use super::{Disk, Redo, Replayed, frame, replay};

/// An execution's frames in one segment; `whole` when they start with its
/// record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub whole: bool,
    pub frames: Vec<At>,
}

/// A closed segment's index, sorted by execution key.
#[derive(Debug, Default)]
pub struct Sealed {
    entries: Vec<(Vec<u8>, Piece)>,
}

impl Sealed {
    /// An index of `entries`, sorted by key.
    pub fn from(entries: Vec<(Vec<u8>, Piece)>) -> Sealed {
        Sealed { entries }
    }

    /// Its entries, sorted by key.
    pub fn into_entries(self) -> Vec<(Vec<u8>, Piece)> {
        self.entries
    }

    /// The piece of the execution under `key`.
    pub fn get(&self, key: &[u8]) -> Option<&Piece> {
        let i = self
            .entries
            .binary_search_by(|(k, _)| k.as_slice().cmp(key))
            .ok()?;
        Some(&self.entries[i].1)
    }

    /// The keys under `prefix` whose piece is whole, highest first.
    pub fn whole_under(&self, prefix: &[u8]) -> impl Iterator<Item = &[u8]> {
        let from = self.entries.partition_point(|(k, _)| k.as_slice() < prefix);
        self.entries[from..]
            .iter()
            .take_while(move |(k, _)| k.starts_with(prefix))
            .filter(|(_, p)| p.whole)
            .map(|(k, _)| k.as_slice())
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
    }
}

pub fn name(seg: u64) -> String {
    format!("{seg:016}.idx")
}

/// The index of segment `seg`, read from its frames.
pub fn build(disk: &dyn Disk, seg: u64) -> anyhow::Result<Sealed> {
    let mut index = Index::default();
    index.kept.all = true;
    let mut replayed = Replayed::default();
    replay(
        disk,
        (seg, 0),
        false,
        &mut replayed,
        &mut index,
        &mut Redo::default(),
    )?;
    let entries = std::mem::take(&mut index.executions)
        .into_iter()
        .map(|(key, frames)| {
            let piece = match frames {
                Frames::Whole(frames) => Piece {
                    whole: true,
                    frames,
                },
                Frames::More(frames) => Piece {
                    whole: false,
                    frames,
                },
            };
            (key, piece)
        })
        .collect();
    Ok(Sealed { entries })
}

/// Writes `sealed` as segment `seg`'s index, durably.
pub fn write(disk: &dyn Disk, seg: u64, sealed: &Sealed) -> std::io::Result<()> {
    let body = encode_entries(&sealed.entries);
    let mut out = Vec::with_capacity(body.len() + frame::HEADER + 16);
    let json = format!(r#"{{"segment":{seg}}}"#);
    frame::encode(&mut out, 0, 0, json.as_bytes(), &body)
        .ok_or_else(|| std::io::Error::other("a segment's index is too large"))?;
    let name = name(seg);
    disk.create(&name)?;
    disk.write_at(&name, 0, &out)?;
    disk.sync(&name)?;
    disk.sync_dir()
}

/// `entries` as bytes: per entry, the key's length (u16) and the key,
/// whole (1 or 0), how many frames (u32), then each frame's offset (u64)
/// and length (u32); little-endian. The segment is implied.
pub fn encode_entries(entries: &[(Vec<u8>, Piece)]) -> Vec<u8> {
    let mut body = Vec::with_capacity(entries.len() * 96);
    for (key, piece) in entries {
        body.extend_from_slice(&(key.len() as u16).to_le_bytes());
        body.extend_from_slice(key);
        body.push(u8::from(piece.whole));
        body.extend_from_slice(&(piece.frames.len() as u32).to_le_bytes());
        for at in &piece.frames {
            body.extend_from_slice(&at.off.to_le_bytes());
            body.extend_from_slice(&at.len.to_le_bytes());
        }
    }
    body
}

/// The entries [`encode_entries`] wrote, their frames in segment `seg`.
pub fn decode_entries(mut body: &[u8], seg: u64) -> anyhow::Result<Vec<(Vec<u8>, Piece)>> {
    let mut entries = Vec::new();
    while !body.is_empty() {
        let key_len = number(take(&mut body, 2)?) as usize;
        let key = take(&mut body, key_len)?.to_vec();
        let whole = take(&mut body, 1)?[0] == 1;
        let n = number(take(&mut body, 4)?) as usize;
        let mut frames = Vec::with_capacity(n);
        for _ in 0..n {
            let off = number(take(&mut body, 8)?);
            let len = number(take(&mut body, 4)?) as u32;
            frames.push(At { seg, off, len });
        }
        entries.push((key, Piece { whole, frames }));
    }
    Ok(entries)
}

/// Reads segment `seg`'s index: `None` if it is missing or does not read
/// (then it is built again).
pub fn read(disk: &dyn Disk, seg: u64) -> Option<Arc<Sealed>> {
    let bytes = disk.read(&name(seg)).ok()?;
    match decode(&bytes, seg) {
        Ok(sealed) => Some(Arc::new(sealed)),
        Err(e) => {
            tracing::warn!(index = %name(seg), error = %e, "a segment's index does not read; building it again");
            None
        }
    }
}

fn decode(bytes: &[u8], seg: u64) -> anyhow::Result<Sealed> {
    let frame::Read::Frame { payload, .. } = frame::decode(bytes) else {
        anyhow::bail!("not a whole index");
    };
    let (_, body) = frame::split(payload).context("an index cut short")?;
    Ok(Sealed {
        entries: decode_entries(body, seg)?,
    })
}

/// The next `n` bytes of `body`.
fn take<'a>(body: &mut &'a [u8], n: usize) -> anyhow::Result<&'a [u8]> {
    anyhow::ensure!(body.len() >= n, "an index entry cut short");
    let (head, rest) = body.split_at(n);
    *body = rest;
    Ok(head)
}

/// A little-endian number.
fn number(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0, |n, byte| (n << 8) | u64::from(*byte))
}

/// Segment `seg`'s index: read, or built from the segment and written.
pub fn load(disk: &dyn Disk, seg: u64) -> anyhow::Result<Arc<Sealed>> {
    if let Some(sealed) = read(disk, seg) {
        return Ok(sealed);
    }
    let sealed = build(disk, seg)?;
    write(disk, seg, &sealed)
        .with_context(|| format!("cannot write the journal index {}", name(seg)))?;
    Ok(Arc::new(sealed))
}
