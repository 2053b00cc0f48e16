//! Where the journal keeps its snapshot between starts (`snapshot.rs`): a
//! sorted map in memory, kept in the journal's directory as a log of the
//! batches applied to it, `NNNN.snap`, each one checked frame
//! (`frame.rs`), synced before `apply` returns. A crash keeps a prefix of
//! whole batches, each an older snapshot, whole. Once the log is much
//! larger than what it holds, the map is written whole as the next
//! generation, synced, and the older one removed.
//!
//! Not a sled tree: the snapshot's keys are ids that come and go, and
//! sled keeps a page for every range of keys it ever held, so its pages
//! (and its start) grew with the history.
//!
//! Derived data: the journal holds everything in it. A log that does not
//! read from its start is set aside (the start then reads the journal
//! whole); one whose end does not read is cut back to its last whole
//! batch, with a warning.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;

use super::disk::Disk;
use super::frame;

/// A change to a key: `None` removes it.
pub type Batch = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// A key and its value.
pub type Pair = (Vec<u8>, Vec<u8>);

/// What the map holds.
type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// A key and its change, as [`Batch`] holds them.
type Change = (Vec<u8>, Option<Vec<u8>>);

/// A log this much larger than what it holds (plus [`SLACK`]) is
/// written anew.
const GROWTH: u64 = 4;
const SLACK: u64 = 1 << 20;

/// The map and its log.
pub struct Tree {
    disk: Arc<dyn Disk>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    map: Map,
    /// The log's generation (0: none yet) and length.
    generation: u64,
    len: u64,
    /// A write or sync failed: the next batch starts a new generation
    /// (after a failed sync, the file's pages may be gone).
    broken: bool,
}

fn name(generation: u64) -> String {
    format!("{generation:016}.snap")
}

impl Tree {
    /// The map logged on `disk`, newest generation first: one whose first
    /// batch does not read (a rewrite cut short) is removed, as are older
    /// ones.
    pub fn open(disk: Arc<dyn Disk>) -> anyhow::Result<Tree> {
        let mut generations: Vec<u64> = disk
            .list()
            .context("cannot list the journal's directory")?
            .iter()
            .filter_map(|n| n.strip_suffix(".snap")?.parse().ok())
            .collect();
        generations.sort_unstable_by(|a, b| b.cmp(a));
        let mut state = State::default();
        for generation in generations {
            let name = name(generation);
            if state.generation == 0
                && let Some((map, len)) = read(&*disk, &name)?
            {
                state = State {
                    map,
                    generation,
                    len,
                    broken: false,
                };
                continue;
            }
            disk.remove(&name)
                .with_context(|| format!("cannot remove the journal snapshot {name}"))?;
        }
        Ok(Tree {
            disk,
            state: Mutex::new(state),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
        Ok(self.state().map.get(key).cloned())
    }

    /// The pairs under `prefix`, in key order.
    pub fn scan(&self, prefix: &[u8]) -> Vec<Pair> {
        self.state()
            .map
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Applies `batch`, durably and whole: a crash keeps all of it or none.
    pub fn apply(&self, batch: &Batch) -> anyhow::Result<()> {
        let mut state = self.state();
        for (key, value) in batch {
            match value {
                Some(value) => state.map.insert(key.clone(), value.clone()),
                None => state.map.remove(key),
            };
        }
        let held: u64 = state
            .map
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum();
        let frame = encode(batch, state.generation)?;
        let grown = state.len + frame.len() as u64 > GROWTH * held + SLACK;
        let written = if state.generation == 0 || state.broken || grown {
            self.rewrite(&mut state)
        } else {
            let name = name(state.generation);
            let len = state.len;
            self.disk
                .write_at(&name, len, &frame)
                .and_then(|()| self.disk.sync(&name))
                .map(|()| state.len += frame.len() as u64)
                .with_context(|| format!("cannot write the journal snapshot {name}"))
        };
        state.broken = written.is_err();
        written
    }

    /// Writes the map whole as the next generation, then removes the one
    /// before.
    fn rewrite(&self, state: &mut State) -> anyhow::Result<()> {
        let generation = state.generation + 1;
        let all: Batch = (state.map.iter())
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        let frame = encode(&all, generation)?;
        let name = name(generation);
        (self.disk.create(&name))
            .and_then(|()| self.disk.write_at(&name, 0, &frame))
            .and_then(|()| self.disk.sync(&name))
            .and_then(|()| self.disk.sync_dir())
            .with_context(|| format!("cannot write the journal snapshot {name}"))?;
        let old = std::mem::replace(&mut state.generation, generation);
        state.len = frame.len() as u64;
        if old > 0 {
            let name = self::name(old);
            (self.disk.remove(&name))
                .and_then(|()| self.disk.sync_dir())
                .with_context(|| format!("cannot remove the journal snapshot {name}"))?;
        }
        Ok(())
    }
}

/// `batch` as one frame: per change, the key's length (u32) and the key,
/// then 0 (removed), or 1 and the value's length (u32) and the value.
fn encode(batch: &Batch, generation: u64) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    for (key, value) in batch {
        body.extend_from_slice(&(key.len() as u32).to_le_bytes());
        body.extend_from_slice(key);
        match value {
            None => body.push(0),
            Some(value) => {
                body.push(1);
                body.extend_from_slice(&(value.len() as u32).to_le_bytes());
                body.extend_from_slice(value);
            }
        }
    }
    let json = format!(r#"{{"snapshot":{generation}}}"#);
    let mut out = Vec::with_capacity(body.len() + frame::HEADER + json.len() + 4);
    frame::encode(&mut out, 0, 0, json.as_bytes(), &body)
        .context("the journal's snapshot is too large for one frame")?;
    Ok(out)
}

/// The map the log `name` holds and the length of its whole batches;
/// `None` if its first batch does not read. An end that does not read
/// is cut off.
fn read(disk: &dyn Disk, name: &str) -> anyhow::Result<Option<(Map, u64)>> {
    let bytes = disk
        .read(name)
        .with_context(|| format!("cannot read the journal snapshot {name}"))?;
    // Created by a rewrite cut short before its first batch.
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut map = BTreeMap::new();
    let mut off = 0;
    while off < bytes.len() {
        let batch = match frame::decode(&bytes[off..]) {
            frame::Read::Frame { payload, len, .. } => {
                frame::split(payload).and_then(|(_, body)| decode(body).map(|b| (b, len)))
            }
            _ => None,
        };
        let Some((batch, len)) = batch else {
            if off == 0 {
                tracing::warn!(snapshot = %name, "the journal's snapshot does not read: reading the journal whole");
                return Ok(None);
            }
            tracing::warn!(snapshot = %name, kept = off, dropped = bytes.len() - off, "the journal's snapshot ends in a batch that does not read; using the one before");
            disk.set_len(name, off as u64)
                .and_then(|()| disk.sync(name))
                .with_context(|| format!("cannot cut back the journal snapshot {name}"))?;
            break;
        };
        for (key, value) in batch {
            match value {
                Some(value) => map.insert(key, value),
                None => map.remove(&key),
            };
        }
        off += len;
    }
    Ok(Some((map, off as u64)))
}

/// The changes [`encode`] wrote; `None` if cut short.
fn decode(mut body: &[u8]) -> Option<Vec<Change>> {
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, rest) = (body.get(..n)?, body.get(n..)?);
        body = rest;
        Some(head)
    };
    let mut changes = Vec::new();
    loop {
        let Some(len) = take(4) else {
            return Some(changes);
        };
        let key = take(u32::from_le_bytes(len.try_into().ok()?) as usize)?.to_vec();
        let value = match take(1)?[0] {
            0 => None,
            _ => {
                let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
                Some(take(len)?.to_vec())
            }
        };
        changes.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::super::disk::sim::{Rng, Sim};
    use super::*;

    fn batch(pairs: &[(&str, Option<&str>)]) -> Batch {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect()
    }

    /// What a reopened tree holds after batches, a rewrite, a torn last
    /// batch and a first batch that does not read.
    #[test]
    fn a_reopened_tree_holds_its_whole_batches() {
        let disk = Sim::new();
        let open = || Tree::open(Arc::new(disk.clone())).unwrap();
        let tree = open();
        tree.apply(&batch(&[("a", Some("1")), ("b", Some("2"))]))
            .unwrap();
        tree.apply(&batch(&[("a", None), ("c", Some("3"))]))
            .unwrap();
        let pairs = |t: &Tree| t.scan(b"");
        let want = vec![
            (b"b".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"3".to_vec()),
        ];
        assert_eq!(pairs(&open()), want);

        // A batch torn at the end: the one before stands.
        let len = disk.lengths()[&name(1)];
        tree.apply(&batch(&[("d", Some("4"))])).unwrap();
        disk.set_len(&name(1), len as u64 + 10).unwrap();
        assert_eq!(pairs(&open()), want);
        assert_eq!(disk.lengths()[&name(1)], len, "cut back");

        // Grown past what it holds: written anew, the old one gone.
        let tree = open();
        let big = "x".repeat(300 << 10);
        for i in 0..8 {
            let value = if i % 2 == 0 { Some(big.as_str()) } else { None };
            tree.apply(&batch(&[("big", value)])).unwrap();
        }
        let names: Vec<String> = disk.lengths().into_keys().collect();
        assert!(!names.contains(&name(1)), "{names:?}");
        assert_eq!(pairs(&open()), want);

        // A generation whose first batch does not read is not used.
        let newest = names
            .iter()
            .rfind(|n| n.ends_with(".snap"))
            .unwrap()
            .clone();
        disk.flip(&newest, 40);
        assert!(pairs(&open()).is_empty());
        assert!(!disk.lengths().contains_key(&newest));
    }

    /// A crash at any step of appends and rewrites (the new generation
    /// written and synced, then the old one removed) leaves the map as an
    /// acknowledged batch left it, or as the one being applied did.
    #[test]
    fn a_crash_at_any_step_keeps_every_acknowledged_batch() {
        let disk = Sim::new();
        disk.record();
        let tree = Tree::open(Arc::new(disk.clone())).unwrap();
        let big = "x".repeat(300 << 10);
        // (disk step once applied, the map then).
        let mut acked = vec![(0, Map::new())];
        for i in 0..40u32 {
            let key = format!("k{}", i % 2);
            let value = (i % 3 != 2).then(|| format!("{i}{big}"));
            tree.apply(&batch(&[(key.as_str(), value.as_deref())]))
                .unwrap();
            acked.push((disk.steps(), tree.state().map.clone()));
        }
        let generations = disk.lengths().into_keys().filter(|n| n.ends_with(".snap"));
        assert!(
            generations.count() == 1 && tree.state().generation > 2,
            "no rewrite happened"
        );
        let mut rng = Rng::new(7);
        let mut images = 0;
        for (i, state) in disk.history().iter().enumerate() {
            let step = i as u64 + 1;
            // The last batch applied by this step, and the one after it.
            let done = acked.iter().rposition(|(s, _)| *s <= step).unwrap();
            for _ in 0..4 {
                let image = Sim::from_state(state.crash(&mut rng));
                let files = image.lengths();
                let got = Tree::open(Arc::new(image)).unwrap().state().map.clone();
                let allowed = &acked[done..(done + 2).min(acked.len())];
                assert!(
                    allowed.iter().any(|(_, map)| *map == got),
                    "step {step}: {} keys, not batch {done} or the next (files {files:?})",
                    got.len()
                );
                images += 1;
            }
        }
        assert!(images > 100, "{images} images");
    }
}
