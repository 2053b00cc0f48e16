//! The index, kept in a tree (`tree.rs`) at every checkpoint, so that a
//! start reads the journal only from the checkpoint on: what it costs
//! follows the records still waiting, not the history.
//!
//! The tree holds, under one-byte prefixes: `p`, where the snapshot stands
//! in the journal ([`Position`]); `i` + event id, a waiting event and its
//! frame; `o` + delivery id, a waiting delivery and where its frames are.
//! Executions are not in the tree: the segments' piece logs and indexes
//! hold where they are (`pieces.rs`, `sealed.rs`). Only what changed since
//! the last snapshot is written, the position with it, as one batch.

use std::collections::{BTreeMap, HashSet};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::index::{At, Index, Waiting};
use super::tree::{Batch, Tree};
use crate::model::{DeliveryId, Event};

/// The key of the snapshot's [`Position`].
pub const POSITION: &[u8] = b"p";
const INBOX: u8 = b'i';
const OUTBOX: u8 = b'o';

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
    /// How long each segment's piece log was (`pieces.rs`).
    pub pieces: BTreeMap<u64, u64>,
}

fn key(kind: u8, id: &str) -> Vec<u8> {
    [&[kind], id.as_bytes()].concat()
}

/// The snapshot in `tree`: where it stands, and the waiting records as an
/// index.
pub fn load(tree: &Tree) -> anyhow::Result<Option<(Position, Index)>> {
    let Some(position) = tree.get(POSITION)? else {
        return Ok(None);
    };
    let position: Position =
        serde_json::from_slice(&position).context("reading the journal index's position")?;
    let mut index = Index::default();
    for (_, value) in tree.scan(&[INBOX]) {
        let (event, at): (Event, At) =
            serde_json::from_slice(&value).context("reading a waiting event in the index")?;
        index.kept.events.insert(event.id.clone());
        index.inbox.insert(event.id.clone(), (event, at));
    }
    for (_, value) in tree.scan(&[OUTBOX]) {
        let waiting: Waiting =
            serde_json::from_slice(&value).context("reading a waiting delivery in the index")?;
        index.kept.deliveries.insert(waiting.delivery.id.clone());
        index.wait(waiting);
    }
    Ok(Some((position, index)))
}

/// What to write of the waiting records for `index` in the tree: what
/// changed since the last snapshot, or all of them (and no other) when
/// `kept.all`.
pub fn records(index: &Index, tree: &Tree) -> anyhow::Result<Batch> {
    let mut batch = Batch::new();
    if index.kept.all {
        for prefix in [INBOX, OUTBOX] {
            for (key, _) in tree.scan(&[prefix]) {
                batch.insert(key, None);
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
    let deliveries: Box<dyn Iterator<Item = &DeliveryId>> = if index.kept.all {
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
        batch.insert(key(OUTBOX, id.as_str()), value);
    }
    Ok(batch)
}

/// Notes that the tree is to hold `records`: the changes they hold are
/// no longer to write.
pub fn written(index: &mut Index, records: &Batch) {
    index.changed = Default::default();
    index.kept.all = false;
    for (key, value) in records {
        let (kind, id) = match key.split_first() {
            Some((&kind, id)) => (kind, String::from_utf8_lossy(id).into_owned()),
            None => continue,
        };
        let kept = value.is_some();
        match kind {
            INBOX => note(&mut index.kept.events, id, kept),
            OUTBOX => note(&mut index.kept.deliveries, id.into(), kept),
            _ => {}
        }
    }
}

/// Whether the tree holds `id` now.
fn note<T: std::hash::Hash + Eq>(set: &mut HashSet<T>, id: T, kept: bool) {
    if kept {
        set.insert(id);
    } else {
        set.remove(&id);
    }
}

/// `frames` in journal order, each once: a snapshot cut short by a crash
/// may have written some of them already, before the position that says
/// so, and the start reads them again.
pub fn in_order(mut frames: Vec<At>) -> Vec<At> {
    frames.sort_by_key(|at| (at.seg, at.off));
    frames.dedup();
    frames
}
