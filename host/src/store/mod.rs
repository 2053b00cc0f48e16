//! The store: every byte of state lives in sled, behind one [`Store`] handle.
//!
//! Nothing else in the host touches sled. Each kind of record has its own tree
//! (see [`Trees`]) and its own key layout (see [`keys`]); values are JSON, so a
//! record can gain optional fields without a migration.
//!
//! The `meta` tree holds `schema_version`. On open, a store older than
//! [`SCHEMA_VERSION`] is brought up to date by [`MIGRATIONS`]; a newer one is
//! refused, so an old binary never misreads data written by a new one.

pub mod keys;
pub mod tx;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use keys::Key;

/// The schema this build reads and writes.
pub const SCHEMA_VERSION: u32 = 2;

/// Migrations, in order: entry `i` moves a store from version `i + 1` to `i + 2`.
/// A new schema version appends one function here.
pub const MIGRATIONS: &[fn(&Store) -> anyhow::Result<()>] = &[index_user_names];

/// 1 → 2: users gained a name index.
fn index_user_names(store: &Store) -> anyhow::Result<()> {
    for value in store.trees.users.iter().values() {
        let user: crate::auth::User = serde_json::from_slice(&value?)?;
        store
            .trees
            .user_names
            .insert(user.name.as_bytes(), user.id.as_bytes())?;
    }
    Ok(())
}

const SCHEMA_KEY: &[u8] = b"schema_version";

/// The typed trees of the store.
#[derive(Clone)]
pub struct Trees {
    /// Store-wide facts: the schema version, health probes.
    pub meta: sled::Tree,
    /// `user id` → [`crate::auth::User`].
    pub users: sled::Tree,
    /// `user name` → `user id`.
    pub user_names: sled::Tree,
    /// `sha256(key) hex` → [`crate::auth::ApiKey`]. Only hashes are stored.
    pub api_keys: sled::Tree,
    /// `user id \0 key id \0` → `sha256(key) hex`: a user's keys, for listing and revoking.
    pub user_keys: sled::Tree,
    /// `team` → [`crate::groups::Record`].
    pub teams: sled::Tree,
    /// `team \0 user id \0` → [`crate::groups::Member`].
    pub members: sled::Tree,
    /// `user id \0 team \0` → [`crate::groups::Member`]: the same, by user.
    pub memberships: sled::Tree,
    /// `team \0 name \0` → [`crate::secrets::Secret`], value sealed.
    pub secrets: sled::Tree,
    /// `team \0 name \0` → [`crate::automation::webhooks::Webhook`].
    pub webhooks: sled::Tree,
    /// `registry` → [`crate::groups::Record`].
    pub registries: sled::Tree,
    /// `registry \0 user id \0` → [`crate::groups::Member`].
    pub registry_members: sled::Tree,
    /// `user id \0 registry \0` → [`crate::groups::Member`].
    pub registry_memberships: sled::Tree,
    /// `team \0 project \0` → [`crate::projects::Project`].
    pub projects: sled::Tree,
    /// `scope \0 name \0` → [`crate::automation::automations::Automation`],
    /// where a scope is `r \0 registry` or `p \0 team \0 project`.
    pub automations: sled::Tree,
    /// `scope \0 event type \0 name \0` → `()`: which automations an event
    /// in a scope can fire, without scanning the others.
    pub automation_triggers: sled::Tree,
    /// `team \0 webhook \0 scope \0 name \0` → `()`: the automations that
    /// use a webhook, so deleting it can name them.
    pub webhook_automations: sled::Tree,
    /// `scope \0 name \0` → [`crate::artifacts::Collection`].
    pub collections: sled::Tree,
    /// `scope \0 collection \0 index` → [`crate::artifacts::Version`].
    pub versions: sled::Tree,
    /// `scope \0 collection \0 alias \0` → the index of the version holding it.
    pub aliases: sled::Tree,
    /// `team \0 project \0 run id \0` → [`crate::runs::Run`].
    pub runs: sled::Tree,
    /// `team \0 project \0 run id \0 metric \0` → its recent values.
    pub metrics: sled::Tree,
    /// `event id` → [`crate::automation::events::Event`] not yet matched.
    pub event_inbox: sled::Tree,
    /// `due ms \0 delivery id \0` → [`crate::automation::outbox::Delivery`].
    pub outbox: sled::Tree,
    /// `scope \0 automation \0 execution id \0` →
    /// [`crate::automation::outbox::Execution`].
    pub executions: sled::Tree,
    /// `scope \0 automation \0 run id \0` → unix ms it last fired for the run.
    pub run_fired: sled::Tree,
    /// `scope \0 day \0 model \0 key id` → token totals (JSON).
    pub usage: sled::Tree,
    /// `tree \0 key` → a record that could not be read, set aside with the
    /// reason so that it blocks nothing (see [`Store::quarantine`]).
    pub quarantine: sled::Tree,
}

/// One stored record as bytes: its kind (tree), key and value.
pub type RawRecord = (String, Vec<u8>, Vec<u8>);

/// The one handle to the store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    /// The trees, for modules that own a record type. Shared, so that
    /// cloning a store (every request does) is one reference count, not
    /// one per tree.
    pub trees: Arc<Trees>,
    commits: Arc<GroupCommit>,
}

/// Group commit: callers that need their writes on disk share one flush.
#[derive(Default)]
struct GroupCommit {
    /// Bumped by each caller after its writes.
    requested: AtomicU64,
    /// Everything up to this request number is on disk.
    flushed: AtomicU64,
    /// One flush at a time.
    lock: tokio::sync::Mutex<()>,
}

impl Store {
    /// Opens (or creates) the store in `dir` and brings its schema up to date.
    pub fn open(dir: &Path) -> anyhow::Result<Store> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create data directory {}", dir.display()))?;
        let db = sled::Config::new()
            .path(dir.join("db"))
            .open()
            .map_err(|e| open_error(dir, e))?;
        let trees = Trees {
            meta: db.open_tree("meta")?,
            users: db.open_tree("users")?,
            api_keys: db.open_tree("api_keys")?,
            user_keys: db.open_tree("user_keys")?,
            user_names: db.open_tree("user_names")?,
            teams: db.open_tree("teams")?,
            members: db.open_tree("members")?,
            memberships: db.open_tree("memberships")?,
            secrets: db.open_tree("secrets")?,
            webhooks: db.open_tree("webhooks")?,
            registries: db.open_tree("registries")?,
            registry_members: db.open_tree("registry_members")?,
            registry_memberships: db.open_tree("registry_memberships")?,
            projects: db.open_tree("projects")?,
            automations: db.open_tree("automations")?,
            automation_triggers: db.open_tree("automation_triggers")?,
            webhook_automations: db.open_tree("webhook_automations")?,
            collections: db.open_tree("collections")?,
            versions: db.open_tree("versions")?,
            aliases: db.open_tree("aliases")?,
            runs: db.open_tree("runs")?,
            metrics: db.open_tree("metrics")?,
            event_inbox: db.open_tree("event_inbox")?,
            outbox: db.open_tree("outbox")?,
            executions: db.open_tree("executions")?,
            run_fired: db.open_tree("run_fired")?,
            usage: db.open_tree("usage")?,
            quarantine: db.open_tree("quarantine")?,
        };
        let store = Store {
            db,
            trees: Arc::new(trees),
            commits: Arc::default(),
        };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&self) -> anyhow::Result<()> {
        let found = match self.trees.meta.get(SCHEMA_KEY)? {
            None if self.is_empty() => {
                self.set_schema_version(SCHEMA_VERSION)?;
                return Ok(());
            }
            // Data without a version predates versioning: treat it as version 1.
            None => 1,
            Some(bytes) => decode_version(&bytes)?,
        };
        if found > SCHEMA_VERSION {
            bail!(
                "the data directory uses schema version {found}, but this switchyard understands \
                 up to {SCHEMA_VERSION}; run a newer switchyard or point --data-dir elsewhere"
            );
        }
        for version in found..SCHEMA_VERSION {
            let step = MIGRATIONS[(version - 1) as usize];
            step(self).with_context(|| format!("migrating schema {version} → {}", version + 1))?;
            self.set_schema_version(version + 1)?;
            tracing::info!(from = version, to = version + 1, "migrated store schema");
        }
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.db
            .tree_names()
            .iter()
            .filter_map(|name| self.db.open_tree(name).ok())
            .all(|tree| tree.is_empty())
    }

    fn set_schema_version(&self, version: u32) -> anyhow::Result<()> {
        self.trees.meta.insert(SCHEMA_KEY, &version.to_be_bytes())?;
        Ok(())
    }

    /// The schema version recorded in the store.
    pub fn schema_version(&self) -> anyhow::Result<u32> {
        match self.trees.meta.get(SCHEMA_KEY)? {
            Some(bytes) => decode_version(&bytes),
            None => bail!("store has no schema version"),
        }
    }

    /// A store-wide fact (see [`Trees::meta`]), if set.
    pub fn meta(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        Ok(self.trees.meta.get(key)?.map(|v| v.to_vec()))
    }

    /// Sets a store-wide fact.
    pub fn set_meta(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        self.trees.meta.insert(key, value)?;
        Ok(())
    }

    /// A real write, read and delete, for the system check.
    pub fn round_trip(&self) -> anyhow::Result<()> {
        let key = keys::prefix(&["health", &crate::ids::random_hex(8)]);
        let value = crate::ids::random_hex(16);
        self.trees.meta.insert(&key, value.as_bytes())?;
        let read = self.trees.meta.get(&key)?;
        self.trees.meta.remove(&key)?;
        match read {
            Some(bytes) if bytes == value.as_bytes() => Ok(()),
            Some(_) => bail!("read back a different value than was written"),
            None => bail!("a value just written could not be read back"),
        }
    }

    /// Returns once every write made before the call is on disk. Concurrent
    /// callers share one flush, so durability costs one fsync per batch,
    /// not per request.
    pub async fn durable(&self) -> anyhow::Result<()> {
        let c = &self.commits;
        let mine = c.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let _turn = c.lock.lock().await;
        if c.flushed.load(Ordering::SeqCst) >= mine {
            return Ok(());
        }
        // Every request numbered up to `target` wrote before taking its number.
        let target = c.requested.load(Ordering::SeqCst);
        self.db.flush_async().await?;
        c.flushed.store(target, Ordering::SeqCst);
        Ok(())
    }

    /// Moves an unreadable record out of `tree` into the quarantine, with
    /// why, and logs it: one bad record must never stop the sweep, the
    /// dispatcher or a listing.
    pub fn quarantine(&self, tree: &sled::Tree, key: &[u8], reason: &str) -> anyhow::Result<()> {
        let name = String::from_utf8_lossy(&tree.name()).into_owned();
        let Some(value) = tree.get(key)? else {
            return Ok(());
        };
        let record = serde_json::json!({
            "tree": name,
            "key": hex::encode(key),
            "reason": reason,
            "at_ms": crate::ids::now_ms(),
            "value": String::from_utf8_lossy(&value),
        });
        let quarantine_key = [name.as_bytes(), &[0], key].concat();
        self.trees
            .quarantine
            .insert(quarantine_key, to_json(&record)?)?;
        tree.remove(key)?;
        tracing::error!(tree = %name, key = %hex::encode(key), reason, "set an unreadable record aside in the quarantine");
        Ok(())
    }

    /// How many records the quarantine holds.
    pub fn quarantined(&self) -> usize {
        self.trees.quarantine.len()
    }

    /// Decodes every value whose key starts with `prefix`, in key order,
    /// quarantining (and leaving out) any that cannot be decoded.
    pub fn scan_readable<T: DeserializeOwned>(
        &self,
        tree: &sled::Tree,
        prefix: impl AsRef<[u8]>,
    ) -> anyhow::Result<Vec<T>> {
        let mut out = Vec::new();
        for item in tree.scan_prefix(prefix) {
            let (key, value) = item?;
            match serde_json::from_slice(&value) {
                Ok(record) => out.push(record),
                Err(e) => self.quarantine(tree, &key, &e.to_string())?,
            }
        }
        Ok(out)
    }

    /// Every stored record as (kind, key, value), raw: what `switchyard
    /// admin dump-records` prints, for checking what reaches the disk (no
    /// secret or key in plain text) whatever the engine.
    pub fn raw_records(&self) -> anyhow::Result<Vec<RawRecord>> {
        let mut out = Vec::new();
        for name in self.db.tree_names() {
            let tree = self.db.open_tree(&name)?;
            let kind = String::from_utf8_lossy(&name).into_owned();
            for item in tree.iter() {
                let (key, value) = item?;
                out.push((kind.clone(), key.to_vec(), value.to_vec()));
            }
        }
        Ok(out)
    }

    /// Writes everything to disk; called at shutdown.
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.db.flush_async().await?;
        Ok(())
    }
}

fn open_error(dir: &Path, err: sled::Error) -> anyhow::Error {
    let text = err.to_string();
    if text.contains("lock")
        || text.contains("WouldBlock")
        || text.contains("temporarily unavailable")
    {
        anyhow::anyhow!(
            "the data directory {} is in use by another switchyard process ({text}); stop that \
             process or pass a different --data-dir",
            dir.display()
        )
    } else {
        anyhow::anyhow!("cannot open the store in {}: {text}", dir.display())
    }
}

fn decode_version(bytes: &[u8]) -> anyhow::Result<u32> {
    let arr: [u8; 4] = bytes
        .try_into()
        .context("schema_version is not a 4-byte number")?;
    Ok(u32::from_be_bytes(arr))
}

/// Reads a JSON value from a tree.
pub fn get_json<T: DeserializeOwned>(
    tree: &sled::Tree,
    key: impl AsRef<[u8]>,
) -> anyhow::Result<Option<T>> {
    tree.get(key)?
        .map(|bytes| serde_json::from_slice(&bytes).context("corrupt record in store"))
        .transpose()
}

/// Encodes a value for storage.
pub fn to_json<T: Serialize>(value: &T) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec(value)?)
}

/// Stores `value` under `key` unless the key is taken; `false` if it was.
pub fn insert_new<T: Serialize>(
    tree: &sled::Tree,
    key: impl AsRef<[u8]>,
    value: &T,
) -> anyhow::Result<bool> {
    let swapped = tree.compare_and_swap(key, None as Option<&[u8]>, Some(to_json(value)?))?;
    Ok(swapped.is_ok())
}

/// Decodes every value whose key starts with `prefix`, in key order. An
/// empty prefix reads the whole tree.
pub fn scan_json<T: DeserializeOwned>(
    tree: &sled::Tree,
    prefix: impl AsRef<[u8]>,
) -> anyhow::Result<Vec<T>> {
    tree.scan_prefix(prefix)
        .values()
        .map(|value| serde_json::from_slice(&value?).context("corrupt record in store"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_store_records_the_current_schema() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        store.round_trip().unwrap();
    }

    #[test]
    fn version_1_stores_gain_the_user_name_index() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            crate::auth::bootstrap(&store, Some("a-long-bootstrap-key")).unwrap();
            store.trees.user_names.clear().unwrap();
            store.set_schema_version(1).unwrap();
            store.db.flush().unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.schema_version().unwrap(), 2);
        assert!(crate::auth::find_user(&store, "operator").unwrap().operator);
    }

    #[test]
    fn an_unreadable_record_is_set_aside_and_the_rest_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let tree = &store.trees.event_inbox;
        tree.insert("a", b"1".as_slice()).unwrap();
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        tree.insert("b", deep.as_bytes()).unwrap();
        tree.insert("c", b"3".as_slice()).unwrap();
        let read: Vec<serde_json::Value> = store.scan_readable(tree, []).unwrap();
        assert_eq!(read, [1, 3]);
        assert_eq!(store.quarantined(), 1);
        assert!(!tree.contains_key("b").unwrap(), "moved out of its tree");
        let (_, record) = store.trees.quarantine.iter().next().unwrap().unwrap();
        let record: serde_json::Value = serde_json::from_slice(&record).unwrap();
        assert_eq!(record["tree"], "event_inbox");
        assert!(
            record["reason"]
                .as_str()
                .unwrap()
                .contains("recursion limit"),
            "{record}"
        );
        let again: Vec<serde_json::Value> = store.scan_readable(tree, []).unwrap();
        assert_eq!(again, [1, 3]);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store.set_schema_version(SCHEMA_VERSION + 1).unwrap();
            store.db.flush().unwrap();
        }
        let err = Store::open(dir.path()).err().unwrap();
        assert!(format!("{err:#}").contains("newer switchyard"), "{err:#}");
    }
}
