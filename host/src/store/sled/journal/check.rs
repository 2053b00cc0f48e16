//! `switchyard store check` and `store salvage`: the start's own reading
//! of the journal (`read_all`), on a disk that refuses to change, and the
//! one repair an operator may ask for.

use std::fmt;
use std::io;
use std::sync::Mutex;

use anyhow::Context;

use super::{Damaged, Disk, read_all, segment_name, segments};

/// What a check found, reading the journal as a start would and changing
/// nothing.
#[derive(Debug, Default)]
pub struct Report {
    /// Segment files.
    pub segments: usize,
    /// The bytes they hold.
    pub bytes: u64,
    /// Events still to match.
    pub events_waiting: usize,
    /// Deliveries still to send.
    pub deliveries_waiting: usize,
    /// Executions in the history.
    pub executions: usize,
    /// Commits of sled's writes a start applies again.
    pub sled_commits_to_redo: usize,
    /// A commit cut short at the newest segment's end (a crash
    /// mid-write), which a start drops: the segment, and the bytes kept.
    pub torn: Option<(String, u64)>,
    /// What stops a start, as the start says it.
    pub damage: Option<String>,
    /// The last checkpoint: sled held, durably, every write logged before it.
    pub checkpoint: (u64, u64),
    /// The oldest segment the journal holds.
    pub oldest: Option<u64>,
    /// Where sled's files stand against the checkpoint (`Sled::check`).
    pub sled: Option<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "journal: {} segments, {} bytes",
            self.segments, self.bytes
        )?;
        if let Some(sled) = &self.sled {
            writeln!(f, "sled: {sled}")?;
        }
        if let Some(damage) = &self.damage {
            return write!(f, "DAMAGED: {damage}");
        }
        writeln!(
            f,
            "waiting: {} events, {} deliveries; history: {} executions; sled commits to apply again: {}",
            self.events_waiting,
            self.deliveries_waiting,
            self.executions,
            self.sled_commits_to_redo
        )?;
        match &self.torn {
            Some((name, kept)) => write!(
                f,
                "ends in a commit cut short (a crash mid-write): the next start drops {name} from offset {kept} on; it was never acknowledged"
            ),
            None => write!(f, "whole: every commit reads back"),
        }
    }
}

/// Reads the journal on `disk` as a start would, without changing it.
pub fn check(disk: &dyn Disk) -> anyhow::Result<Report> {
    let frozen = Frozen::new(disk);
    let mut report = Report::default();
    match read_all(&frozen) {
        Ok(read) => {
            report.events_waiting = read.index.inbox.len();
            report.deliveries_waiting = read.index.outbox.len();
            report.executions = (read.index.executions.values())
                .filter(|f| matches!(f, super::Frames::Whole(_)))
                .count();
            report.checkpoint = read.redo.checkpoint;
            report.sled_commits_to_redo = read.redo.since_checkpoint().len();
        }
        Err(e) if e.is::<Damaged>() => report.damage = Some(e.to_string()),
        Err(e) => return Err(e),
    }
    report.oldest = segments(disk)?.first().copied();
    let seen = frozen.seen.into_inner().unwrap_or_else(|p| p.into_inner());
    (report.segments, report.bytes, report.torn) = (seen.segments, seen.bytes, seen.cut);
    Ok(report)
}

/// Repairs damage a start refuses, keeping everything before it: the
/// damaged segment is cut at its last whole commit before the damage, and
/// every later segment leaves the journal. Each file changed or removed is
/// first copied, durably, to `<name>.salvaged`. What was set aside was
/// acknowledged: the operator asks for this, knowing it. Says what it did.
pub fn salvage(disk: &dyn Disk) -> anyhow::Result<String> {
    let damaged = match read_all(&Frozen::new(disk)) {
        Ok(_) => return Ok("the journal reads whole: nothing to salvage".into()),
        Err(e) => match e.downcast::<Damaged>() {
            Ok(damaged) => damaged,
            Err(e) => {
                return Err(e.context("salvage cannot repair this; restore from a backup"));
            }
        },
    };
    let later: Vec<u64> = segments(disk)?
        .into_iter()
        .filter(|seg| *seg > damaged.seg)
        .collect();
    for seg in std::iter::once(damaged.seg).chain(later.iter().copied()) {
        set_aside(disk, &segment_name(seg))?;
    }
    disk.sync_dir()?;
    // Newest first: a crash in between leaves a journal that salvage cuts
    // at the same place again.
    for seg in later.iter().rev() {
        disk.remove(&segment_name(*seg))?;
        disk.sync_dir()?;
    }
    let name = segment_name(damaged.seg);
    disk.set_len(&name, damaged.kept)?;
    disk.sync(&name)?;
    read_all(&Frozen::new(disk)).context("the journal still does not read after salvage")?;
    let removed: Vec<String> = later.iter().map(|seg| segment_name(*seg)).collect();
    Ok(format!(
        "cut {name} at offset {} (the damage was at {}); removed {} later segments {removed:?}; \
         copies of each are beside them as <name>.salvaged",
        damaged.kept,
        damaged.at,
        removed.len()
    ))
}

/// Copies `name` to `<name>.salvaged`, durably.
fn set_aside(disk: &dyn Disk, name: &str) -> io::Result<()> {
    let bytes = disk.read(name)?;
    let copy = format!("{name}.salvaged");
    disk.create(&copy)?;
    disk.write_at(&copy, 0, &bytes)?;
    disk.sync(&copy)
}

/// A disk that reads and changes nothing: a cut a start would make is
/// noted instead.
struct Frozen<'a> {
    disk: &'a dyn Disk,
    seen: Mutex<Seen>,
}

/// What a [`Frozen`] disk saw.
#[derive(Default)]
struct Seen {
    segments: usize,
    bytes: u64,
    /// The file a start would cut, and where.
    cut: Option<(String, u64)>,
}

impl<'a> Frozen<'a> {
    fn new(disk: &'a dyn Disk) -> Frozen<'a> {
        Frozen {
            disk,
            seen: Mutex::default(),
        }
    }

    fn refuse() -> io::Result<()> {
        Err(io::Error::other("a check changes nothing"))
    }
}

impl Disk for Frozen<'_> {
    fn list(&self) -> io::Result<Vec<String>> {
        self.disk.list()
    }

    fn create(&self, _: &str) -> io::Result<()> {
        Frozen::refuse()
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let bytes = self.disk.read(name)?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.segments += 1;
        seen.bytes += bytes.len() as u64;
        Ok(bytes)
    }

    fn read_at(&self, name: &str, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.disk.read_at(name, off, buf)
    }

    fn write_at(&self, _: &str, _: u64, _: &[u8]) -> io::Result<()> {
        Frozen::refuse()
    }

    fn sync(&self, _: &str) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).cut = Some((name.to_string(), len));
        Ok(())
    }

    fn remove(&self, _: &str) -> io::Result<()> {
        Frozen::refuse()
    }

    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::disk::sim::Sim;
    use super::super::tests::damaged_journal;
    use super::*;

    #[test]
    fn a_check_reports_damage_and_changes_nothing_and_salvage_keeps_what_precedes_it() {
        let (disk, waiting) = damaged_journal();
        let files = |disk: &Sim| -> Vec<(String, Vec<u8>)> {
            let names = disk.list().unwrap();
            names
                .into_iter()
                .map(|n| (n.clone(), disk.read(&n).unwrap()))
                .collect()
        };
        let before = files(&disk);
        let report = check(&disk).unwrap();
        let damage = report.damage.as_deref().unwrap();
        assert!(damage.contains("is damaged at offset"), "{report}");
        assert!(files(&disk) == before, "a check changes nothing");

        let said = salvage(&disk).unwrap();
        assert!(said.contains("cut 0000000000000001.log"), "{said}");
        let report = check(&disk).unwrap();
        assert!(report.damage.is_none(), "{report}");
        assert!(
            report.deliveries_waiting > 0 && report.deliveries_waiting < waiting,
            "{report}"
        );
        let names = disk.list().unwrap();
        assert!(
            names.contains(&"0000000000000001.log.salvaged".to_string()),
            "{names:?}"
        );
        let (_journal, _) = super::super::Journal::open(std::sync::Arc::new(disk.clone())).unwrap();
        assert_eq!(
            salvage(&Sim::from_state(disk.state())).unwrap(),
            "the journal reads whole: nothing to salvage"
        );
    }

    /// A crash at any step of a salvage leaves a journal that a second
    /// salvage repairs to the same place: what the first would have kept
    /// is kept, and a copy of every segment it removed is durable first.
    #[test]
    fn a_crash_at_any_step_of_a_salvage_loses_what_it_would_keep() {
        let (disk, _) = damaged_journal();
        let removed = "0000000000000002.log";
        let original = disk.read(removed).unwrap();
        let whole = Sim::from_state(disk.state());
        salvage(&whole).unwrap();
        let kept = check(&whole).unwrap().deliveries_waiting;
        disk.record();
        salvage(&disk).unwrap();
        let mut rng = super::super::disk::sim::Rng::new(7);
        let mut images = 0;
        for state in disk.history() {
            for _ in 0..20 {
                let image = Sim::from_state(state.crash(&mut rng));
                salvage(&image).unwrap();
                assert_eq!(check(&image).unwrap().deliveries_waiting, kept);
                if !image.list().unwrap().iter().any(|n| n == removed) {
                    let copy = image.read(&format!("{removed}.salvaged")).unwrap();
                    assert!(copy == original, "the copy of a removed segment is whole");
                }
                images += 1;
            }
        }
        assert!(images > 100, "{images} images");
    }
}
