//! The PostgreSQL engine: several hosts over one database serve as one.
//!
//! Real tables with typed columns and the indexes the queries need (see
//! `migrations/`); versioned migrations run at start, under sqlx's advisory
//! lock, so hosts starting together migrate once, and a database at a newer
//! schema than this binary is refused. What must hold across hosts is held
//! by the database, not by a host's memory: unique keys (an event leaves the
//! inbox once, a run fires once per window), upserts (usage adds up), and
//! leases on deliveries being sent (a dead host's deliveries come back when
//! its lease runs out).
//!
//! A handle is the engine itself (each operation on a pooled connection, in
//! a transaction of its own where it takes several statements) or a
//! transaction; operations are written once for both.

mod artifacts;
mod automations;
mod cache;
mod delivery;
mod groups;
mod idempotency;
mod limits;
mod meta;
mod plugins;
mod receivers;
mod rows;
mod runs;
mod sessions;
mod shared;
mod shown;
mod tagging;
mod usage;
mod users;
mod webhooks;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgSslMode};
use sqlx::{Postgres as Pg, Row};
use tokio::sync::{Mutex, MutexGuard};

use super::{Engine, RawRecord, Result, StoreError, Transaction};
use crate::cfg::StoreConfig;
use shared::Db;

/// The migrations, embedded: one file per schema version, listed here (a
/// test checks the list against the directory). Listed rather than read by
/// `sqlx::migrate!`, whose macros crate compiled sqlx a second time on
/// every cold build.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "schema", include_str!("migrations/0001_schema.sql")),
    (2, "plugins", include_str!("migrations/0002_plugins.sql")),
    (
        3,
        "delivery event time",
        include_str!("migrations/0003_delivery_event_time.sql"),
    ),
    (4, "sessions", include_str!("migrations/0004_sessions.sql")),
    (
        5,
        "config notify",
        include_str!("migrations/0005_config_notify.sql"),
    ),
    (
        6,
        "access notify",
        include_str!("migrations/0006_access_notify.sql"),
    ),
    (
        7,
        "session keys",
        include_str!("migrations/0007_session_keys.sql"),
    ),
    (
        8,
        "plugins notify",
        include_str!("migrations/0008_plugins_notify.sql"),
    ),
    (9, "throttle", include_str!("migrations/0009_throttle.sql")),
    (
        10,
        "run state",
        include_str!("migrations/0010_run_state.sql"),
    ),
    (
        11,
        "signing rotation",
        include_str!("migrations/0011_signing_rotation.sql"),
    ),
    (
        12,
        "idempotency",
        include_str!("migrations/0012_idempotency.sql"),
    ),
    (
        13,
        "receivers",
        include_str!("migrations/0013_receivers.sql"),
    ),
    (14, "gateway", include_str!("migrations/0014_gateway.sql")),
    (
        15,
        "rate_claims_folded",
        include_str!("migrations/0015_rate_claims_folded.sql"),
    ),
    (
        16,
        "receivers second round",
        include_str!("migrations/0016_receivers_second_round.sql"),
    ),
    (
        17,
        "disable after",
        include_str!("migrations/0017_disable_after.sql"),
    ),
    (
        18,
        "webhook auth",
        include_str!("migrations/0018_webhook_auth.sql"),
    ),
    (
        19,
        "webhook tls",
        include_str!("migrations/0019_webhook_tls.sql"),
    ),
    (20, "fifo", include_str!("migrations/0020_fifo.sql")),
    (
        21,
        "gateway second round",
        include_str!("migrations/0021_gateway_second_round.sql"),
    ),
    (22, "queue", include_str!("migrations/0022_queue.sql")),
    (
        23,
        "record changes",
        include_str!("migrations/0023_record_changes.sql"),
    ),
    (
        24,
        "usage cached tokens",
        include_str!("migrations/0024_usage_cached_tokens.sql"),
    ),
];

/// [`MIGRATIONS`] as sqlx runs them (the checksums `migrate!` would give).
#[derive(Debug)]
struct Embedded;

impl<'s> sqlx::migrate::MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> futures_util::future::BoxFuture<
        's,
        std::result::Result<Vec<sqlx::migrate::Migration>, sqlx::error::BoxDynError>,
    > {
        let migrations = MIGRATIONS
            .iter()
            .map(|(version, description, sql)| {
                sqlx::migrate::Migration::new(
                    *version,
                    (*description).into(),
                    sqlx::migrate::MigrationType::Simple,
                    (*sql).into(),
                    false,
                )
            })
            .collect();
        Box::pin(std::future::ready(Ok(migrations)))
    }
}

/// Where the database announces writes to what hosts keep: each record's
/// path (`store::changes`), or `plugins` for the uploaded plugins.
const CONFIG_CHANNEL: &str = "switchyard_config";

/// The payload of a change to the uploaded plugins.
const PLUGINS_TABLE: &str = "plugins";

/// What every handle shares.
struct Shared {
    pool: PgPool,
    /// Names this host as the holder of delivery leases.
    host_id: String,
    lease_ms: u64,
    /// The URL as configured: only to scrub its credentials from messages.
    url: String,
    /// Where the database is, for the log (see [`shown`]).
    location: String,
    /// When unavailability was last logged (ms), so an outage logs a line a
    /// second, not one per request.
    last_warned: std::sync::atomic::AtomicU64,
    /// See [`Engine::changes`]: counted for this host's own writes to what
    /// hosts keep as they commit, and for every notification the database
    /// sends when any host writes it (`migrations/0023_record_changes.sql`).
    changes: crate::store::Changes,
    /// Told of every notification that the plugins table changed
    /// (`migrations/0008_plugins_notify.sql`); see [`Engine::plugins_changed`].
    plugins_changed: tokio::sync::Notify,
    /// The task that listens for them, stopped with the last handle.
    listener: std::sync::OnceLock<Stop>,
    /// Where tag requests wait to be written together (`tagging.rs`); its
    /// task ends when this goes.
    tagging: tagging::Jobs,
    /// Versions read outside a transaction: a version never changes once
    /// committed, nor goes, so a kept one serves until `Kept` ages it out
    /// (a tag request reads its version first).
    versions: crate::store::Kept<(String, String, u64), crate::model::Version>,
}

/// The advisory lock whoever expires history holds (any number; this one
/// spells "sy-expiry" in ASCII, roughly).
const EXPIRY_LOCK: i64 = 0x7379_6578_7069_7279;

/// Executions deleted per statement when history expires: each statement
/// short, so it neither holds locks long nor writes a long transaction.
const EXPIRY_BATCH: i64 = 5_000;

/// Aborts a task when dropped.
struct Stop(tokio::task::AbortHandle);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A handle to the PostgreSQL store: the engine itself, or a transaction.
pub struct Postgres {
    shared: Arc<Shared>,
    tx: Option<Mutex<Option<sqlx::Transaction<'static, Pg>>>>,
    /// The kept records the transaction wrote (their paths), counted as
    /// changed when it commits.
    written: std::sync::Mutex<Vec<String>>,
}

/// A connection to run statements on: a pooled one, or the transaction's.
enum Conn<'a> {
    Pooled(PoolConnection<Pg>),
    Tx(MutexGuard<'a, Option<sqlx::Transaction<'static, Pg>>>),
}

impl Deref for Conn<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Conn::Pooled(c) => c,
            Conn::Tx(t) => t
                .as_ref()
                .expect("a transaction is used only before commit"),
        }
    }
}

impl DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Conn::Pooled(c) => c,
            Conn::Tx(t) => t
                .as_mut()
                .expect("a transaction is used only before commit"),
        }
    }
}

/// How to connect to `url`. A server on this machine (a loopback address)
/// is spoken to without TLS unless the URL or `PGSSLMODE` asks for it:
/// sqlx prefers TLS where the server offers it, and on loopback it
/// protects nothing while costing both processes CPU on every statement.
///
/// Without JIT: every statement here is short, and a planner's estimate
/// past `jit_above_cost` (a correlated subquery's, say, as in the FIFO
/// claim) compiled one for 17 ms that ran in half of one, costing the
/// database a third more CPU per delivery.
fn connect_options(url: &str) -> std::result::Result<PgConnectOptions, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    let options = options.options([("jit", "off")]);
    let asked =
        url.to_ascii_lowercase().contains("sslmode=") || std::env::var_os("PGSSLMODE").is_some();
    let host = options.get_host();
    let loopback = host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    Ok(match (asked, loopback) {
        (false, true) => options.ssl_mode(PgSslMode::Disable),
        _ => options,
    })
}

impl Postgres {
    /// Connects, and brings the schema up to date. Fails with a message
    /// that names the problem and where the database is, never a credential.
    pub async fn open(url: &str, cfg: &StoreConfig) -> anyhow::Result<Postgres> {
        let location = shown::location(url);
        let options = connect_options(url).map_err(|e| {
            anyhow::anyhow!(
                "[store] url (SWITCHYARD_STORE_URL) is not a PostgreSQL URL, {location}: {}",
                shown::scrub(&e.to_string(), url)
            )
        })?;
        let pool = PgPoolOptions::new()
            .max_connections(cfg.max_connections.max(2))
            .acquire_timeout(Duration::from_millis(cfg.connect_timeout_ms))
            .connect_with(options)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot connect to the store, {location}: {}; check [store] url \
                     (SWITCHYARD_STORE_URL) and that the server is running",
                    shown::scrub(&e.to_string(), url)
                )
            })?;
        migrate(&pool)
            .await
            .map_err(|e| anyhow::anyhow!("{}", shown::scrub(&format!("{e:#}"), url)))?;
        let tagging = tagging::start(pool.clone());
        let engine = Postgres {
            shared: Arc::new(Shared {
                pool,
                host_id: format!("host_{}", crate::ids::random_hex(8)),
                lease_ms: cfg.lease_ms,
                url: url.to_string(),
                location,
                last_warned: Default::default(),
                changes: Default::default(),
                plugins_changed: tokio::sync::Notify::new(),
                listener: std::sync::OnceLock::new(),
                tagging,
                versions: Default::default(),
            }),
            tx: None,
            written: Default::default(),
        };
        Ok(engine.listening())
    }

    /// Starts following other hosts' configuration and plugin changes; a
    /// lost connection counts as both, since one may have been missed.
    fn listening(self) -> Postgres {
        let shared = Arc::downgrade(&self.shared);
        let pool = self.shared.pool.clone();
        let task = tokio::spawn(async move {
            let mut listener = None;
            loop {
                let heard = match listener.as_mut() {
                    Some(l) => sqlx::postgres::PgListener::recv(l)
                        .await
                        .map(|n| Some(n.payload().to_string())),
                    None => match sqlx::postgres::PgListener::connect_with(&pool).await {
                        Ok(mut l) => l.listen(CONFIG_CHANNEL).await.map(|()| {
                            listener = Some(l);
                            None
                        }),
                        Err(e) => Err(e),
                    },
                };
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                match &heard {
                    Ok(Some(p)) if p == PLUGINS_TABLE => shared.plugins_changed.notify_one(),
                    Ok(Some(path)) => shared.changes.changed(path),
                    // (Re)connected or lost: anything may have been missed.
                    Ok(None) | Err(_) => {
                        shared.changes.everything();
                        shared.plugins_changed.notify_one();
                    }
                }
                drop(shared);
                if heard.is_err() {
                    listener = None;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        });
        let _ = self.shared.listener.set(Stop(task.abort_handle()));
        self
    }

    /// Marks a write to the kept record at `path`: counted as changed now,
    /// or when the transaction commits.
    pub(super) fn changed(&self, path: String) {
        match &self.tx {
            Some(_) => self
                .written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(path),
            None => self.shared.changes.changed(&path),
        }
    }

    async fn conn(&self) -> Result<Conn<'_>> {
        match &self.tx {
            Some(tx) => Ok(Conn::Tx(tx.lock().await)),
            None => Ok(Conn::Pooled(
                self.shared
                    .pool
                    .acquire()
                    .await
                    .map_err(|e| self.shared.unavailable(e))?,
            )),
        }
    }

    fn err(&self, e: sqlx::Error) -> StoreError {
        if is_unavailable(&e) {
            self.shared.unavailable(e)
        } else {
            StoreError::Other(anyhow::anyhow!(
                "PostgreSQL: {}",
                shown::scrub(&e.to_string(), &self.shared.url)
            ))
        }
    }
}

impl Postgres {
    /// Deletes settled executions last changed before `before`, in
    /// batches read from `executions_by_update`; how many.
    async fn expire_in_batches(&self, c: &mut PgConnection, before: u64) -> Result<usize> {
        let mut expired = 0;
        loop {
            // Settled (by its last attempt, or its own status) and last
            // changed before `before`; found from when it fired, which is
            // earlier still.
            let done: i64 = sqlx::query_scalar(
                "WITH gone AS (DELETE FROM executions WHERE ctid = ANY(ARRAY( \
                 SELECT e.ctid FROM executions e LEFT JOIN LATERAL (SELECT a.status, a.at_ms \
                  FROM attempts a WHERE a.scope = e.scope AND a.automation = e.automation \
                  AND a.execution_id = e.id ORDER BY a.seq DESC LIMIT 1) l \
                  ON l.at_ms >= e.updated_at_ms \
                 WHERE e.created_at_ms < $1 AND greatest(e.updated_at_ms, l.at_ms) < $1 \
                 AND coalesce(l.status, e.status) <> 'Pending' LIMIT $2)) \
                 RETURNING scope, automation, id), \
                 attempts_gone AS (DELETE FROM attempts a USING gone g WHERE a.scope = g.scope \
                  AND a.automation = g.automation AND a.execution_id = g.id) \
                 SELECT count(*) FROM gone",
            )
            .bind(i64::try_from(before).unwrap_or(i64::MAX))
            .bind(EXPIRY_BATCH)
            .fetch_one(&mut *c)
            .await
            .map_err(|e| self.err(e))?;
            expired += done as usize;
            if done < EXPIRY_BATCH {
                return Ok(expired);
            }
        }
    }
}

async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    let migrator = sqlx::migrate::Migrator::new(Embedded).await?;
    let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    let versioned: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    let applied: Option<i64> = if versioned {
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
            .fetch_one(pool)
            .await?
    } else {
        None
    };
    if let Some(applied) = applied
        && applied > known
    {
        anyhow::bail!(
            "the PostgreSQL store uses schema version {applied}, but this switchyard understands up \
             to {known}; run a newer switchyard, or point [store] url at another database"
        );
    }
    migrator
        .run(pool)
        .await
        .map_err(|e| anyhow::anyhow!("migrating the PostgreSQL store: {e}"))
}

#[async_trait]
impl Transaction for Postgres {
    async fn commit(self: Box<Self>) -> Result<()> {
        let Some(tx) = &self.tx else {
            return Ok(());
        };
        let Some(tx) = tx.lock().await.take() else {
            return Ok(());
        };
        tx.commit().await.map_err(|e| self.err(e))?;
        let written = std::mem::take(&mut *self.written.lock().unwrap_or_else(|p| p.into_inner()));
        for path in written {
            self.shared.changes.changed(&path);
        }
        Ok(())
    }
}

#[async_trait]
impl Engine for Postgres {
    /// One statement: the events taken, and what they fired written for
    /// those it took (the rest were taken by another host or the sweep).
    async fn write_fired(&self, taken_from: &[&str], fired: &[super::Fired]) -> Result<Vec<bool>> {
        let executions: Vec<crate::model::Execution> = fired.iter().map(|f| f.1.clone()).collect();
        let deliveries: Vec<crate::model::Delivery> =
            fired.iter().filter_map(|f| f.2.clone()).collect();
        let by = |f: &super::Fired| taken_from.get(f.0).copied().unwrap_or_default();
        let executions_by: Vec<&str> = fired.iter().map(by).collect();
        let deliveries_by: Vec<&str> = fired.iter().filter(|f| f.2.is_some()).map(by).collect();
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            let (e, d) = (2, 2 + rows::EXECUTION_PARAMS);
            format!(
                "WITH taken AS (DELETE FROM event_inbox WHERE id = ANY($1) RETURNING id), \
                 executions AS ({}), deliveries AS ({}) SELECT id FROM taken",
                rows::executions_insert(e, "WHERE e.taken_by IN (SELECT id FROM taken)"),
                rows::outbox_insert(d, "WHERE d.taken_by IN (SELECT id FROM taken)"),
            )
        });
        let lease_until = crate::ids::now_ms().saturating_add(self.shared.lease_ms);
        let lease = (self.shared.host_id.as_str(), lease_until);
        let q = sqlx::query(&SQL).bind(taken_from);
        let q = rows::bind_executions(q, &executions, executions_by)?;
        let with = (deliveries.as_slice(), rows::Body::WithExecution);
        let q = rows::bind_deliveries(q, with, deliveries_by, lease);
        let mut c = self.conn().await?;
        let taken = q.fetch_all(&mut *c).await.db(self)?;
        shared::answered(&taken, taken_from.iter().copied())
    }

    /// One statement, unless the sends caused events (rare: a webhook
    /// disabled, a delivery exhausted), which take a transaction.
    async fn write_outcomes(
        &self,
        finished: &[super::Finished<'_>],
        attempts: &[super::AttemptFor<'_>],
        caused: &[crate::model::Event],
    ) -> Result<()> {
        if !caused.is_empty() {
            return super::outcomes_in_transaction(self, finished, attempts, caused).await;
        }
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            let (done, retried) = rows::finish(1);
            let recorded = rows::attempts_insert(1 + rows::FINISH_PARAMS);
            format!(
                "WITH done AS ({done}), retried AS ({retried}), recorded AS ({recorded}) \
                 SELECT count(*) FROM recorded"
            )
        });
        let q = rows::bind_finish(sqlx::query(&SQL), finished);
        let q = rows::bind_attempts(q, attempts, crate::ids::now_ms())?;
        self.execute(q).await?;
        Ok(())
    }

    async fn begin(&self) -> Result<Box<dyn Transaction>> {
        let tx = self
            .shared
            .pool
            .begin()
            .await
            .map_err(|e| self.shared.unavailable(e))?;
        Ok(Box::new(Postgres {
            shared: self.shared.clone(),
            tx: Some(Mutex::new(Some(tx))),
            written: Default::default(),
        }))
    }

    async fn durable(&self) -> Result<()> {
        // A commit returns once PostgreSQL has it on disk.
        Ok(())
    }

    async fn round_trip(&self) -> Result<()> {
        let key = format!("health/{}", crate::ids::random_hex(8));
        let value = crate::ids::random_hex(16).into_bytes();
        let mut c = self.conn().await?;
        let read: Option<Vec<u8>> = sqlx::query_scalar(
            "WITH written AS (INSERT INTO meta (key, value) VALUES ($1, $2) RETURNING value) \
             SELECT value FROM written",
        )
        .bind(&key)
        .bind(&value)
        .fetch_optional(&mut *c)
        .await
        .map_err(|e| self.err(e))?;
        sqlx::query("DELETE FROM meta WHERE key = $1")
            .bind(&key)
            .execute(&mut *c)
            .await
            .map_err(|e| self.err(e))?;
        match read {
            Some(bytes) if bytes == value => Ok(()),
            _ => Err(anyhow::anyhow!("a value just written could not be read back").into()),
        }
    }

    async fn raw_records(&self) -> Result<Vec<RawRecord>> {
        let mut c = self.conn().await?;
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1",
        )
        .fetch_all(&mut *c)
        .await
        .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for table in tables {
            // Table names come from the catalogue, quoted as identifiers.
            let rows = sqlx::query(&format!(
                "SELECT to_jsonb(t)::text AS row FROM \"{}\" t",
                table.replace('"', "\"\"")
            ))
            .fetch_all(&mut *c)
            .await
            .map_err(|e| self.err(e))?;
            for row in rows {
                let text: String = row.try_get("row").map_err(|e| self.err(e))?;
                out.push((table.clone(), Vec::new(), text.into_bytes()));
            }
        }
        Ok(out)
    }

    async fn flush(&self) -> Result<()> {
        let release =
            "UPDATE outbox SET lease_owner = NULL, visible_at = due_ms WHERE lease_owner = $1";
        self.execute(sqlx::query(release).bind(&self.shared.host_id))
            .await?;
        Ok(())
    }

    async fn expire_history(&self, keep: Duration) -> Result<usize> {
        let before = crate::ids::now_ms().saturating_sub(keep.as_millis() as u64);
        // One host at a time: whoever holds the lock does it for all, and
        // the others go back to their work.
        let mut c = self.conn().await?;
        let mine: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(EXPIRY_LOCK)
            .fetch_one(&mut *c)
            .await
            .map_err(|e| self.err(e))?;
        if !mine {
            return Ok(0);
        }
        let expired = self.expire_in_batches(&mut c, before).await;
        let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(EXPIRY_LOCK)
            .execute(&mut *c)
            .await;
        let expired = expired?;
        unlocked.map_err(|e| self.err(e))?;
        Ok(expired)
    }

    fn changes(&self) -> &crate::store::Changes {
        &self.shared.changes
    }

    async fn plugins_changed(&self) {
        self.shared.plugins_changed.notified().await
    }

    fn lease(&self) -> Option<Duration> {
        Some(Duration::from_millis(self.shared.lease_ms))
    }
}

/// Whether `e` means the database cannot be reached (rather than that a
/// statement failed).
fn is_unavailable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed
    ) || matches!(e, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("57P") || c.starts_with("08")))
}

impl Shared {
    /// The error callers see, and a log line (at most one a second) that
    /// says where the database is and why it cannot be reached.
    fn unavailable(&self, e: sqlx::Error) -> StoreError {
        use std::sync::atomic::Ordering;
        let now = crate::ids::now_ms();
        let last = self.last_warned.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 1_000
            && self
                .last_warned
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                store = %self.location,
                cause = %shown::scrub(&e.to_string(), &self.url),
                "the store is unavailable"
            );
        }
        StoreError::Unavailable
    }
}

#[cfg(test)]
mod connect_tests {
    use super::*;

    #[test]
    fn loopback_servers_are_spoken_to_without_tls_unless_asked() {
        let mode = |url: &str| format!("{:?}", connect_options(url).unwrap().get_ssl_mode());
        assert_eq!(mode("postgres://u@127.0.0.1:5432/db"), "Disable");
        assert_eq!(mode("postgres://u@localhost/db"), "Disable");
        assert_eq!(mode("postgres://u@[::1]:5432/db"), "Disable");
        assert_eq!(mode("postgres://u@db.example.com/db"), "Prefer");
        assert_eq!(mode("postgres://u@127.0.0.1/db?sslmode=require"), "Require");
    }
}

#[cfg(test)]
mod migration_tests {
    use super::MIGRATIONS;

    /// Every file in `migrations/` is listed, in order, as `migrate!` would
    /// name it; a file added but not listed would never run.
    #[test]
    fn every_migration_file_is_listed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../src/store/postgres/migrations");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS
            .iter()
            .map(|(version, description, _)| {
                format!("{version:04}_{}.sql", description.replace(' ', "_"))
            })
            .collect();
        assert_eq!(listed, files);
        for ((_, _, sql), file) in MIGRATIONS.iter().zip(&files) {
            let on_disk = std::fs::read_to_string(dir.join(file)).unwrap();
            assert_eq!(*sql, on_disk, "{file}");
        }
    }
}
