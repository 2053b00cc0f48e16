//! The embedded engine: sled, one tree per kind of configuration record
//! (see [`T`]), keys laid out so that listings are prefix scans (see
//! [`keys`]), values JSON so that a record can gain optional fields without
//! a migration; the delivery path's records in the journal (`journal/`),
//! which is also sled's write-ahead log (`wal.rs`).
//!
//! Writes are serialised by one async lock: a [`Transaction`] holds it from
//! `begin` to `commit` and buffers its writes, reading them back over the
//! trees; `commit` appends them to the journal as one commit, then applies
//! them to sled. A write
//! outside a transaction is a transaction of one operation. Reads outside a
//! transaction take no lock. sled's operations take microseconds, so one
//! writer at a time costs little, and it makes every transaction
//! serialisable without retries.
//!
//! The `meta` tree holds `schema_version`. On open, a store older than
//! [`SCHEMA_VERSION`] is brought up to date by [`MIGRATIONS`]; a newer one is
//! refused, so an old binary never misreads data written by a new one.

mod artifacts;
mod automations;
mod cache;
#[cfg(test)]
mod crash_tests;
#[cfg(test)]
pub use journal::disk::sim::Sim;

/// See `Store::after_crash`.
#[cfg(test)]
pub fn after_crash(disk: &Sim) -> (Vec<String>, Vec<Vec<u8>>) {
    let image = Sim::from_state(disk.state().durable());
    let (journal, logged) = journal::Journal::open(Arc::new(image)).unwrap();
    (journal.inbox().into_iter().map(|e| e.id).collect(), logged)
}
mod delivery;
mod groups;
mod idempotency;
mod journal;
pub use journal::Report;
pub mod keys;
mod limits;
mod meta;
mod plugins;
mod receivers;
mod reserve;
mod runs;
mod sessions;
mod shared;
mod usage;
mod users;
mod wal;
mod webhooks;

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sled::Transactional;
use tokio::sync::OwnedMutexGuard;

use super::{Engine, RawRecord, Result, StoreError, Transaction};

/// The schema this build reads and writes.
pub const SCHEMA_VERSION: u32 = 4;

/// Migrations, in order: entry `i` moves a store from version `i + 1` to `i + 2`.
/// A new schema version appends one function here.
const MIGRATIONS: &[fn(&Shared) -> anyhow::Result<()>] =
    &[index_user_names, labels_apart, journal_apart];

/// 1 → 2: users gained a name index.
fn index_user_names(shared: &Shared) -> anyhow::Result<()> {
    for value in shared.tree(T::Users).iter().values() {
        let user: crate::model::User = serde_json::from_slice(&value?)?;
        shared
            .tree(T::UserNames)
            .insert(user.name.as_bytes(), user.id.as_bytes())?;
    }
    Ok(())
}

/// 2 → 3: a version's aliases and tags moved out of its record into records
/// of their own, so labelling costs the same however many labels there are.
fn labels_apart(shared: &Shared) -> anyhow::Result<()> {
    #[derive(serde::Deserialize)]
    struct Labels {
        #[serde(default)]
        aliases: Vec<String>,
        #[serde(default)]
        tags: Vec<String>,
    }
    for item in shared.tree(T::Versions).iter() {
        let (key, value) = item?;
        let Ok(labels) = serde_json::from_slice::<Labels>(&value) else {
            continue; // unreadable: the quarantine takes it on its first read
        };
        for (t, label) in labels
            .aliases
            .iter()
            .map(|a| (T::VersionAliases, a))
            .chain(labels.tags.iter().map(|t| (T::Tags, t)))
        {
            let label_key = keys::Key::new().text(label).into_bytes();
            let seq = shared.db.generate_id()?.to_be_bytes();
            shared
                .tree(t)
                .insert([&key[..], &label_key].concat(), &seq)?;
        }
        let version: crate::model::Version = serde_json::from_slice(&value)?;
        shared
            .tree(T::Versions)
            .insert(key, serde_json::to_vec(&version)?)?;
    }
    Ok(())
}

/// 3 → 4: the inbox, outbox and executions moved to the journal; the move
/// itself is [`move_to_journal`], which needs the journal open. The version
/// keeps an older build from reading an outbox that is no longer there.
fn journal_apart(_: &Shared) -> anyhow::Result<()> {
    Ok(())
}

/// The trees that held the journal's records before schema 4.
const BEFORE_JOURNAL: [T; 3] = [T::Executions, T::Outbox, T::EventInbox];

/// Moves what the trees of [`BEFORE_JOURNAL`] hold into the journal, in
/// one commit made durable before the trees are cleared; a record that
/// cannot be read goes to the quarantine. Executions go first, so that
/// their deliveries refer to the bodies they carry.
fn move_to_journal(shared: &Shared) -> anyhow::Result<()> {
    use journal::Entry;
    if BEFORE_JOURNAL.iter().all(|t| shared.tree(*t).is_empty()) {
        return Ok(());
    }
    let mut entries = Vec::new();
    for t in BEFORE_JOURNAL {
        for item in shared.tree(t).iter() {
            let (key, value) = item?;
            let entry = match t {
                T::Executions => serde_json::from_slice(&value).map(|execution| Entry::Execution {
                    execution,
                    body: false,
                }),
                T::Outbox => serde_json::from_slice(&value).map(|delivery| Entry::Queued {
                    delivery,
                    body: None,
                }),
                _ => serde_json::from_slice(&value).map(|event| Entry::Event {
                    event: Box::new(event),
                }),
            };
            match entry {
                Ok(entry) => entries.push(entry),
                Err(e) => {
                    let (qkey, qvalue) = quarantine_record(t, &key, &value, &e.to_string())?;
                    shared.tree(T::Quarantine).insert(qkey, qvalue)?;
                }
            }
        }
    }
    let moved = entries.len();
    shared.journal.append(entries)?;
    shared.journal.sync()?;
    for t in BEFORE_JOURNAL {
        shared.tree(t).clear()?;
    }
    shared.db.flush()?;
    tracing::info!(
        records = moved,
        "moved the inbox, outbox and executions into the journal"
    );
    Ok(())
}

const SCHEMA_KEY: &[u8] = b"schema_version";

/// The trees, one per kind of record. The comment of each gives its key and
/// value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum T {
    /// Store-wide facts: the schema version, health probes.
    Meta,
    /// `user id` → `User`.
    Users,
    /// `user name` → `user id`.
    UserNames,
    /// `sha256(key) hex` → `ApiKey`. Only hashes are stored.
    ApiKeys,
    /// `user id \0 key id \0` → `sha256(key) hex`.
    UserKeys,
    /// `team` → `Group`.
    Teams,
    /// `team \0 user id \0` → `Member`.
    Members,
    /// `user id \0 team \0` → `Member`: the same, by user.
    Memberships,
    /// `registry` → `Group`.
    Registries,
    /// `registry \0 user id \0` → `Member`.
    RegistryMembers,
    /// `user id \0 registry \0` → `Member`.
    RegistryMemberships,
    /// `team \0 name \0` → `Secret`, value sealed.
    Secrets,
    /// `team \0 name \0` → `Webhook`.
    Webhooks,
    /// `team \0 project \0` → `Project`.
    Projects,
    /// `scope \0 name \0` → `Automation`, where a scope is `r \0 registry`
    /// or `p \0 team \0 project`.
    Automations,
    /// `scope \0 event type \0 name \0` → `()`.
    AutomationTriggers,
    /// `team \0 webhook \0 scope \0 name \0` → `Handle`.
    WebhookAutomations,
    /// `scope \0 name \0` → `Collection`.
    Collections,
    /// `scope \0 collection \0 index` → `Version`.
    Versions,
    /// `scope \0 collection \0 alias \0` → the index of the version holding it.
    Aliases,
    /// `scope \0 collection \0 index alias \0` → a sequence number: the
    /// aliases a version holds, in the order it got them.
    VersionAliases,
    /// `scope \0 collection \0 index tag \0` → a sequence number.
    Tags,
    /// `team \0 project \0 run id \0` → `Run`.
    Runs,
    /// `team \0 project \0 run id \0 metric \0` → its recent values.
    Metrics,
    /// Before schema 4: `event id` → `Event` not yet matched. The journal
    /// holds the inbox now.
    EventInbox,
    /// Before schema 4: `due ms \0 delivery id \0` → `Delivery`.
    Outbox,
    /// Before schema 4: `scope \0 automation \0 execution id \0` →
    /// `Execution`.
    Executions,
    /// `scope \0 automation \0 run id \0` → unix ms it last fired for the run.
    RunFired,
    /// `scope \0 automation \0` → when it fired, for its cooldown and
    /// rate limit (unix ms, oldest first).
    AutomationFires,
    /// `scope \0 day \0 model \0 key id` → `Totals`.
    Usage,
    /// `tree \0 key` → a record that could not be read, set aside with the
    /// reason so that it blocks nothing.
    Quarantine,
    /// `name` → `StoredPlugin`.
    Plugins,
    /// `sha256(session cookie) hex` → `Session`.
    Sessions,
    /// `sha256(authorization) hex : key` → `Idempotent`.
    Idempotency,
    /// `team \0 webhook \0` → `Circuit`.
    Circuits,
    /// `bucket \0` made-at ms (8 bytes) sequence (8 bytes) → the amount
    /// claimed (i64, 8 bytes): claims on inference rate limits.
    RateClaims,
    /// `sha256 hex` → expires-at ms (8 bytes) and the answer: the
    /// inference response cache.
    ResponseCache,
}

impl T {
    /// The table whose records this tree holds, if hosts keep them in
    /// memory (`store::Kept`: the delivery path's configuration, and what
    /// lets a caller in), as `store::changes::KEPT` names it.
    fn kept_as(self) -> Option<&'static str> {
        Some(match self {
            T::Secrets => "secrets",
            T::Webhooks => "webhooks",
            T::Automations | T::AutomationTriggers => "automations",
            T::ApiKeys | T::UserKeys => "api_keys",
            T::Projects => "projects",
            T::Members | T::Memberships | T::RegistryMembers | T::RegistryMemberships => "members",
            _ => return None,
        })
    }

    const ALL: [T; 37] = [
        T::Meta,
        T::Users,
        T::UserNames,
        T::ApiKeys,
        T::UserKeys,
        T::Teams,
        T::Members,
        T::Memberships,
        T::Registries,
        T::RegistryMembers,
        T::RegistryMemberships,
        T::Secrets,
        T::Webhooks,
        T::Projects,
        T::Automations,
        T::AutomationTriggers,
        T::WebhookAutomations,
        T::Collections,
        T::Versions,
        T::Aliases,
        T::VersionAliases,
        T::Tags,
        T::Runs,
        T::Metrics,
        T::EventInbox,
        T::Outbox,
        T::Executions,
        T::RunFired,
        T::AutomationFires,
        T::Usage,
        T::Quarantine,
        T::Plugins,
        T::Sessions,
        T::Idempotency,
        T::Circuits,
        T::RateClaims,
        T::ResponseCache,
    ];

    /// The tree's name on disk.
    fn name(self) -> &'static str {
        match self {
            T::Meta => "meta",
            T::Users => "users",
            T::UserNames => "user_names",
            T::ApiKeys => "api_keys",
            T::UserKeys => "user_keys",
            T::Teams => "teams",
            T::Members => "members",
            T::Memberships => "memberships",
            T::Registries => "registries",
            T::RegistryMembers => "registry_members",
            T::RegistryMemberships => "registry_memberships",
            T::Secrets => "secrets",
            T::Webhooks => "webhooks",
            T::Projects => "projects",
            T::Automations => "automations",
            T::AutomationTriggers => "automation_triggers",
            T::WebhookAutomations => "webhook_automations",
            T::Collections => "collections",
            T::Versions => "versions",
            T::Aliases => "aliases",
            T::VersionAliases => "version_aliases",
            T::Tags => "tags",
            T::Runs => "runs",
            T::Metrics => "metrics",
            T::EventInbox => "event_inbox",
            T::Outbox => "outbox",
            T::Executions => "executions",
            T::RunFired => "run_fired",
            T::AutomationFires => "automation_fires",
            T::Usage => "usage",
            T::Quarantine => "quarantine",
            T::Plugins => "plugins",
            T::Sessions => "sessions",
            T::Idempotency => "idempotency",
            T::Circuits => "circuits",
            T::RateClaims => "rate_claims",
            T::ResponseCache => "response_cache",
        }
    }
}

/// What every handle shares: the database, its trees, the journal, the
/// writer lock.
struct Shared {
    db: sled::Db,
    /// Indexed by `T as usize`.
    trees: Vec<sled::Tree>,
    /// The delivery path's records (see `journal/mod.rs`).
    journal: journal::Journal,
    /// Whether anything was written since the last checkpoint (`wal.rs`).
    dirty: Arc<wal::Dirty>,
    /// Commits whose writes wait for the journal's sync before sled gets
    /// them (`wal.rs`).
    unapplied: wal::Unapplied,
    writer: Arc<tokio::sync::Mutex<()>>,
    /// Held by a checkpoint, from its sync to its snapshot written (`wal.rs`).
    checkpointing: Mutex<()>,
    commits: GroupCommit,
    /// See [`Engine::changes`]: counted by table for every commit that
    /// writes a tree [`T::kept_as`] names.
    changes: crate::store::Changes,
    /// Each paced webhook's next free send slot (unix µs): one host's, so
    /// memory is enough.
    pace: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    /// Room kept back so that a full disk can clear itself.
    reserve: Arc<reserve::Reserve>,
    /// sled's directory, for messages.
    dir: std::path::PathBuf,
    /// Uploaded plugins' components, by SHA-256 (`plugins.rs`).
    components: std::path::PathBuf,
}

impl Shared {
    fn tree(&self, t: T) -> &sled::Tree {
        &self.trees[t as usize]
    }

    /// Applies to sled the commits the journal's sync covers (`wal.rs`).
    /// sled failing to take them is the store failing: fail-stop.
    fn apply_synced(&self) -> Result<()> {
        let synced = self.journal.marks().1;
        self.unapplied.apply_synced(synced, |overlay| {
            apply_to_sled(self, overlay).map_err(|e| self.sled_failed("applying a commit to", e))
        })
    }

    /// sled failed at `doing`: the store takes no more writes, as after a
    /// failed write or sync of the journal, and the process stops; the next
    /// start applies again from the journal what sled had not made durable.
    /// A full disk is named as such, and answered as `store_full`.
    fn sled_failed(&self, doing: &str, e: sled::Error) -> StoreError {
        let full = matches!(&e, sled::Error::Io(io) if io.raw_os_error() == Some(libc::ENOSPC));
        let why = self.journal.stop(format!(
            "{doing} sled's files in {} failed ({e}); the store takes no more writes. Restart \
             switchyard: it applies again from the journal what sled had not made durable",
            self.dir.display()
        ));
        if full {
            self.reserve.release();
            return StoreError::Full;
        }
        why
    }

    /// `result`, having given the reserve up if it says the disk is full
    /// (and woken the checkpointer, which looks for room from then on).
    fn noting_full<V>(&self, result: Result<V>) -> Result<V> {
        if let Err(StoreError::Full) = result {
            self.reserve.release();
            self.dirty.mark();
        }
        result
    }
}

/// Group commit: callers that need their writes on disk share one sync.
/// One caller at a time syncs, for everything written so far; the rest
/// wait for it to finish, all woken at once, and one of those whose
/// writes it did not cover syncs next.
#[derive(Default)]
struct GroupCommit {
    /// Held by the caller that syncs.
    syncing: tokio::sync::Mutex<()>,
    /// Woken when a sync ends.
    synced: tokio::sync::Notify,
}

/// A caller's turn to sync: when it ends (or the caller goes away), the
/// lock is let go before the waiters wake, so that one of them can take it.
struct Turn<'a> {
    syncing: Option<tokio::sync::MutexGuard<'a, ()>>,
    synced: &'a tokio::sync::Notify,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.syncing.take();
        self.synced.notify_waiters();
    }
}

/// A key and its value, as stored.
type Raw = (Vec<u8>, Vec<u8>);

/// Writes buffered by a transaction: `None` deletes.
type Overlay = BTreeMap<(T, Vec<u8>), Option<Vec<u8>>>;

/// A transaction's state: the writer lock, held, and its writes: to sled's
/// trees, and to the journal.
struct TxState {
    _writer: OwnedMutexGuard<()>,
    writes: Mutex<Overlay>,
    logged: Mutex<Vec<journal::Entry>>,
}

/// A handle to the sled store: the engine itself (no transaction), or a
/// transaction on it.
pub struct Sled {
    shared: Arc<Shared>,
    tx: Option<TxState>,
}

/// The sled tree an older build kept the journal's snapshot in.
const JOURNAL_INDEX: &str = "journal_index";

/// sled's page cache. Its default, 1 GiB, let a busy host's memory grow
/// with the data on disk; the hot records of the delivery path fit well
/// within this.
const CACHE_BYTES: u64 = 64 << 20;

impl Sled {
    /// Opens (or creates) the store in `dir` and brings its schema up to
    /// date, with the default reserve ([`reserve::BYTES`]).
    pub fn open(dir: &Path) -> anyhow::Result<Sled> {
        Sled::open_reserving(dir, reserve::BYTES)
    }

    /// [`Sled::open`], keeping `reserve` bytes back on the disk.
    pub fn open_reserving(dir: &Path, reserve: u64) -> anyhow::Result<Sled> {
        crate::files::create_dir(dir)
            .with_context(|| format!("cannot create data directory {}", dir.display()))?;
        let disk = journal::Real::new(&dir.join("journal"))
            .with_context(|| format!("cannot create the journal directory in {}", dir.display()))?;
        Sled::open_on(dir, Arc::new(disk), reserve)
    }

    /// `switchyard store check`: reads the journal in `dir` as a start
    /// would, changing nothing (a host may be running on it).
    pub fn check(dir: &Path) -> anyhow::Result<journal::Report> {
        let mut report = journal::check(&journal::Real::existing(&dir.join("journal"))?)?;
        let (stand, lost) = sled_stand(dir, &report);
        if lost && report.damage.is_none() {
            report.damage = Some(stand.clone());
        }
        report.sled = Some(stand);
        Ok(report)
    }

    /// `switchyard store salvage`: repairs damage in the journal in `dir`
    /// that stops a start (see [`journal::salvage`]); refused while a host
    /// holds the store. Says what it did.
    pub fn salvage(dir: &Path) -> anyhow::Result<String> {
        let _held = open_db(dir)?;
        journal::salvage(&journal::Real::existing(&dir.join("journal"))?)
    }

    /// [`Sled::open`] in an existing `dir`, with the journal on `disk`.
    pub(super) fn open_on(
        dir: &Path,
        disk: Arc<dyn journal::Disk>,
        reserve: u64,
    ) -> anyhow::Result<Sled> {
        // sled's lock first: a store another process holds keeps its
        // reserve. Then the reserve is given up: the rest of a start on a
        // full disk needs its room.
        let db = open_db(dir)?;
        // sled may just have made `db/`: its name durable with the rest.
        crate::files::sync_dir(dir)
            .with_context(|| format!("cannot sync the data directory {}", dir.display()))?;
        let reserve = Arc::new(reserve::Reserve::open(dir, reserve));
        let trees = T::ALL
            .iter()
            .map(|t| db.open_tree(t.name()))
            .collect::<sled::Result<Vec<_>>>()?;
        // Where an older build kept the journal's snapshot (now in the
        // journal's directory, `journal/tree.rs`).
        db.drop_tree(JOURNAL_INDEX)?;
        let (journal, logged) = journal::Journal::open(disk)?;
        let shared = Shared {
            db,
            trees,
            journal,
            dirty: Arc::default(),
            unapplied: wal::Unapplied::default(),
            writer: Arc::default(),
            checkpointing: Mutex::default(),
            commits: GroupCommit::default(),
            changes: Default::default(),
            pace: Default::default(),
            reserve,
            dir: dir.join("db"),
            components: dir.join("components"),
        };
        let logged = wal::to_redo(&shared, logged)?;
        wal::redo(&shared, logged)?;
        migrate(&shared)?;
        move_to_journal(&shared)?;
        // What open wrote went to sled directly: a checkpoint, so that no
        // older logged write is applied over it at the next open.
        wal::checkpoint_now(&shared)?;
        if !shared.reserve.restore() {
            tracing::error!(
                "started on a full disk: writes are refused (503 store_full) until it has room again"
            );
        }
        let shared = Arc::new(shared);
        wal::spawn_checkpointer(Arc::downgrade(&shared));
        Ok(Sled { shared, tx: None })
    }

    /// A transaction: waits for the writer lock.
    async fn transaction(&self) -> Sled {
        let writer = self.shared.writer.clone().lock_owned().await;
        Sled {
            shared: self.shared.clone(),
            tx: Some(TxState {
                _writer: writer,
                writes: Mutex::default(),
                logged: Mutex::default(),
            }),
        }
    }

    /// Where this operation writes: the transaction it is part of, or a
    /// transaction of its own, committed by [`Writer::finish`].
    async fn writer(&self) -> Writer<'_> {
        match self.tx {
            Some(_) => Writer::Joined(self),
            None => Writer::Own(self.transaction().await),
        }
    }

    fn tree(&self, t: T) -> &sled::Tree {
        self.shared.tree(t)
    }

    fn overlay(&self) -> Option<std::sync::MutexGuard<'_, Overlay>> {
        self.tx
            .as_ref()
            .map(|tx| tx.writes.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The journal entries this transaction has written so far.
    fn logged(&self) -> std::sync::MutexGuard<'_, Vec<journal::Entry>> {
        self.tx
            .as_ref()
            .expect("journal writes go through Sled::writer, which is a transaction")
            .logged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Buffers a journal entry; only on a transaction.
    fn log(&self, entry: journal::Entry) {
        self.logged().push(entry);
    }

    fn journal(&self) -> &journal::Journal {
        &self.shared.journal
    }

    /// The value under `key`, as this handle sees it.
    fn get(&self, t: T, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(overlay) = self.overlay()
            && let Some(value) = overlay.get(&(t, key.to_vec()))
        {
            return Ok(value.clone());
        }
        if let Some(value) = self.shared.unapplied.get(t, key) {
            return Ok(value);
        }
        Ok(self.tree(t).get(key).map_err(io)?.map(|v| v.to_vec()))
    }

    fn get_json<V: DeserializeOwned>(&self, t: T, key: &[u8]) -> Result<Option<V>> {
        self.get(t, key)?.map(|bytes| decode(t, &bytes)).transpose()
    }

    /// Every (key, value) whose key starts with `prefix`, in key order.
    fn scan(&self, t: T, prefix: &[u8]) -> Result<Vec<Raw>> {
        let sled = self.tree(t).scan_prefix(prefix);
        self.merged(t, sled, prefix, |key| key.starts_with(prefix))
    }

    /// Every (key, value) in `from..to`, in key order.
    fn range(&self, t: T, from: &[u8], to: &[u8]) -> Result<Vec<Raw>> {
        let sled = self.tree(t).range(from..to);
        self.merged(t, sled, from, |key| key < to)
    }

    /// Every (key, value) of `t`, in key order.
    fn all(&self, t: T) -> Result<Vec<Raw>> {
        self.merged(t, self.tree(t).iter(), &[], |_| true)
    }

    /// Whether `t` holds nothing, as this handle sees it.
    fn is_empty(&self, t: T) -> Result<bool> {
        let touched = self.shared.unapplied.touches(t) || self.overlay().is_some();
        if !touched {
            return Ok(self.tree(t).is_empty());
        }
        Ok(self.all(t)?.is_empty())
    }

    /// `sled`'s reading of keys from `from` on for which `within` holds,
    /// with the unapplied commits' writes and this transaction's laid over.
    fn merged(
        &self,
        t: T,
        sled: sled::Iter,
        from: &[u8],
        within: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<Raw>> {
        let mut found: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for item in sled {
            let (key, value) = item.map_err(io)?;
            found.insert(key.to_vec(), value.to_vec());
        }
        self.shared.unapplied.over(t, from, &within, &mut found);
        if let Some(overlay) = self.overlay() {
            for ((_, key), value) in overlay
                .range((t, from.to_vec())..)
                .take_while(|((tree, key), _)| *tree == t && within(key))
            {
                match value {
                    Some(value) => found.insert(key.clone(), value.clone()),
                    None => found.remove(key),
                };
            }
        }
        Ok(found.into_iter().collect())
    }

    fn scan_json<V: DeserializeOwned>(&self, t: T, prefix: &[u8]) -> Result<Vec<V>> {
        self.scan(t, prefix)?
            .iter()
            .map(|(_, value)| decode(t, value))
            .collect()
    }

    /// Buffers a write; only on a transaction (see [`Sled::writer`]).
    fn put(&self, t: T, key: impl Into<Vec<u8>>, value: Vec<u8>) {
        self.buffer(t, key.into(), Some(value));
    }

    fn put_json<V: Serialize>(&self, t: T, key: impl Into<Vec<u8>>, value: &V) -> Result<()> {
        self.put(t, key, serde_json::to_vec(value)?);
        Ok(())
    }

    /// Buffers a delete; only on a transaction.
    fn delete(&self, t: T, key: impl Into<Vec<u8>>) {
        self.buffer(t, key.into(), None);
    }

    fn buffer(&self, t: T, key: Vec<u8>, value: Option<Vec<u8>>) {
        let mut overlay = self
            .overlay()
            .expect("sled writes go through Sled::writer, which is a transaction");
        overlay.insert((t, key), value);
    }

    /// Commits the buffered writes: appended to the journal as one commit
    /// (a full disk fails it there, before anything else has it), then
    /// visible to every reader; sled gets them once the journal's sync
    /// covers the commit (`wal.rs`).
    fn apply(&self) -> Result<()> {
        let Some(tx) = &self.tx else {
            return Ok(());
        };
        let mut logged = std::mem::take(&mut *tx.logged.lock().unwrap_or_else(|p| p.into_inner()));
        let overlay = std::mem::take(&mut *tx.writes.lock().unwrap_or_else(|p| p.into_inner()));
        if !overlay.is_empty() {
            logged.push(wal::entry(&overlay));
        }
        if logged.is_empty() {
            return Ok(());
        }
        self.shared.dirty.mark();
        let appended = self.shared.journal.append(logged);
        let mark = self.shared.noting_full(appended)?;
        crate::store::own::note(mark);
        if overlay.is_empty() {
            return Ok(());
        }
        let kept: std::collections::BTreeSet<&str> =
            overlay.keys().filter_map(|(t, _)| t.kept_as()).collect();
        self.shared.unapplied.push(mark, overlay);
        // By table: one host is all there is to tell, and it keeps little.
        for table in kept {
            self.shared.changes.changed(table);
        }
        Ok(())
    }

    #[cfg(test)]
    fn schema_version(&self) -> anyhow::Result<u32> {
        read_schema_version(&self.shared)?.context("store has no schema version")
    }
}

/// Applies `overlay` to sled's trees. One write needs no batch: sled
/// writes its log buffer out for every batch and transaction, and the
/// journal already makes the commit atomic and durable (`wal.rs`);
/// batches and transactions keep a commit of several writes atomic for
/// readers of sled.
fn apply_to_sled(shared: &Shared, overlay: &Overlay) -> sled::Result<()> {
    if overlay.len() == 1 {
        let ((t, key), value) = overlay.iter().next().expect("one write");
        match value {
            Some(value) => shared.tree(*t).insert(key, value.as_slice()),
            None => shared.tree(*t).remove(key),
        }?;
        return Ok(());
    }
    let mut batches: BTreeMap<T, sled::Batch> = BTreeMap::new();
    for ((t, key), value) in overlay.iter() {
        let batch = batches.entry(*t).or_default();
        match value {
            Some(value) => batch.insert(key.as_slice(), value.as_slice()),
            None => batch.remove(key.as_slice()),
        }
    }
    match batches.len() {
        0 => Ok(()),
        1 => {
            let (t, batch) = batches.into_iter().next().expect("one batch");
            shared.tree(t).apply_batch(batch)
        }
        _ => {
            let (ts, batches): (Vec<T>, Vec<sled::Batch>) = batches.into_iter().unzip();
            let trees: Vec<&sled::Tree> = ts.iter().map(|t| shared.tree(*t)).collect();
            trees
                .as_slice()
                .transaction(|views| {
                    for (view, batch) in views.iter().zip(&batches) {
                        view.apply_batch(batch)?;
                    }
                    Ok(())
                })
                .map_err(|e: sled::transaction::TransactionError| match e {
                    sled::transaction::TransactionError::Abort(e)
                    | sled::transaction::TransactionError::Storage(e) => e,
                })
        }
    }
}

/// Where an operation writes (see [`Sled::writer`]).
enum Writer<'a> {
    /// The transaction the operation is part of.
    Joined(&'a Sled),
    /// A transaction of the operation's own.
    Own(Sled),
}

impl Writer<'_> {
    /// Commits an operation's own transaction; a joined one commits later.
    fn finish(self) -> Result<()> {
        match self {
            Writer::Joined(_) => Ok(()),
            Writer::Own(tx) => tx.apply(),
        }
    }
}

impl Deref for Writer<'_> {
    type Target = Sled;

    fn deref(&self) -> &Sled {
        match self {
            Writer::Joined(tx) => tx,
            Writer::Own(tx) => tx,
        }
    }
}

#[async_trait]
impl Transaction for Sled {
    async fn commit(self: Box<Self>) -> Result<()> {
        self.apply()
    }
}

#[async_trait]
impl Engine for Sled {
    async fn begin(&self) -> Result<Box<dyn Transaction>> {
        Ok(Box::new(self.transaction().await))
    }

    async fn durable(&self) -> Result<()> {
        self.durable_to(self.commit_mark()).await
    }

    fn full(&self) -> bool {
        self.shared.reserve.is_full()
    }

    fn commit_mark(&self) -> u64 {
        self.shared.journal.marks().0
    }

    async fn durable_to(&self, mark: u64) -> Result<()> {
        let c = &self.shared.commits;
        loop {
            // Registered before looking, so that a sync ending in between
            // still wakes this caller.
            let ended = c.synced.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.shared.journal.marks().1 >= mark {
                return Ok(());
            }
            let Ok(syncing) = c.syncing.try_lock() else {
                ended.await;
                continue;
            };
            let _turn = Turn {
                syncing: Some(syncing),
                synced: &c.synced,
            };
            // sled's writes are in the journal too (`wal.rs`); the sync
            // covers every commit so far, `mark` included.
            // Then sled gets what the sync covered (`wal.rs`).
            let shared = self.shared.clone();
            let synced = tokio::task::spawn_blocking(move || {
                shared.journal.sync()?;
                shared.apply_synced()
            })
            .await;
            return synced.map_err(|e| StoreError::Other(e.into()))?;
        }
    }

    async fn round_trip(&self) -> Result<()> {
        let key = keys::prefix(&["health", &crate::ids::random_hex(8)]).into_bytes();
        let value = crate::ids::random_hex(16).into_bytes();
        let w = self.writer().await;
        w.put(T::Meta, key.clone(), value.clone());
        w.finish()?;
        let read = self.get(T::Meta, &key)?;
        let w = self.writer().await;
        w.delete(T::Meta, key);
        w.finish()?;
        match read {
            Some(bytes) if bytes == value => Ok(()),
            Some(_) => Err(anyhow::anyhow!("read back a different value than was written").into()),
            None => Err(anyhow::anyhow!("a value just written could not be read back").into()),
        }
    }

    async fn raw_records(&self) -> Result<Vec<RawRecord>> {
        // sled then holds every commit made so far.
        self.durable().await?;
        let mut out = Vec::new();
        for name in self.shared.db.tree_names() {
            let tree = self.shared.db.open_tree(&name).map_err(io)?;
            let kind = String::from_utf8_lossy(&name).into_owned();
            for item in tree.iter() {
                let (key, value) = item.map_err(io)?;
                out.push((kind.clone(), key.to_vec(), value.to_vec()));
            }
        }
        for (key, value) in self.journal().raw()? {
            out.push(("journal".into(), key, value));
        }
        Ok(out)
    }

    // A checkpoint: the next start reads nothing of the journal but its
    // snapshot.
    async fn flush(&self) -> Result<()> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.noting_full(wal::checkpoint_now(&shared)))
            .await
            .map_err(|e| StoreError::Other(e.into()))?
            .map(|_| ())
    }

    async fn expire_history(&self, keep: std::time::Duration) -> Result<usize> {
        let shared = self.shared.clone();
        shared.journal.rotate_every(keep / 4);
        let before_ms = crate::ids::now_ms().saturating_sub(keep.as_millis() as u64);
        // Segments go only once sled holds every write they logged.
        tokio::task::spawn_blocking(move || {
            let expired = wal::checkpoint_now(&shared)
                .and_then(|(seg, _)| shared.journal.expire(before_ms, seg));
            shared.noting_full(expired)
        })
        .await
        .map_err(|e| StoreError::Other(e.into()))?
    }

    async fn plugins_changed(&self) {
        std::future::pending().await
    }

    fn lease(&self) -> Option<std::time::Duration> {
        None
    }

    fn changes(&self) -> &crate::store::Changes {
        &self.shared.changes
    }

    async fn failed(&self) -> String {
        self.shared.journal.failed().await
    }
}

fn migrate(shared: &Shared) -> anyhow::Result<()> {
    let found = match read_schema_version(shared)? {
        None if is_empty(shared) => {
            set_schema_version(shared, SCHEMA_VERSION)?;
            return Ok(());
        }
        // Data without a version predates versioning: treat it as version 1.
        None => 1,
        Some(version) => version,
    };
    if found > SCHEMA_VERSION {
        bail!(
            "the data directory uses schema version {found}, but this switchyard understands \
             up to {SCHEMA_VERSION}; run a newer switchyard or point --data-dir elsewhere"
        );
    }
    for version in found..SCHEMA_VERSION {
        let step = MIGRATIONS[(version - 1) as usize];
        step(shared).with_context(|| format!("migrating schema {version} → {}", version + 1))?;
        set_schema_version(shared, version + 1)?;
        tracing::info!(from = version, to = version + 1, "migrated store schema");
    }
    Ok(())
}

fn is_empty(shared: &Shared) -> bool {
    shared
        .db
        .tree_names()
        .iter()
        .filter_map(|name| shared.db.open_tree(name).ok())
        .all(|tree| tree.is_empty())
}

fn read_schema_version(shared: &Shared) -> anyhow::Result<Option<u32>> {
    let Some(bytes) = shared.tree(T::Meta).get(SCHEMA_KEY)? else {
        return Ok(None);
    };
    let arr: [u8; 4] = bytes
        .as_ref()
        .try_into()
        .context("schema_version is not a 4-byte number")?;
    Ok(Some(u32::from_be_bytes(arr)))
}

fn set_schema_version(shared: &Shared, version: u32) -> anyhow::Result<()> {
    shared
        .tree(T::Meta)
        .insert(SCHEMA_KEY, &version.to_be_bytes())?;
    Ok(())
}

/// Where sled's files in `dir` stand against the journal `report` read, for
/// `store check`, and whether acknowledged state is lost (what a start
/// would refuse). A running host holds sled's lock: it checked at its start.
fn sled_stand(dir: &Path, report: &journal::Report) -> (String, bool) {
    let db = dir.join("db");
    let at = |(seg, off): (u64, u64)| format!("segment {seg} offset {off}");
    let checkpoint = at(report.checkpoint);
    let opened = match db.is_dir() {
        true => sled::Config::new().path(&db).flush_every_ms(None).open(),
        false => return (format!("its files ({}) are missing", db.display()), true),
    };
    let held = match opened {
        Ok(opened) => opened
            .open_tree(T::Meta.name())
            .map_err(anyhow::Error::from)
            .and_then(|meta| wal::sled_at(&meta)),
        Err(e) if is_locked(&e) => {
            return (
                "in use by a running host, which compared it with the journal at its start".into(),
                false,
            );
        }
        Err(e) => {
            return (
                format!("its files in {} do not open ({e})", db.display()),
                true,
            );
        }
    };
    match held {
        Err(e) => (format!("its journal position does not read ({e})"), true),
        Ok(None) => ("it records no journal position (written by an older build, or empty); the next checkpoint records one".into(), false),
        Ok(Some(held)) if held >= report.checkpoint => (
            format!("holds the journal durably up to {}; the last checkpoint is at {checkpoint}: whole", at(held)),
            false,
        ),
        Ok(Some(held)) if report.oldest.is_some_and(|oldest| oldest <= held.0) => (
            format!(
                "holds the journal only up to {}, behind the last checkpoint at {checkpoint}: the next start applies the journal again from there",
                at(held)
            ),
            false,
        ),
        Ok(Some(held)) => (
            format!(
                "holds the journal only up to {}, behind the last checkpoint at {checkpoint}, and the journal no longer reaches back there: acknowledged state is lost; restore the data directory from a backup",
                at(held)
            ),
            true,
        ),
    }
}

/// Opens sled in `dir`. A store this process dropped may still be
/// finishing its last checkpoint on its own thread (`wal.rs`), holding the
/// directory's lock for a moment: a lock held is asked again for two
/// seconds before it is another process's.
fn open_db(dir: &Path) -> anyhow::Result<sled::Db> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        // Flushed by the checkpointer, not on a timer of sled's.
        let opened = sled::Config::new()
            .path(dir.join("db"))
            .cache_capacity(CACHE_BYTES)
            .flush_every_ms(None)
            .open();
        match opened {
            Ok(db) => return Ok(db),
            Err(e) if is_locked(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(open_error(dir, e)),
        }
    }
}

fn is_locked(err: &sled::Error) -> bool {
    let text = err.to_string();
    text.contains("lock") || text.contains("WouldBlock") || text.contains("temporarily unavailable")
}

fn open_error(dir: &Path, err: sled::Error) -> anyhow::Error {
    let text = err.to_string();
    if is_locked(&err) {
        anyhow::anyhow!(
            "the data directory {} is in use by another switchyard process ({text}); stop that \
             process or pass a different --data-dir",
            dir.display()
        )
    } else {
        anyhow::anyhow!("cannot open the store in {}: {text}", dir.display())
    }
}

/// The quarantine's key and record for an unreadable record of `t`; logs it.
fn quarantine_record(t: T, key: &[u8], value: &[u8], reason: &str) -> Result<Raw> {
    let record = serde_json::json!({
        "tree": t.name(),
        "key": hex::encode(key),
        "reason": reason,
        "at_ms": crate::ids::now_ms(),
        "value": String::from_utf8_lossy(value),
    });
    tracing::error!(tree = t.name(), key = %hex::encode(key), reason, "set an unreadable record aside in the quarantine");
    let quarantine_key = [t.name().as_bytes(), &[0], key].concat();
    Ok((quarantine_key, serde_json::to_vec(&record)?))
}

pub(super) fn io(e: sled::Error) -> StoreError {
    StoreError::Other(e.into())
}

fn decode<V: DeserializeOwned>(t: T, bytes: &[u8]) -> Result<V> {
    serde_json::from_slice(bytes)
        .with_context(|| format!("corrupt record in the store's {} tree", t.name()))
        .map_err(StoreError::Other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::*;

    #[test]
    fn fresh_store_records_the_current_schema() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sled::open(dir.path()).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[tokio::test]
    async fn version_1_stores_gain_the_user_name_index() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Sled::open(dir.path()).unwrap();
            let user = crate::model::User {
                operator: true,
                ..crate::store::contract::user("u1", "operator", 0)
            };
            assert!(store.insert_user(&user).await.unwrap());
            store.tree(T::UserNames).clear().unwrap();
            set_schema_version(&store.shared, 1).unwrap();
            store.shared.db.flush().unwrap();
        }
        let store = Sled::open(dir.path()).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert!(
            store
                .user_named("operator")
                .await
                .unwrap()
                .unwrap()
                .operator
        );
    }

    #[tokio::test]
    async fn version_2_stores_move_labels_out_of_version_records() {
        let dir = tempfile::tempdir().unwrap();
        let scope = crate::model::Scope::project("t", "p");
        let key = scope
            .parts()
            .iter()
            .fold(keys::Key::new(), |k, s| k.text(s))
            .text("c")
            .num(0)
            .into_bytes();
        {
            let store = Sled::open(dir.path()).unwrap();
            // A version record as schema 2 wrote it: labels inside.
            let old = serde_json::json!({"collection": "c", "version": "v0", "index": 0,
                "aliases": ["prod"], "tags": ["a", "b"], "metadata": {"x": 1},
                "created_by": "u", "created_at": 0});
            store
                .tree(T::Versions)
                .insert(&key, serde_json::to_vec(&old).unwrap())
                .unwrap();
            store
                .tree(T::Aliases)
                .insert(
                    [&key[..key.len() - 8], b"prod\0"].concat(),
                    &0u64.to_be_bytes(),
                )
                .unwrap();
            set_schema_version(&store.shared, 2).unwrap();
            store.shared.db.flush().unwrap();
        }
        let store = Sled::open(dir.path()).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        let v = store
            .labelled_version(&scope, "c", 0)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (v.aliases, v.tags),
            (vec!["prod".into()], vec!["a".into(), "b".into()])
        );
        let raw: serde_json::Value =
            serde_json::from_slice(&store.tree(T::Versions).get(&key).unwrap().unwrap()).unwrap();
        assert!(
            raw.get("tags").is_none() && raw.get("aliases").is_none(),
            "{raw}"
        );
        // Labels keep working after the move: the alias moves on.
        let mut v1 = v.version.clone();
        v1.index = 1;
        v1.version = "v1".into();
        store.insert_version(&scope, &v1).await.unwrap();
        assert_eq!(
            store
                .set_alias(
                    crate::store::VersionAt {
                        scope: &scope,
                        collection: "c",
                        index: 1,
                    },
                    "prod",
                )
                .await
                .unwrap(),
            Some(0)
        );
        let v0 = store
            .labelled_version(&scope, "c", 0)
            .await
            .unwrap()
            .unwrap();
        assert!(v0.aliases.is_empty());
    }

    #[tokio::test]
    async fn a_transaction_reads_its_own_writes_and_commits_them_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sled::open(dir.path()).unwrap();
        let tx = store.transaction().await;
        tx.put(T::Meta, b"a".to_vec(), b"1".to_vec());
        tx.put(T::Usage, b"b".to_vec(), b"2".to_vec());
        assert_eq!(tx.get(T::Meta, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.get(T::Meta, b"a").unwrap(), None, "not yet visible");
        tx.apply().unwrap();
        drop(tx);
        assert_eq!(store.get(T::Meta, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.get(T::Usage, b"b").unwrap(), Some(b"2".to_vec()));
        let dropped = store.transaction().await;
        dropped.delete(T::Meta, b"a".to_vec());
        drop(dropped);
        assert!(store.get(T::Meta, b"a").unwrap().is_some(), "discarded");
    }

    #[tokio::test]
    async fn version_3_stores_move_the_delivery_records_into_the_journal() {
        use crate::store::contract::{delivery, event, execution};
        let dir = tempfile::tempdir().unwrap();
        let (d, x) = (delivery("d1", 5), execution("x1", 1));
        {
            let store = Sled::open(dir.path()).unwrap();
            let put = |t: T, key: &[u8], value: Vec<u8>| store.tree(t).insert(key, value).unwrap();
            put(
                T::EventInbox,
                b"ev1",
                serde_json::to_vec(&event("ev1", 1)).unwrap(),
            );
            put(T::Outbox, b"d1", serde_json::to_vec(&d).unwrap());
            put(T::Executions, b"x1", serde_json::to_vec(&x).unwrap());
            put(T::Executions, b"x2", b"{not json".to_vec());
            set_schema_version(&store.shared, 3).unwrap();
            store.shared.db.flush().unwrap();
        }
        let store = Sled::open(dir.path()).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(crate::store::contract::inbox_ids(&store).await, ["ev1"]);
        let (due, _) = store
            .due_deliveries(u64::MAX, 10, &|_| false)
            .await
            .unwrap();
        assert_eq!(due, [d]);
        assert_eq!(
            store.execution(&x.automation, &x.id).await.unwrap(),
            Some(x)
        );
        assert_eq!(
            store.quarantined().await.unwrap(),
            1,
            "the unreadable one set aside"
        );
        for t in BEFORE_JOURNAL {
            assert!(store.tree(t).is_empty(), "{} emptied", t.name());
        }
        drop(store);
        let store = Sled::open(dir.path()).unwrap();
        assert_eq!(store.inbox().await.unwrap().len(), 1, "moved once, kept");
    }

    /// Deliveries alone (no write to sled) wake the checkpointer, and a
    /// clean stop checkpoints: the next start reads nothing of what they
    /// wrote (it replayed all of it, and a backlog's snapshot, before).
    #[tokio::test]
    async fn a_start_after_a_clean_stop_reads_nothing_of_what_was_delivered() {
        use crate::store::contract::delivery;
        let dir = tempfile::tempdir().unwrap();
        let store = Sled::open(dir.path()).unwrap();
        let deliveries: Vec<_> = (0..200)
            .map(|i| {
                let mut d = delivery(&format!("d{i}"), 1);
                d.body_sealed = crate::model::SealedBody::new(b"a body".to_vec());
                d
            })
            .collect();
        store.insert_deliveries(&deliveries).await.unwrap();
        assert!(
            store.shared.dirty.wait(std::time::Duration::ZERO),
            "the checkpointer was not woken"
        );
        let finished: Vec<_> = deliveries.iter().map(|d| (d, None)).collect();
        store.finish_deliveries(&finished).await.unwrap();
        store.flush().await.unwrap();
        drop(store);
        let store = Sled::open(dir.path()).unwrap();
        let read = store.shared.journal.read_at_start();
        assert!(read < 1_000, "the start read {read} bytes of the journal");
        assert_eq!(store.pending_deliveries().await.unwrap(), 0);
    }

    /// A body damaged on disk after the start read it (a bad sector) sets
    /// its delivery aside; the others still go.
    #[tokio::test]
    async fn an_unreadable_delivery_is_quarantined_and_the_rest_go() {
        use crate::store::contract::delivery;
        use journal::Disk;
        let dir = tempfile::tempdir().unwrap();
        let disk = Sim::new();
        let store = Sled::open_on(dir.path(), Arc::new(disk.clone()), 0).unwrap();
        let mut deliveries: Vec<_> = ["d1", "d2", "d3"].map(|id| delivery(id, 1)).into();
        for (d, body) in deliveries
            .iter_mut()
            .zip(["aaaaaaaa", "bbbbbbbb", "cccccccc"])
        {
            d.body_sealed = crate::model::SealedBody::new(body.as_bytes().to_vec());
        }
        store.insert_deliveries(&deliveries).await.unwrap();
        let mut segments = disk.list().unwrap();
        segments.retain(|n| n.ends_with(".log"));
        segments.sort();
        let name = segments.pop().unwrap();
        let bytes = disk.read(&name).unwrap();
        let at = bytes.windows(8).position(|w| w == b"bbbbbbbb").unwrap();
        disk.flip(&name, at);

        let (due, _) = store
            .due_deliveries(u64::MAX, 10, &|_| false)
            .await
            .unwrap();
        let ids: Vec<&str> = due.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["d1", "d3"]);
        assert_eq!(due[1].body_sealed.bytes(), b"cccccccc");
        assert_eq!(store.quarantined().await.unwrap(), 1);
        assert_eq!(
            store.pending_deliveries().await.unwrap(),
            2,
            "out of the outbox"
        );
        let set_aside = store.all(T::Quarantine).unwrap().remove(0).1;
        let set_aside: serde_json::Value = serde_json::from_slice(&set_aside).unwrap();
        assert!(
            set_aside["value"].as_str().unwrap().contains("\"d2\""),
            "{set_aside}"
        );
        assert!(
            set_aside["reason"].as_str().unwrap().contains("checksum"),
            "{set_aside}"
        );
    }

    /// Writers that each wait for their own commit share the syncs, and
    /// every one of them is on disk when its wait ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writers_share_syncs_and_each_is_durable_when_answered() {
        let (_dir, store, disk) = crate::store::Store::on_simulated_disk();
        let writers = (0..64).map(|i| {
            let store = store.clone();
            let disk = disk.clone();
            tokio::spawn(async move {
                let user = crate::model::User {
                    id: format!("u{i}"),
                    name: format!("user-{i:02}"),
                    operator: false,
                    created_at: 0,
                };
                store.insert_user(&user).await.unwrap();
                store.durable().await.unwrap();
                let (_, logged) = crate::store::Store::after_crash(&disk);
                let name = user.name.as_bytes();
                assert!(
                    logged
                        .iter()
                        .any(|w| w.windows(name.len()).any(|x| x == name)),
                    "{} answered before it was durable",
                    user.name
                );
            })
        });
        let all = futures_util::future::join_all(writers);
        for done in tokio::time::timeout(std::time::Duration::from_secs(20), all)
            .await
            .expect("every writer's wait ends")
        {
            done.unwrap();
        }
    }

    /// Finding 1 of issue 67: sled writes its log out on threads of its
    /// own, so a write it is handed may reach the disk before the journal
    /// frame that logs it. It is handed a commit only once the journal's
    /// sync covers it; readers see the commit meanwhile.
    #[tokio::test]
    async fn sled_gets_a_commit_only_once_the_journal_has_synced_it() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Sim::new();
        let store = Sled::open_on(dir.path(), Arc::new(disk.clone()), 0).unwrap();
        let user = crate::store::contract::user("u1", "ada", 0);
        assert!(store.insert_user(&user).await.unwrap());
        let sled = &store;
        assert!(
            sled.tree(T::Users).get(b"u1").unwrap().is_none(),
            "sled holds a commit the journal has not synced"
        );
        assert_eq!(
            store.user("u1").await.unwrap(),
            Some(user.clone()),
            "readers see it"
        );
        let (_, logged) = after_crash(&disk);
        assert!(logged.is_empty(), "not durable yet");
        store.durable().await.unwrap();
        assert!(
            sled.tree(T::Users).get(b"u1").unwrap().is_some(),
            "applied once synced"
        );
        assert_eq!(store.user("u1").await.unwrap(), Some(user));
    }

    /// sled's files holding less than the last checkpoint says (a power
    /// cut took what sled's flush had not made durable): the start applies
    /// the journal again from where sled stands, or, without the journal
    /// from there, refuses to start and says what was lost.
    #[tokio::test]
    async fn a_sled_behind_its_checkpoint_is_redone_from_its_own_position_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (early, late) = (
            crate::store::contract::user("u1", "early", 0),
            crate::store::contract::user("u2", "late", 0),
        );
        let kept_db = dir.path().join("kept-db");
        {
            let store = Sled::open(dir.path()).unwrap();
            assert!(store.insert_user(&early).await.unwrap());
            store.flush().await.unwrap();
            // sled's files as a power cut would leave them, had sled's
            // later flushes not been durable.
            drop(store);
            wal::tests::copy_dir(&dir.path().join("db"), &kept_db);
            let store = Sled::open(dir.path()).unwrap();
            assert!(store.insert_user(&late).await.unwrap());
            store.flush().await.unwrap();
        }
        std::fs::remove_dir_all(dir.path().join("db")).unwrap();
        wal::tests::copy_dir(&kept_db, &dir.path().join("db"));
        let report = Sled::check(dir.path()).unwrap();
        let stand = report.sled.clone().unwrap();
        assert!(stand.contains("applies the journal again"), "{stand}");
        assert!(report.damage.is_none(), "{report}");
        let store = Sled::open(dir.path()).unwrap();
        assert_eq!(store.user_named("late").await.unwrap(), Some(late.clone()));
        assert_eq!(store.user_named("early").await.unwrap(), Some(early));
        drop(store);
        let stand = Sled::check(dir.path()).unwrap().sled.unwrap();
        assert!(stand.contains("whole"), "{stand}");
        // sled's files gone altogether, and the journal's first segment
        // too: what sled held cannot be had again.
        std::fs::remove_dir_all(dir.path().join("db")).unwrap();
        let first = dir.path().join("journal").join("0000000000000001.log");
        std::fs::remove_file(&first).unwrap();
        let report = Sled::check(dir.path()).unwrap();
        assert!(report.damage.is_some(), "{report}");
        let err = format!("{:#}", Sled::open(dir.path()).err().expect("refused"));
        assert!(
            err.contains("acknowledged state is lost") && err.contains("db"),
            "{err}"
        );
    }

    /// Finding 4 of issue 67: sled failing is the store failing: no more
    /// writes, the host told to stop, and no retry of the failed flush.
    #[tokio::test]
    async fn a_sled_failure_stops_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sled::open(dir.path()).unwrap();
        let eio = sled::Error::Io(std::io::Error::from_raw_os_error(libc::EIO));
        let err = store.shared.sled_failed("flushing", eio);
        assert!(matches!(err, StoreError::Failed(_)), "{err:?}");
        let refused = store
            .insert_user(&crate::store::contract::user("u1", "ada", 0))
            .await
            .unwrap_err();
        assert!(matches!(refused, StoreError::Failed(_)), "{refused:?}");
        let why = tokio::time::timeout(std::time::Duration::from_secs(1), store.failed())
            .await
            .expect("the host is told to stop");
        assert!(why.contains("sled") && why.contains("flushing"), "{why}");
        let full = sled::Error::Io(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(matches!(
            store.shared.sled_failed("applying", full),
            StoreError::Full
        ));
    }

    /// Finding 6 of issue 67: an uploaded component is a file of its own,
    /// named by its content, not hex in a record and again in the journal.
    #[tokio::test]
    async fn an_uploaded_component_is_kept_once_as_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Sled::open(dir.path()).unwrap();
        let wasm = b"\0asm component bytes".repeat(50);
        let plugin = crate::model::StoredPlugin {
            name: "greeter".into(),
            kind: "payload-template".into(),
            version: "1.0.0".into(),
            sha256: "digest".into(),
            settings: serde_json::json!({}),
            wasm: wasm.clone(),
            uploaded_at_ms: 1,
        };
        store.put_plugin(&plugin).await.unwrap();
        store.durable().await.unwrap();
        let hexed = hex::encode(&wasm);
        let record = store.get(T::Plugins, b"greeter").unwrap().unwrap();
        assert!(!String::from_utf8_lossy(&record).contains(&hexed[..64]));
        let journal = std::fs::read_dir(dir.path().join("journal")).unwrap();
        for file in journal {
            let bytes = std::fs::read(file.unwrap().path()).unwrap();
            assert!(!bytes.windows(64).any(|w| w == &hexed.as_bytes()[..64]));
        }
        let files: Vec<_> = std::fs::read_dir(dir.path().join("components"))
            .unwrap()
            .map(|f| std::fs::read(f.unwrap().path()).unwrap())
            .collect();
        assert_eq!(files, [wasm]);
        assert_eq!(store.plugin("greeter").await.unwrap(), Some(plugin));
        assert!(store.delete_plugin("greeter").await.unwrap());
        assert_eq!(
            std::fs::read_dir(dir.path().join("components"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Sled::open(dir.path()).unwrap();
            set_schema_version(&store.shared, SCHEMA_VERSION + 1).unwrap();
            store.shared.db.flush().unwrap();
        }
        let err = Sled::open(dir.path()).err().unwrap();
        assert!(format!("{err:#}").contains("newer switchyard"), "{err:#}");
    }
}
