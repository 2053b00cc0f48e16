//! The journal on a simulated disk that crashes at every step (issue 53's
//! proof): a seeded workload of every kind of record, rotations,
//! checkpoints and expiry, with faults on command; after each I/O step a
//! few crash images are taken and reopened, and what comes back must be
//! the state after some prefix of the commits, at least every acknowledged
//! one. sled gets a commit's writes once the journal's sync covers it
//! (through the store's own `wal::Unapplied`), and its crash image keeps
//! what it held at its last flush plus any subset of what it was given
//! since (sled writes its log out on its own threads, so any of it may
//! have reached the disk); the journal's snapshot and indexes are files on
//! the simulated disk. Restarts (a kill: nothing lost) come between
//! expiries, and no delivery is ever due before its commit is durable.
//!
//! A failing seed is printed; `SWITCHYARD_CRASH_SEED=N` runs that one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::journal::disk::sim::{Call, Rng, Sim, State};
use super::journal::tests::attempted;
use super::journal::{Entry, Journal};
use super::wal;
use crate::store::contract::{delivery, event, execution};

/// What the journal should hold: events waiting, deliveries waiting (id →
/// due), executions (id → attempts), and sled's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    inbox: BTreeSet<String>,
    outbox: BTreeMap<String, u64>,
    executions: BTreeMap<String, usize>,
    sled: BTreeMap<u8, u64>,
}

/// A run: the commits made, and at which disk step each was written and
/// each sync acknowledged.
struct Run {
    /// The model after each commit; `states[0]` is empty.
    states: Vec<Model>,
    /// (step after the commit's write, commits so far).
    written: Vec<(u64, usize)>,
    /// (step after a sync, commits acknowledged).
    acked: Vec<(u64, usize)>,
    /// (step of a sled flush, what sled then held).
    flushed: Vec<(u64, BTreeMap<u8, u64>)>,
    /// (step, key, value): each write sled was given, in order.
    applied: Vec<(u64, u8, u64)>,
    /// Executions the running journal's expiry dropped: the rest of those
    /// committed must be there after a crash.
    expired: BTreeSet<String>,
    history: Vec<State>,
}

const BODY: &str = "0123456789abcdef";

/// The journal on `disk`.
fn open(disk: &Sim) -> anyhow::Result<(Journal, Vec<Vec<u8>>)> {
    Journal::open(Arc::new(disk.clone()))
}

/// The journal on `disk`, unwrapped.
fn open_fresh(disk: &Sim) -> Journal {
    open(disk).unwrap().0
}

/// One seeded workload against `disk`; a fault at `fault` if given.
fn workload(seed: u64, fault: Option<(Call, u64, i32)>) -> Run {
    let mut rng = Rng::new(seed);
    let disk = Sim::new();
    disk.record();
    if let Some((call, step, errno)) = fault {
        disk.fail(call, step, errno);
    }
    let journal = open(&disk).unwrap().0;
    let mut model = Model::default();
    let mut run = Run {
        states: vec![Model::default()],
        written: vec![(disk.steps(), 0)],
        acked: vec![(disk.steps(), 0)],
        flushed: vec![(0, BTreeMap::new())],
        applied: Vec::new(),
        expired: BTreeSet::new(),
        history: Vec::new(),
    };
    let mut journal = journal;
    // What sled holds, applied (not necessarily flushed).
    let mut sled: BTreeMap<u8, u64> = BTreeMap::new();
    // Commits whose writes wait for a sync, as `Sled::apply` leaves them.
    let mut unapplied = wal::Unapplied::default();
    // The journal mark of each commit, in order (`marks[i]` covers commit i + 1).
    let mut marks: Vec<u64> = Vec::new();
    let mut next = 0u64;
    for _ in 0..60 {
        next += 1;
        let mut after = model.clone();
        let entries = match rng.below(9) {
            0 | 1 => {
                let id = format!("ev_{next}");
                after.inbox.insert(id.clone());
                vec![Entry::Event {
                    event: Box::new(event(&id, next)),
                }]
            }
            2 | 3 if !model.inbox.is_empty() => {
                let ev = after.inbox.pop_first().unwrap();
                let id = ev.trim_start_matches("ev_").to_string();
                let mut exec = execution(&id, 1);
                let mut d = delivery(&format!("d_{id}"), 5);
                d.execution_id = exec.id.clone();
                d.body_sealed = crate::model::SealedBody::from_hex(BODY).unwrap();
                exec.body_sealed = Some(crate::model::SealedBody::from_hex(BODY).unwrap());
                after.outbox.insert(d.id.to_string(), 5);
                after.executions.insert(id, 0);
                vec![
                    Entry::Taken { id: ev },
                    Entry::Execution {
                        execution: Box::new(exec),
                        body: false,
                    },
                    Entry::Queued {
                        delivery: d,
                        body: None,
                    },
                ]
            }
            4 if !model.outbox.is_empty() => {
                let (id, _) = model.outbox.iter().next().unwrap();
                let id = id.trim_start_matches("d_").to_string();
                after.outbox.remove(&format!("d_{id}"));
                *after.executions.get_mut(&id).unwrap() += 1;
                attempted(&id)
            }
            5 if !model.outbox.is_empty() => {
                // A retry: settled and queued again, later.
                let (id, due) = model.outbox.iter().next().unwrap();
                let mut d = delivery(id, due + 10);
                d.execution_id = execution(id.trim_start_matches("d_"), 1).id;
                d.body_sealed = crate::model::SealedBody::from_hex(BODY).unwrap();
                after.outbox.insert(id.clone(), due + 10);
                vec![
                    Entry::Settled {
                        id: id.as_str().into(),
                    },
                    Entry::Queued {
                        delivery: d,
                        body: None,
                    },
                ]
            }
            6 => {
                let key = rng.below(8) as u8;
                after.sled.insert(key, next);
                vec![wal::entry(&sled_write(key, next))]
            }
            7 => {
                match rng.below(3) {
                    0 => journal.rotate_soon(),
                    // A restart (a kill: the page cache is kept): what
                    // waited for a sync is applied again from the journal.
                    1 => {
                        drop(journal);
                        // A disk failing under the start: the run ends.
                        let Ok((reopened, redo)) = open(&disk) else {
                            break;
                        };
                        journal = reopened;
                        unapplied = wal::Unapplied::default();
                        for writes in redo {
                            let (key, value) = sled_value(&writes);
                            sled.insert(key, value);
                            run.applied.push((disk.steps(), key, value));
                        }
                    }
                    _ => {}
                }
                Vec::new()
            }
            _ => {
                let acked = run.states.len() - 1;
                let (flushed, applied) = (&mut run.flushed, &mut run.applied);
                let (sled, unapplied) = (&mut sled, &unapplied);
                let done = wal::checkpoint(&journal, |_| {
                    // As `checkpoint_now`: sled gets every synced commit,
                    // then is flushed.
                    give_sled(unapplied, journal.marks().1, sled, applied, disk.steps());
                    flushed.push((disk.steps(), sled.clone()));
                    Ok(())
                })
                .and_then(|frozen| journal.write_snapshot(frozen));
                if let Ok((seg, _)) = done {
                    run.acked.push((disk.steps(), acked));
                    if rng.below(2) == 0 {
                        let _ = journal.index_sealed();
                    }
                    if rng.below(3) == 0 {
                        let listed = |j: &Journal| -> BTreeSet<String> {
                            let listing = j.executions(b"", usize::MAX).unwrap_or_default();
                            listing.into_iter().map(|e| e.id.to_string()).collect()
                        };
                        let before = listed(&journal);
                        if journal.expire(u64::MAX, seg).is_ok() {
                            run.expired
                                .extend(before.difference(&listed(&journal)).cloned());
                        }
                    }
                }
                Vec::new()
            }
        };
        if entries.is_empty() {
            continue;
        }
        let to_sled = match &entries[0] {
            Entry::Sled { writes } => Some(sled_value(writes)),
            _ => None,
        };
        let appended = journal.append(entries);
        journal.rotate_every(Duration::from_secs(3600));
        if let Ok(mark) = appended {
            // Sled gets it once a sync covers it, as `Sled::apply` leaves it.
            if let Some((key, value)) = to_sled {
                unapplied.push(mark, sled_write(key, value));
            }
            marks.push(mark);
            model = after;
            run.states.push(model.clone());
            run.written.push((disk.steps(), run.states.len() - 1));
        }
        if rng.below(4) == 0 {
            let commits = run.states.len() - 1;
            if journal.sync().is_ok() {
                run.acked.push((disk.steps(), commits));
                give_sled(
                    &unapplied,
                    journal.marks().1,
                    &mut sled,
                    &mut run.applied,
                    disk.steps(),
                );
            }
        }
        // Nothing is due before its commit is durable.
        let durable = marks
            .iter()
            .take_while(|m| **m <= journal.marks().1)
            .count();
        if let Ok(((due, _), _)) = journal.due(u64::MAX, usize::MAX, &|_| false) {
            let queued = |id: &str| {
                run.states[..=durable]
                    .iter()
                    .any(|s| s.outbox.contains_key(id))
            };
            if let Some(d) = due.iter().find(|d| !queued(d.id.as_str())) {
                panic!(
                    "seed {seed}: {} is due before the commit that queued it is durable",
                    d.id
                );
            }
        }
    }
    run.history = disk.history();
    run
}

/// sled's write of `value` under `key`, as a commit's overlay.
fn sled_write(key: u8, value: u64) -> super::Overlay {
    let mut overlay = super::Overlay::new();
    overlay.insert(
        (super::T::Meta, vec![key]),
        Some(value.to_le_bytes().to_vec()),
    );
    overlay
}

/// The key and value a journal entry of [`sled_write`] logs.
fn sled_value(writes: &[u8]) -> (u8, u64) {
    let (_, key, value) = wal::decode(writes).unwrap().remove(0);
    (
        key[0],
        u64::from_le_bytes(value.unwrap().try_into().unwrap()),
    )
}

/// Hands sled the waiting commits a sync to `synced` covers.
fn give_sled(
    unapplied: &wal::Unapplied,
    synced: u64,
    sled: &mut BTreeMap<u8, u64>,
    applied: &mut Vec<(u64, u8, u64)>,
    step: u64,
) {
    unapplied
        .apply_synced(synced, |overlay| {
            for ((_, key), value) in overlay {
                let value = u64::from_le_bytes(value.clone().unwrap().try_into().unwrap());
                sled.insert(key[0], value);
                applied.push((step, key[0], value));
            }
            Ok(())
        })
        .unwrap();
}

/// What sled's files hold after a crash at `step`: what the last flush
/// made durable, plus any subset of the writes it was given since.
fn sled_image(run: &Run, step: u64, rng: &mut Rng) -> BTreeMap<u8, u64> {
    let (flushed_at, flushed) = run
        .flushed
        .iter()
        .rev()
        .find(|(s, _)| *s <= step)
        .expect("the empty flush");
    let mut image = flushed.clone();
    for (_, key, value) in run
        .applied
        .iter()
        .filter(|(s, _, _)| *s > *flushed_at && *s <= step)
    {
        if rng.below(2) == 0 {
            image.insert(*key, *value);
        }
    }
    image
}

/// What a journal reopened on `image` holds, and sled's redo applied to
/// what sled's files kept.
fn recovered(image: State, kept: &BTreeMap<u8, u64>) -> Result<Model, String> {
    let disk = Sim::from_state(image);
    let (journal, redo) = open(&disk).map_err(|e| format!("{e:#}"))?;
    let mut sled = kept.clone();
    for writes in redo {
        let (key, value) = sled_value(&writes);
        sled.insert(key, value);
    }
    let ((outbox, _), unreadable) = journal
        .due(u64::MAX, usize::MAX, &|_| false)
        .map_err(|e| e.to_string())?;
    if let Some((d, why)) = unreadable.first() {
        return Err(format!("the delivery {} cannot be read: {why}", d.id));
    }
    let outbox = outbox
        .into_iter()
        .map(|d| (d.id.to_string(), d.due_ms))
        .collect();
    let mut executions = BTreeMap::new();
    for execution in journal
        .executions(b"", usize::MAX)
        .map_err(|e| e.to_string())?
    {
        executions.insert(execution.id.to_string(), execution.attempts.len());
    }
    Ok(Model {
        inbox: journal.inbox().into_iter().map(|e| e.id).collect(),
        outbox,
        executions,
        sled,
    })
}

/// The last `(step, n)` at or before `step`.
fn at(marks: &[(u64, usize)], step: u64) -> usize {
    marks
        .iter()
        .rev()
        .find(|(s, _)| *s <= step)
        .map_or(0, |(_, n)| *n)
}

/// Crashes `run` at every step, `per_step` images each; returns how many
/// images were checked, or the first that failed.
fn check(seed: u64, run: &Run, per_step: usize) -> Result<usize, String> {
    let mut rng = Rng::new(seed ^ 0xC0FFEE);
    let mut images = 0;
    for (i, state) in run.history.iter().enumerate() {
        let step = i as u64 + 1;
        let acked = at(&run.acked, step);
        let written = at(&run.written, step);
        for variant in 0..per_step {
            let image = state.crash(&mut rng);
            let kept = sled_image(run, step, &mut rng);
            let got = recovered(image, &kept)
                .map_err(|e| format!("seed {seed}, step {step}, image {variant}: {e}"))?;
            // Executions expire with their segments; compare the rest.
            let matches = |m: &Model| {
                m.inbox == got.inbox
                    && m.outbox == got.outbox
                    && m.sled == got.sled
                    && got
                        .executions
                        .iter()
                        .all(|(k, v)| m.executions.get(k) == Some(v))
                    && m.executions
                        .keys()
                        .all(|k| got.executions.contains_key(k) || run.expired.contains(k))
            };
            if !run.states[acked..=written].iter().any(matches) {
                return Err(format!(
                    "seed {seed}, step {step}, image {variant}: recovered {got:?}, \
                     which is no state between the {acked} acknowledged commits and the \
                     {written} written (acknowledged: {:?})",
                    run.states[acked]
                ));
            }
            images += 1;
        }
    }
    Ok(images)
}

fn seeds() -> Vec<u64> {
    match std::env::var("SWITCHYARD_CRASH_SEED") {
        Ok(seed) => vec![seed.parse().expect("SWITCHYARD_CRASH_SEED is a number")],
        Err(_) => (1..=40).collect(),
    }
}

#[test]
fn every_crash_image_holds_every_acknowledged_commit_and_nothing_unwritten() {
    let mut images = 0;
    for seed in seeds() {
        let run = workload(seed, None);
        images += check(seed, &run, 3).unwrap_or_else(|e| panic!("{e}"));
    }
    println!("crash simulation: {images} crash images checked");
    assert!(images >= 5_000, "only {images} crash images");
}

/// A write or sync that fails (EIO, ENOSPC) at some step: after a failed
/// sync or an I/O error the journal takes nothing more (with a retried
/// fsync, commits acknowledged after the failure would be lost); a write
/// refused for space is cut back and the journal goes on. Either way what
/// was acknowledged survives.
#[test]
fn after_a_failed_write_or_sync_nothing_more_is_acknowledged_and_nothing_acknowledged_is_lost() {
    let mut images = 0;
    for seed in seeds() {
        let mut rng = Rng::new(seed);
        let call = if rng.below(2) == 0 {
            Call::Sync
        } else {
            Call::Write
        };
        let errno = if rng.below(2) == 0 { 5 } else { 28 };
        let step = 5 + rng.below(60);
        let run = workload(seed, Some((call, step, errno)));
        images += check(seed, &run, 2).unwrap_or_else(|e| panic!("{call:?} failing: {e}"));
    }
    println!("crash simulation with faults: {images} crash images checked");
    assert!(images >= 2_000, "only {images} crash images");
}

/// Finding 4 of issue 53: a damaged byte before the end of the journal
/// stops the start, naming the file and the offset; it is never cut away
/// as if it were a torn end.
#[test]
fn damage_before_the_end_is_refused_not_truncated() {
    let disk = Sim::new();
    let journal = open_fresh(&disk);
    for i in 0..20 {
        journal
            .append(vec![Entry::Event {
                event: Box::new(event(&format!("ev_{i}"), i)),
            }])
            .unwrap();
        journal.sync().unwrap();
        journal.rotate_every(Duration::from_secs(3600));
        if i == 9 {
            journal.rotate_soon();
        }
    }
    drop(journal);
    let lengths = disk.lengths();
    assert_eq!(lengths.len(), 2, "{lengths:?}");
    for (i, (name, len)) in lengths.iter().enumerate() {
        // The newest segment's last commit could be a torn write: damage
        // there is told from one only by what follows it, and nothing does.
        let newest = i + 1 == lengths.len();
        let spots = if newest {
            vec![0, len / 3, len / 2]
        } else {
            vec![0, len / 3, len / 2, len - 40]
        };
        for at in spots {
            let damaged = Sim::from_state(disk.state());
            damaged.flip(name, at);
            let Err(e) = open(&damaged) else {
                panic!("{name} damaged at {at} was opened");
            };
            let e = format!("{e:#}");
            assert!(e.contains(name) && e.contains("damaged at offset"), "{e}");
            assert_eq!(damaged.lengths()[name], *len, "{name}: nothing cut");
        }
    }
}

/// Finding 2 of issue 53: a checkpoint syncs the journal before sled is
/// flushed, so sled never holds a write whose commit a crash can take.
#[test]
fn a_checkpoint_syncs_the_journal_before_sled_is_flushed() {
    let disk = Sim::new();
    let journal = open_fresh(&disk);
    journal
        .append(vec![
            Entry::Event {
                event: Box::new(event("ev_tag", 1)),
            },
            Entry::Sled {
                writes: vec![1, 2, 3],
            },
        ])
        .unwrap();
    let mut synced_before_flush = false;
    wal::checkpoint(&journal, |_| {
        // A crash now keeps at least what was synced: is the commit there?
        let image = disk.state().durable();
        synced_before_flush = open_fresh(&Sim::from_state(image)).inbox().len() == 1;
        Ok(())
    })
    .unwrap();
    assert!(
        synced_before_flush,
        "sled was flushed before the journal synced"
    );
}

/// A host killed (its unsynced writes still in the page cache) and started
/// again, then a power loss: what the second run acknowledged comes back,
/// and the start is not refused. The second run read the first run's
/// unsynced tail and wrote after it, so it must make that tail durable
/// before acknowledging anything.
#[test]
fn a_restart_after_a_kill_then_a_power_loss_keeps_what_the_restart_acknowledged() {
    let mut images = 0;
    for seed in seeds() {
        let disk = Sim::new();
        let first = open_fresh(&disk);
        let mut entries: Vec<Entry> = (0..8)
            .map(|i| Entry::Event {
                event: Box::new(event(&format!("ev_a{i}"), i)),
            })
            .collect();
        first.append(std::mem::take(&mut entries)).unwrap();
        drop(first);
        let second = open_fresh(&disk);
        second
            .append(vec![Entry::Event {
                event: Box::new(event("ev_b", 9)),
            }])
            .unwrap();
        second.sync().unwrap();
        let mut rng = Rng::new(seed);
        for variant in 0..50 {
            let image = disk.state().crash(&mut rng);
            let journal = open(&Sim::from_state(image))
                .unwrap_or_else(|e| panic!("seed {seed}, image {variant}: {e:#}"))
                .0;
            assert!(
                journal.has_event("ev_b"),
                "seed {seed}, image {variant}: the acknowledged event is gone"
            );
            images += 1;
        }
    }
    println!("restart then crash: {images} crash images checked");
}
