//! A simulated disk: per file, what was synced and the writes since, so
//! that a crash can be taken at any step. A crash image keeps the synced
//! state plus any prefix of the later writes, the last one torn at a
//! 512-byte sector boundary with nothing, zeros or garbage after the tear;
//! files created or removed since the directory's last sync may or may not
//! be there. A failed sync drops the writes it covered for good, as Linux
//! does with the dirty pages behind an fsync error (the "fsyncgate"
//! lesson): a later sync succeeds without them.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use super::Disk;

const SECTOR: u64 = 512;

/// A small deterministic generator (SplitMix64), so a seed replays a run.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Clone, Default)]
struct SimFile {
    /// What a crash keeps at the least.
    synced: Arc<Vec<u8>>,
    /// Changes since, in order.
    ops: Vec<Op>,
    /// What a reader sees now.
    now: Vec<u8>,
    /// Whether the directory entry is durable.
    entry_synced: bool,
}

impl SimFile {
    /// A file holding `bytes`, all of it durable.
    fn durable(bytes: Vec<u8>) -> SimFile {
        SimFile {
            synced: Arc::new(bytes.clone()),
            ops: Vec::new(),
            now: bytes,
            entry_synced: true,
        }
    }
}

/// Which call a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A write or a change of length.
    Write,
    /// A file's or the directory's sync.
    Sync,
}

/// Everything the disk holds at one moment.
#[derive(Clone, Default)]
pub struct State {
    files: BTreeMap<String, SimFile>,
    /// Removed since the directory's last sync: a crash may bring them back.
    removed: BTreeMap<String, SimFile>,
}

#[derive(Default)]
struct Inner {
    state: State,
    /// Mutating calls so far.
    steps: u64,
    /// The state after each mutating call, when recording.
    history: Option<Vec<State>>,
    /// Fail the call of this kind made at or after this step, with this
    /// errno (EIO 5, ENOSPC 28).
    fault: Option<(Call, u64, i32)>,
}

/// The simulated disk. Cloning shares it.
#[derive(Clone, Default)]
pub struct Sim {
    inner: Arc<Mutex<Inner>>,
}

impl Sim {
    /// An empty disk.
    pub fn new() -> Sim {
        Sim::default()
    }

    /// A disk holding exactly `state`, all of it durable.
    pub fn from_state(state: State) -> Sim {
        let sim = Sim::new();
        sim.inner().state = state;
        sim
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the state after every mutating call from now on.
    pub fn record(&self) {
        self.inner().history = Some(Vec::new());
    }

    /// The states recorded so far.
    pub fn history(&self) -> Vec<State> {
        self.inner().history.clone().unwrap_or_default()
    }

    /// The mutating calls so far.
    pub fn steps(&self) -> u64 {
        self.inner().steps
    }

    /// The first `call` made at step `step` or later fails with `errno`.
    pub fn fail(&self, call: Call, step: u64, errno: i32) {
        self.inner().fault = Some((call, step, errno));
    }

    /// What the disk holds now.
    pub fn state(&self) -> State {
        self.inner().state.clone()
    }

    /// Puts a file holding `bytes`, all of it durable.
    pub fn put(&self, name: &str, bytes: &[u8]) {
        let file = SimFile::durable(bytes.to_vec());
        self.inner().state.files.insert(name.to_string(), file);
    }

    /// Sets one byte of a file as it is on disk, synced (damage).
    pub fn flip(&self, name: &str, at: usize) {
        let mut inner = self.inner();
        let file = inner.state.files.get_mut(name).expect("a file to damage");
        file.now[at] ^= 0x5a;
        file.synced = Arc::new(file.now.clone());
        file.ops.clear();
    }

    /// Every file's length now.
    pub fn lengths(&self) -> BTreeMap<String, usize> {
        let inner = self.inner();
        inner
            .state
            .files
            .iter()
            .map(|(n, f)| (n.clone(), f.now.len()))
            .collect()
    }

    /// Runs a mutating call: counts the step, applies any fault, records.
    fn step(
        &self,
        call: Option<Call>,
        f: impl FnOnce(&mut State) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut inner = self.inner();
        inner.steps += 1;
        let result = match (call, inner.fault) {
            (Some(call), Some((fault, at, errno))) if call == fault && inner.steps >= at => {
                inner.fault = None;
                if call == Call::Sync {
                    // The writes it covered are gone for good; the cache
                    // still shows them.
                    for file in inner.state.files.values_mut() {
                        file.ops.clear();
                    }
                }
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => f(&mut inner.state),
        };
        let state = inner.state.clone();
        if let Some(history) = inner.history.as_mut() {
            history.push(state);
        }
        result
    }
}

fn missing(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no file {name}"))
}

fn apply(bytes: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write(off, data) => {
            let end = *off as usize + data.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[*off as usize..end].copy_from_slice(data);
        }
        Op::SetLen(len) => bytes.resize(*len as usize, 0),
    }
}

impl Disk for Sim {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.inner().state.files.keys().cloned().collect())
    }

    fn create(&self, name: &str) -> io::Result<()> {
        self.step(None, |state| {
            let entry_synced = state.files.get(name).is_some_and(|f| f.entry_synced);
            state.files.insert(
                name.to_string(),
                SimFile {
                    entry_synced,
                    ops: vec![Op::SetLen(0)],
                    ..SimFile::default()
                },
            );
            Ok(())
        })
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let inner = self.inner();
        Ok(inner
            .state
            .files
            .get(name)
            .ok_or_else(|| missing(name))?
            .now
            .clone())
    }

    fn read_at(&self, name: &str, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let inner = self.inner();
        let file = inner.state.files.get(name).ok_or_else(|| missing(name))?;
        let bytes = file
            .now
            .get(off as usize..off as usize + buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn write_at(&self, name: &str, off: u64, bytes: &[u8]) -> io::Result<()> {
        self.step(Some(Call::Write), |state| {
            let file = state.files.get_mut(name).ok_or_else(|| missing(name))?;
            let op = Op::Write(off, bytes.to_vec());
            apply(&mut file.now, &op);
            file.ops.push(op);
            Ok(())
        })
    }

    fn sync(&self, name: &str) -> io::Result<()> {
        self.step(Some(Call::Sync), |state| {
            let file = state.files.get_mut(name).ok_or_else(|| missing(name))?;
            file.synced = Arc::new(file.now.clone());
            file.ops.clear();
            Ok(())
        })
    }

    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        self.step(Some(Call::Write), |state| {
            let file = state.files.get_mut(name).ok_or_else(|| missing(name))?;
            let op = Op::SetLen(len);
            apply(&mut file.now, &op);
            file.ops.push(op);
            Ok(())
        })
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.step(None, |state| {
            let file = state.files.remove(name).ok_or_else(|| missing(name))?;
            if file.entry_synced {
                state.removed.insert(name.to_string(), file);
            }
            Ok(())
        })
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.step(Some(Call::Sync), |state| {
            state.removed.clear();
            for file in state.files.values_mut() {
                file.entry_synced = true;
            }
            Ok(())
        })
    }
}

impl State {
    /// What a crash at this moment may leave, chosen by `rng`: the files
    /// whose entries are durable (and, by chance, the others), each with
    /// its synced bytes and a prefix of its later writes, the last torn.
    pub fn crash(&self, rng: &mut Rng) -> State {
        let mut files = BTreeMap::new();
        let candidates = self.files.iter().chain(self.removed.iter());
        for (name, file) in candidates {
            if files.contains_key(name) {
                continue;
            }
            let removed = !self.files.contains_key(name);
            let survives = if removed {
                rng.below(2) == 0
            } else {
                file.entry_synced || rng.below(2) == 0
            };
            if !survives {
                continue;
            }
            files.insert(name.clone(), SimFile::durable(torn(file, rng)));
        }
        State {
            files,
            removed: BTreeMap::new(),
        }
    }

    /// What a crash keeps at the least: synced bytes of files whose
    /// entries are durable.
    pub fn durable(&self) -> State {
        let files = self
            .files
            .iter()
            .filter(|(_, f)| f.entry_synced)
            .map(|(name, f)| (name.clone(), SimFile::durable(f.synced.as_ref().clone())))
            .collect();
        State {
            files,
            removed: BTreeMap::new(),
        }
    }
}

/// The synced bytes of `file` with a prefix of its later changes, the
/// last one torn at a sector boundary.
fn torn(file: &SimFile, rng: &mut Rng) -> Vec<u8> {
    let mut bytes = file.synced.as_ref().clone();
    let kept = rng.below(file.ops.len() as u64 + 1) as usize;
    for op in &file.ops[..kept] {
        apply(&mut bytes, op);
    }
    if let Some(Op::Write(off, data)) = file.ops.get(kept) {
        let end = off + data.len() as u64;
        // Sector boundaries inside the write.
        let first = (off / SECTOR + 1) * SECTOR;
        let cuts: Vec<u64> = (0..)
            .map(|i| first + i * SECTOR)
            .take_while(|c| *c < end)
            .collect();
        let cut = match cuts.len() {
            0 => *off,
            n => *[*off]
                .iter()
                .chain(&cuts)
                .nth(rng.below(n as u64 + 1) as usize)
                .expect("a cut"),
        };
        let written = (cut - off) as usize;
        apply(&mut bytes, &Op::Write(*off, data[..written].to_vec()));
        // What the rest of the write's place holds: nothing, zeros, garbage.
        let rest = data.len() - written;
        match rng.below(3) {
            0 => {}
            1 => apply(&mut bytes, &Op::Write(cut, vec![0; rest])),
            _ => {
                let garbage = (0..rest).map(|_| rng.next_u64() as u8).collect();
                apply(&mut bytes, &Op::Write(cut, garbage));
            }
        }
    }
    bytes
}
