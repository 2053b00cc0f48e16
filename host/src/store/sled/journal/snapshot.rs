//! The index, kept in a tree (`tree.rs`, sled's in the store) at every
//! checkpoint, so that a start reads the journal only from the checkpoint
//! on: what it costs follows the records still waiting, not the history.
//!
//! The tree holds, under one-byte prefixes: `p`, where the snapshot stands
//! in the journal ([`Position`]); `i` + event id, a waiting event and its
//! frame; `o` + delivery id, a waiting delivery and where its frames are;
//! `x` + segment (8 bytes, big-endian) + execution key, an execution's
//! frames in that segment ([`Piece`]), for segments whose own index
//! (`sealed.rs`) is not written yet: the active one, mostly, so the tree
//! stays the size of a segment's history. Only what changed since the last
//! snapshot is written, key by key (sled's atomic batches stop the whole
//! store while they apply), the position last, and flushed with sled at
//! the next checkpoint. A crash may keep some of a snapshot's keys without
//! its position: the start then reads from the older position and meets
//! those changes again, which a waiting record takes as it is and an
//! execution's frames take once ([`in_order`]).

use std::collections::BTreeMap;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::index::{At, Frames, Index, Waiting};
use super::sealed::Piece;
use super::tree::{Batch, Tree};
use crate::model::Event;

/// The key of the snapshot's [`Position`].
pub const POSITION: &[u8] = b"p";
const INBOX: u8 = b'i';
const OUTBOX: u8 = b'o';
const EXECUTION: u8 = b'x';

/// Where a snapshot stands: the index it holds is the journal's before
/// the frame at (`seg`, `off`), numbered `next_seq`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Position {
    pub seg: u64,
    pub off: u64,
    pub next_seq: u64,
    /// When each segment before `seg` was closed (see `State::segments`).
    pub closed: BTreeMap<u64, Option<u64>>,
    /// Segments of format 1.
    pub legacy: Vec<u64>,
}

/// The key of an execution's piece of segment `seg`.
pub fn piece_key(seg: u64, key: &[u8]) -> Vec<u8> {
    [&[EXECUTION][..], &seg.to_be_bytes(), key].concat()
}

fn key(kind: u8, id: &str) -> Vec<u8> {
    [&[kind], id.as_bytes()].concat()
}

/// A piece as stored: whole (1 or 0), then 20 bytes a frame.
fn encode_piece(piece: &Piece) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + piece.frames.len() * 20);
    out.push(u8::from(piece.whole));
    for at in &piece.frames {
        out.extend_from_slice(&at.seg.to_le_bytes());
        out.extend_from_slice(&at.off.to_le_bytes());
        out.extend_from_slice(&at.len.to_le_bytes());
    }
    out
}

pub fn decode_piece(bytes: &[u8]) -> anyhow::Result<Piece> {
    let Some((whole, frames)) = bytes.split_first() else {
        anyhow::bail!("an empty execution record in the journal's index");
    };
    anyhow::ensure!(
        frames.len() % 20 == 0,
        "an execution's frames in the journal's index are cut short"
    );
    let frames = frames
        .chunks_exact(20)
        .map(|c| At {
            seg: u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
            off: u64::from_le_bytes(c[8..16].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(c[16..].try_into().expect("4 bytes")),
        })
        .collect();
    Ok(Piece {
        whole: *whole == 1,
        frames,
    })
}

/// The snapshot in `tree`: where it stands, and the waiting records as an
/// index (executions stay in the tree).
pub fn load(tree: &dyn Tree) -> anyhow::Result<Option<(Position, Index)>> {
    let Some(position) = tree.get(POSITION)? else {
        return Ok(None);
    };
    let position: Position =
        serde_json::from_slice(&position).context("reading the journal index's position")?;
    let mut index = Index::default();
    for pair in tree.scan(&[INBOX], false) {
        let (_, value) = pair?;
        let (event, at): (Event, At) =
            serde_json::from_slice(&value).context("reading a waiting event in the index")?;
        index.kept.events.insert(event.id.clone());
        index.inbox.insert(event.id.clone(), (event, at));
    }
    for pair in tree.scan(&[OUTBOX], false) {
        let (_, value) = pair?;
        let waiting: Waiting =
            serde_json::from_slice(&value).context("reading a waiting delivery in the index")?;
        let id = waiting.delivery.id.clone();
        index.kept.deliveries.insert(id.clone());
        index.due_of.insert(id.clone(), waiting.delivery.due_ms);
        index.outbox.insert((waiting.delivery.due_ms, id), waiting);
    }
    Ok(Some((position, index)))
}

/// What to write of the waiting records for `index` to stand at
/// `position` in the tree: what changed since the last snapshot, or all of
/// them (and no other) when `kept.all`; and the position.
pub fn records(index: &Index, tree: &dyn Tree, position: &Position) -> anyhow::Result<Batch> {
    let mut batch = Batch::new();
    if index.kept.all {
        for prefix in [INBOX, OUTBOX] {
            for pair in tree.scan(&[prefix], false) {
                batch.insert(pair?.0, None);
            }
        }
    }
    let events: Box<dyn Iterator<Item = &String>> = if index.kept.all {
        Box::new(index.inbox.keys())
    } else {
        Box::new(index.changed.events.iter())
    };
    for id in events {
        let value = match index.inbox.get(id) {
            Some(record) => Some(serde_json::to_vec(record)?),
            None if index.kept.events.contains(id) => None,
            None => continue,
        };
        batch.insert(key(INBOX, id), value);
    }
    let deliveries: Box<dyn Iterator<Item = &String>> = if index.kept.all {
        Box::new(index.due_of.keys())
    } else {
        Box::new(index.changed.deliveries.iter())
    };
    for id in deliveries {
        let waiting = index
            .due_of
            .get(id)
            .and_then(|due| index.outbox.get(&(*due, id.clone())));
        let value = match waiting {
            Some(waiting) => Some(serde_json::to_vec(waiting)?),
            None if index.kept.deliveries.contains(id) => None,
            None => continue,
        };
        batch.insert(key(OUTBOX, id), value);
    }
    batch.insert(POSITION.to_vec(), Some(serde_json::to_vec(position)?));
    Ok(batch)
}

/// What to write of `executions` (frozen by a snapshot): one piece per
/// execution and segment, added to the piece the tree holds, or, when
/// memory holds the `whole` index, in place of every piece it holds.
pub fn pieces(
    executions: &BTreeMap<Vec<u8>, Frames>,
    whole: bool,
    tree: &dyn Tree,
) -> anyhow::Result<Batch> {
    let mut batch = Batch::new();
    if whole {
        for pair in tree.scan(&[EXECUTION], false) {
            batch.insert(pair?.0, None);
        }
    }
    for (key, frames) in executions {
        let (record, frames) = match frames {
            Frames::Whole(frames) => (true, frames),
            Frames::More(frames) => (false, frames),
        };
        // One piece a segment; only the first can start with the record.
        for (i, run) in frames.chunk_by(|a, b| a.seg == b.seg).enumerate() {
            let pkey = piece_key(run[0].seg, key);
            let mut piece = Piece {
                whole: record && i == 0,
                frames: run.to_vec(),
            };
            let base = match whole || piece.whole {
                true => None,
                false => tree.get(&pkey)?,
            };
            if let Some(base) = base {
                let base = decode_piece(&base)?;
                piece = Piece {
                    whole: base.whole,
                    frames: in_order([base.frames, piece.frames].concat()),
                };
            }
            batch.insert(pkey, Some(encode_piece(&piece)));
        }
    }
    Ok(batch)
}

/// Notes that the tree is to hold `records`: the changes they hold are
/// no longer to write.
pub fn written(index: &mut Index, records: &Batch) {
    index.changed = Default::default();
    index.kept.all = false;
    for (key, value) in records {
        let (kept, id) = match key.split_first() {
            Some((&INBOX, id)) => (&mut index.kept.events, id),
            Some((&OUTBOX, id)) => (&mut index.kept.deliveries, id),
            _ => continue,
        };
        let id = String::from_utf8_lossy(id).into_owned();
        match value {
            Some(_) => kept.insert(id),
            None => kept.remove(&id),
        };
    }
}

/// The pieces of segment `seg` under `prefix` in the tree, in key order
/// (highest first when `rev`), keys without the tree's prefix.
pub fn pieces_under<'a>(
    tree: &'a dyn Tree,
    seg: u64,
    prefix: &[u8],
    rev: bool,
) -> impl Iterator<Item = anyhow::Result<(Vec<u8>, Piece)>> + 'a {
    tree.scan(&piece_key(seg, prefix), rev).map(|pair| {
        let (key, value) = pair?;
        Ok((key[9..].to_vec(), decode_piece(&value)?))
    })
}

/// The piece of segment `seg` of the execution under `key`.
pub fn piece(tree: &dyn Tree, seg: u64, key: &[u8]) -> anyhow::Result<Option<Piece>> {
    tree.get(&piece_key(seg, key))?
        .map(|v| decode_piece(&v))
        .transpose()
}

/// Removes every piece of segment `seg` (its own index now holds them, or
/// it is gone).
pub fn forget_segment(tree: &dyn Tree, seg: u64) -> anyhow::Result<()> {
    let mut gone = Batch::new();
    for pair in tree.scan(&piece_key(seg, b""), false) {
        gone.insert(pair?.0, None);
    }
    tree.apply(&gone)
}

/// `frames` in journal order, each once: a snapshot cut short by a crash
/// may have written some of them already, before the position that says
/// so, and the start reads them again.
pub fn in_order(mut frames: Vec<At>) -> Vec<At> {
    frames.sort_by_key(|at| (at.seg, at.off));
    frames.dedup();
    frames
}
