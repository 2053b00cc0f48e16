//! What the journal holds, in memory: the inbox, the outbox in due order,
//! and where the records of executions written since the last snapshot
//! are (older ones are in piece logs and segment indexes, `pieces.rs` and
//! `sealed.rs`). Rebuilt at
//! start from the snapshot and the segments after it, by applying every
//! committed entry in order, as commits apply them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::model::{
    Attempt, Delivery, DeliveryId, Event, Execution, ExecutionId, Handle, Status, WebhookRef,
};
use crate::store::sled::shared::execution_key;

/// Where a frame is: segment, offset, length (header included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct At {
    pub seg: u64,
    pub off: u64,
    pub len: u32,
}

/// One change, as written (the JSON of a frame). Bodies travel as the
/// frame's bytes, not in the JSON: see [`super::Journal::append`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Entry {
    /// An event into the inbox.
    Event { event: Box<Event> },
    /// An event out of the inbox.
    Taken { id: String },
    /// An execution, created or replaced; `body` when the frame carries its
    /// sealed body.
    Execution {
        execution: Box<Execution>,
        body: bool,
    },
    /// An attempt added to an execution.
    Attempt {
        automation: Handle,
        execution_id: ExecutionId,
        status: Status,
        error: Option<String>,
        attempt: Attempt,
        at_ms: u64,
    },
    /// A delivery into the outbox (or back, rescheduled). Its body is in
    /// the frame at `body`, or in this frame's bytes when `None`.
    Queued {
        delivery: Delivery,
        body: Option<At>,
    },
    /// A delivery out of the outbox.
    Settled { id: DeliveryId },
    /// A commit's writes to sled's trees, as the frame's bytes (see
    /// `sled/mod.rs`): the journal is sled's write-ahead log, so a commit
    /// is durable once the journal is, and sled is flushed only now and then.
    Sled {
        #[serde(skip)]
        writes: Vec<u8>,
    },
    /// Sled held, durably, every write logged before this place.
    Checkpoint { seg: u64, off: u64 },
    /// The segment was closed at this time (unix ms): the history's
    /// lifetime counts from here.
    Closed { at_ms: u64 },
    /// The end of a commit: the entries since the last one apply together.
    Commit,
}

/// A delivery in the outbox, its body left on disk.
#[derive(Serialize, Deserialize)]
pub struct Waiting {
    pub delivery: Delivery,
    pub frame: At,
    pub body: At,
}

/// An execution's frames written since the last snapshot.
#[derive(Debug, Clone)]
pub enum Frames {
    /// The execution, then its attempts.
    Whole(Vec<At>),
    /// Attempts, to follow the frames the snapshot holds.
    More(Vec<At>),
}

/// Which waiting records changed since the last snapshot, by id.
#[derive(Default)]
pub struct Changed {
    pub events: HashSet<String>,
    pub deliveries: HashSet<DeliveryId>,
}

/// Which waiting records the snapshot's tree holds, by id; or, when
/// `all`, that it is to be written anew (a start read the whole journal).
#[derive(Default)]
pub struct Kept {
    pub all: bool,
    pub events: HashSet<String>,
    pub deliveries: HashSet<DeliveryId>,
}

#[derive(Default)]
pub struct Index {
    /// Event id → the event and its frame.
    pub inbox: BTreeMap<String, (Event, At)>,
    /// (due ms, delivery id) → the delivery.
    pub outbox: BTreeMap<(u64, DeliveryId), Waiting>,
    /// Delivery id → its due time, the outbox's other key.
    pub due_of: HashMap<DeliveryId, u64>,
    /// Each FIFO webhook's line: the places of its waiting deliveries.
    pub lines: HashMap<WebhookRef, BTreeSet<(String, DeliveryId)>>,
    /// Execution key → its frames, for executions written since the last
    /// snapshot was taken.
    pub executions: BTreeMap<Vec<u8>, Frames>,
    /// The same, taken by the snapshot being written (`snapshot.rs`):
    /// older than `executions`, in memory until their piece logs hold
    /// them (`pieces.rs`).
    pub frozen: BTreeMap<Vec<u8>, Frames>,
    pub changed: Changed,
    pub kept: Kept,
    /// A start read the whole journal and no snapshot has been written
    /// since: memory holds the whole index, and the piece logs are stale.
    pub whole: bool,
}

impl Index {
    /// Applies one committed entry, written at `at`.
    pub fn apply(&mut self, entry: Entry, at: At) {
        match entry {
            Entry::Event { event } => {
                self.changed_event(&event.id);
                self.inbox.insert(event.id.clone(), (*event, at));
            }
            Entry::Taken { id } => {
                self.inbox.remove(&id);
                self.changed_event(&id);
            }
            Entry::Execution { execution, .. } => {
                let key = execution_key(&execution.automation, execution.id.as_str()).into_bytes();
                self.executions.insert(key, Frames::Whole(vec![at]));
            }
            Entry::Attempt {
                automation,
                execution_id,
                ..
            } => {
                let key = execution_key(&automation, execution_id.as_str()).into_bytes();
                match self
                    .executions
                    .entry(key)
                    .or_insert(Frames::More(Vec::new()))
                {
                    Frames::Whole(frames) | Frames::More(frames) => frames.push(at),
                }
            }
            Entry::Queued { delivery, body } => {
                self.settle(&delivery.id);
                self.changed_delivery(&delivery.id);
                let body = body.unwrap_or(at);
                self.wait(Waiting {
                    delivery,
                    frame: at,
                    body,
                });
            }
            Entry::Settled { id } => {
                self.settle(&id);
                self.changed_delivery(&id);
            }
            Entry::Sled { .. }
            | Entry::Checkpoint { .. }
            | Entry::Closed { .. }
            | Entry::Commit => {}
        }
    }

    /// The frames memory holds of the execution under `key`: the frozen
    /// ones, then those written since.
    pub fn memory(&self, key: &[u8]) -> Option<Frames> {
        combined(self.frozen.get(key), self.executions.get(key))
    }

    /// Moves what was written since the last snapshot to `frozen` (onto
    /// what a snapshot that failed left there).
    pub fn freeze(&mut self) {
        let active = std::mem::take(&mut self.executions);
        for (key, frames) in active {
            let merged = combined(self.frozen.get(&key), Some(&frames));
            self.frozen.insert(key, merged.expect("frames"));
        }
    }

    /// Notes a change for the next snapshot, unless it writes everything.
    fn changed_event(&mut self, id: &str) {
        if !self.kept.all {
            self.changed.events.insert(id.to_string());
        }
    }

    fn changed_delivery(&mut self, id: &DeliveryId) {
        if !self.kept.all {
            self.changed.deliveries.insert(id.clone());
        }
    }

    /// Puts a delivery in the outbox (and in its FIFO webhook's line).
    pub fn wait(&mut self, waiting: Waiting) {
        let d = &waiting.delivery;
        self.due_of.insert(d.id.clone(), d.due_ms);
        if let Some(place) = &d.fifo {
            let line = self.lines.entry(d.webhook.clone()).or_default();
            line.insert((place.clone(), d.id.clone()));
        }
        self.outbox.insert((d.due_ms, d.id.clone()), waiting);
    }

    fn settle(&mut self, id: &DeliveryId) {
        let Some((id, due)) = self.due_of.remove_entry(id) else {
            return;
        };
        let Some(waiting) = self.outbox.remove(&(due, id)) else {
            return;
        };
        let d = waiting.delivery;
        if let (Some(place), Some(line)) = (d.fifo, self.lines.get_mut(&d.webhook)) {
            line.remove(&(place, d.id));
            if line.is_empty() {
                self.lines.remove(&d.webhook);
            }
        }
    }

    /// Whether `delivery` may go now: not to a FIFO webhook, or first in
    /// its line.
    pub fn may_go(&self, delivery: &Delivery) -> bool {
        let Some(place) = &delivery.fifo else {
            return true;
        };
        let first = self.lines.get(&delivery.webhook).and_then(|l| l.first());
        first.is_none_or(|(p, id)| p == place && *id == delivery.id)
    }

    /// The frame holding the body of the delivery `id`, if it waits.
    pub fn body_of(&self, id: &DeliveryId) -> Option<At> {
        let (id, due) = self.due_of.get_key_value(id)?;
        Some(self.outbox.get(&(*due, id.clone()))?.body)
    }

    /// Forgets every execution in memory with a record in `segments`.
    pub fn forget_executions(&mut self, segments: &BTreeSet<u64>) {
        let kept = |_: &Vec<u8>, frames: &mut Frames| match frames {
            Frames::Whole(frames) | Frames::More(frames) => {
                !frames.iter().any(|at| segments.contains(&at.seg))
            }
        };
        self.executions.retain(kept);
        self.frozen.retain(kept);
    }
}

/// An execution as its frames tell it: the record, then each attempt.
pub fn fold(execution: Execution, attempts: impl IntoIterator<Item = Entry>) -> Execution {
    attempts
        .into_iter()
        .fold(execution, |mut execution, entry| {
            if let Entry::Attempt {
                status,
                error,
                attempt,
                at_ms,
                ..
            } = entry
            {
                execution.status = status;
                execution.error = error;
                execution.attempts.push(attempt);
                execution.updated_at_ms = at_ms;
            }
            execution
        })
}

/// `older` frames followed by `newer` ones: a newer record starts anew.
pub fn combined(older: Option<&Frames>, newer: Option<&Frames>) -> Option<Frames> {
    match (older, newer) {
        (_, Some(Frames::Whole(f))) => Some(Frames::Whole(f.clone())),
        (None, newer) => newer.cloned(),
        (older, None) => older.cloned(),
        (Some(Frames::Whole(o)), Some(Frames::More(n))) => {
            Some(Frames::Whole([o.clone(), n.clone()].concat()))
        }
        (Some(Frames::More(o)), Some(Frames::More(n))) => {
            Some(Frames::More([o.clone(), n.clone()].concat()))
        }
    }
}
