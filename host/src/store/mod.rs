//! The store: every byte of state, behind one seam.
//!
//! Domain code sees [`Store`] and the [`Records`] it offers: typed reads and
//! writes, one trait per aggregate (`records.rs`: meta, users, sessions,
//! groups, webhooks, automations, artifacts, runs, delivery, usage,
//! plugins, idempotency, receivers, limits),
//! and [`Store::begin`] for writes that must hold together. No engine is
//! named outside this folder; each engine lives in a folder of its own, one
//! file per aggregate, and `contract.rs` holds both to the same cases.
//!
//! Why typed operations rather than a key-value trait: the engines differ
//! most in exactly the places a key-value seam would hide. A relational
//! engine answers "which automations listen here" from an index, bumps a
//! version counter in one statement and adds usage with an upsert, where an
//! ordered key-value engine scans a prefix or reads and writes under a lock.
//! Each operation names what the domain needs, and each engine does it
//! its own best way.
//!
//! Every operation is atomic on its own. A [`Transaction`] makes several
//! atomic together: nothing is visible to others until
//! [`Transaction::commit`], and dropping it uncommitted discards it.

pub mod changes;
#[cfg(test)]
pub(crate) mod contract;
pub mod copy;
mod error;
mod kept;
pub mod own;
pub mod postgres;
mod records;
pub mod sled;

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

pub use changes::Changes;
pub use error::{Result, StoreError};
pub use kept::Kept;
/// The simulated disk crash tests run the embedded store on.
#[cfg(test)]
pub use sled::Sim as SimulatedDisk;

use crate::cfg::StoreConfig;
use crate::model::{Delivery, Event, Execution};

/// The meta key of the value that checks the master key (see `seal.rs`).
pub const MASTER_KEY_CHECK: &str = "master_key_check";

/// [`Engine::write_outcomes`] as a transaction of three writes.
pub async fn outcomes_in_transaction<E: Engine + ?Sized>(
    engine: &E,
    finished: &[Finished<'_>],
    attempts: &[AttemptFor<'_>],
    caused: &[Event],
) -> Result<()> {
    let tx = engine.begin().await?;
    tx.finish_deliveries(finished).await?;
    tx.record_attempts(attempts).await?;
    tx.insert_events(caused).await?;
    tx.commit().await
}

/// An execution a matched event fired, with its delivery if it has one, by
/// the index of its event among those being taken ([`Engine::write_fired`]).
pub type Fired = (usize, Execution, Option<Delivery>);

/// One stored record as bytes: its kind (a tree or table), key and value.
pub type RawRecord = (String, Vec<u8>, Vec<u8>);

pub use records::*;

/// Several operations that commit or vanish together.
#[async_trait]
pub trait Transaction: Records {
    /// Makes every write of the transaction visible at once.
    async fn commit(self: Box<Self>) -> Result<()>;
}

/// What an engine offers beyond [`Records`].
#[async_trait]
pub trait Engine: Records {
    /// Starts a transaction.
    async fn begin(&self) -> Result<Box<dyn Transaction>>;
    /// Takes the events `taken_from` out of the inbox and writes what they
    /// fired for those it took (`fired`: each execution, with its delivery
    /// if any, by the index of its event in `taken_from`), at once; which
    /// of the events it took. An engine may do it in one statement.
    async fn write_fired(&self, taken_from: &[&str], fired: &[Fired]) -> Result<Vec<bool>> {
        let tx = self.begin().await?;
        let taken = tx.take_events(taken_from).await?;
        let went = |f: &&Fired| taken.get(f.0).copied().unwrap_or(false);
        let fired: Vec<&Fired> = fired.iter().filter(went).collect();
        let executions: Vec<Execution> = fired.iter().map(|f| f.1.clone()).collect();
        let deliveries: Vec<Delivery> = fired.iter().filter_map(|f| f.2.clone()).collect();
        tx.put_executions(&executions).await?;
        tx.insert_deliveries(&deliveries).await?;
        tx.commit().await?;
        Ok(taken)
    }
    /// Writes what a batch of sends settled, at once: the deliveries
    /// finished or rescheduled, the attempts made, and the events they
    /// caused. An engine may do it in one statement.
    async fn write_outcomes(
        &self,
        finished: &[Finished<'_>],
        attempts: &[AttemptFor<'_>],
        caused: &[Event],
    ) -> Result<()> {
        outcomes_in_transaction(self, finished, attempts, caused).await
    }
    /// Returns once every write committed before the call is on disk.
    async fn durable(&self) -> Result<()>;
    /// A mark of the writes committed so far, for [`Engine::durable_to`].
    fn commit_mark(&self) -> u64 {
        0
    }
    /// Returns once every write committed before `mark` was taken is on
    /// disk: at once when a sync since has covered them.
    async fn durable_to(&self, mark: u64) -> Result<()> {
        let _ = mark;
        self.durable().await
    }
    /// Whether the disk holding the store is full, so that writes are
    /// refused (see `sled/reserve.rs`); never, for a database server.
    fn full(&self) -> bool {
        false
    }
    /// A real write, read and delete, for the system check.
    async fn round_trip(&self) -> Result<()>;
    /// Every stored record, raw (`switchyard admin dump-records`).
    async fn raw_records(&self) -> Result<Vec<RawRecord>>;
    /// Writes everything to disk and lets go of what this host holds (the
    /// leases of deliveries it claimed but did not send, so that a host
    /// takes them at once); called at shutdown, once sends have ended.
    async fn flush(&self) -> Result<()>;
    /// Removes the delivery history older than `keep` (executions with
    /// their attempts, once settled), in bulk; returns how many executions
    /// went.
    async fn expire_history(&self, keep: std::time::Duration) -> Result<usize>;
    /// What changed among the records hosts keep in memory
    /// (`store::Kept`: secrets, webhooks, automations, API keys, members,
    /// projects), on this host or another sharing the store, record by
    /// record: a value read under a stamp serves while it stands.
    fn changes(&self) -> &Changes;
    /// Resolves when another host sharing the store may have changed the
    /// uploaded plugins (this host's own changes may wake it too); never on
    /// a store with one host, whose uploads are all this host's.
    async fn plugins_changed(&self);
    /// How long a host holds a delivery it took before others may take it
    /// over, when several hosts share the store; the holder renews it while
    /// sending. `None` when the store has one host.
    fn lease(&self) -> Option<std::time::Duration>;
    /// Resolves, with the reason, once the store takes no more writes after
    /// a failed write or sync: the host must stop, and the next start
    /// recovers from the disk. Never, for an engine whose server keeps
    /// the data.
    async fn failed(&self) -> String {
        std::future::pending().await
    }
}

/// The one handle to the store. Cheap to clone; derefs to the engine, so
/// `store.user(id)` and `tx.user(id)` read alike.
#[derive(Clone)]
pub struct Store {
    engine: Arc<dyn Engine>,
}

impl Store {
    /// Opens the store the configuration names: PostgreSQL when
    /// `[store] url` is set, else the embedded store under `data_dir`; and
    /// brings its schema up to date.
    pub async fn open(cfg: &StoreConfig, data_dir: &Path) -> anyhow::Result<Store> {
        let engine: Arc<dyn Engine> = match &cfg.url {
            Some(url) => Arc::new(postgres::Postgres::open(url, cfg).await?),
            None => {
                let dir = data_dir.to_path_buf();
                let reserve = cfg.reserve_mb << 20;
                let open = move || sled::Sled::open_reserving(&dir, reserve);
                Arc::new(tokio::task::spawn_blocking(open).await??)
            }
        };
        Ok(Store { engine })
    }

    /// An embedded store in a new temporary folder, for unit tests; the
    /// folder goes when the `TempDir` does.
    #[cfg(test)]
    pub fn scratch() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_embedded(dir.path()).unwrap();
        (dir, store)
    }

    /// `switchyard store check`: reads the embedded store's journal in
    /// `dir` as a start would, changing nothing.
    pub fn check_embedded(dir: &Path) -> anyhow::Result<sled::Report> {
        sled::Sled::check(dir)
    }

    /// `switchyard store salvage`: repairs damage in the embedded store's
    /// journal in `dir` that stops a start; says what it did.
    pub fn salvage_embedded(dir: &Path) -> anyhow::Result<String> {
        sled::Sled::salvage(dir)
    }

    /// Opens (or creates) the embedded store in `dir`.
    pub fn open_embedded(dir: &Path) -> anyhow::Result<Store> {
        Ok(Store {
            engine: Arc::new(sled::Sled::open(dir)?),
        })
    }

    /// An embedded store in a new temporary folder whose journal is on a
    /// simulated disk (`sled/journal/disk/sim.rs`), for crash tests.
    #[cfg(test)]
    pub fn on_simulated_disk() -> (tempfile::TempDir, Store, sled::Sim) {
        let dir = tempfile::tempdir().unwrap();
        let disk = sled::Sim::new();
        let engine = sled::Sled::open_on(dir.path(), Arc::new(disk.clone()), 0).unwrap();
        (
            dir,
            Store {
                engine: Arc::new(engine),
            },
            disk,
        )
    }

    /// What a crash now would leave of the journal on `disk` (what was
    /// synced), reopened: the events in its inbox and sled's logged writes.
    #[cfg(test)]
    pub fn after_crash(disk: &sled::Sim) -> (Vec<String>, Vec<Vec<u8>>) {
        sled::after_crash(disk)
    }
}

impl Deref for Store {
    type Target = dyn Engine;

    fn deref(&self) -> &Self::Target {
        &*self.engine
    }
}
