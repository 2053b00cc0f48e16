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
mod runs;
mod sessions;
mod shared;
mod shown;
mod usage;
mod users;
mod webhooks;

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgSslMode};
use sqlx::{Postgres as Pg, Row};
use tokio::sync::{Mutex, MutexGuard};

use super::{Engine, RawRecord, Result, StoreError, Transaction};
use crate::cfg::StoreConfig;

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

/// Where the database announces writes to what hosts keep: secrets,
/// webhooks, automations, API keys and members, and uploaded plugins. The
/// payload names the table.
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
    /// See [`Engine::config_epoch`]: bumped by this host's own writes to
    /// what hosts keep as they commit, and by every notification the
    /// database sends when any host writes it (see
    /// `migrations/0005_config_notify.sql` and `0006_access_notify.sql`).
    config_epoch: AtomicU64,
    /// Told of every notification that the plugins table changed
    /// (`migrations/0008_plugins_notify.sql`); see [`Engine::plugins_changed`].
    plugins_changed: tokio::sync::Notify,
    /// The task that listens for them, stopped with the last handle.
    listener: std::sync::OnceLock<Stop>,
    /// Versions read outside a transaction: a version never changes once
    /// committed, nor goes, so a kept one serves until `Kept` ages it out
    /// (a tag request reads its version first).
    versions: crate::store::Kept<(String, String, u64), crate::model::Version>,
}

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
    /// The transaction wrote configuration: its commit bumps the epoch.
    config_written: AtomicBool,
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
        let engine = Postgres {
            shared: Arc::new(Shared {
                pool,
                host_id: format!("host_{}", crate::ids::random_hex(8)),
                lease_ms: cfg.lease_ms,
                url: url.to_string(),
                location,
                last_warned: Default::default(),
                config_epoch: AtomicU64::new(0),
                plugins_changed: tokio::sync::Notify::new(),
                listener: std::sync::OnceLock::new(),
                versions: Default::default(),
            }),
            tx: None,
            config_written: AtomicBool::new(false),
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
                        .map(|n| Some(n.payload() == PLUGINS_TABLE)),
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
                match heard {
                    Ok(Some(true)) => shared.plugins_changed.notify_one(),
                    Ok(Some(false)) => {
                        shared.config_epoch.fetch_add(1, Ordering::SeqCst);
                    }
                    // (Re)connected or lost: anything may have been missed.
                    Ok(None) | Err(_) => {
                        shared.config_epoch.fetch_add(1, Ordering::SeqCst);
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

    /// Marks a write to secrets, webhooks or automations: the epoch moves
    /// now, or when the transaction commits.
    pub(super) fn config_written(&self) {
        match &self.tx {
            Some(_) => self.config_written.store(true, Ordering::SeqCst),
            None => {
                self.shared.config_epoch.fetch_add(1, Ordering::SeqCst);
            }
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
        if self.config_written.load(Ordering::SeqCst) {
            self.shared.config_epoch.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

#[async_trait]
impl Engine for Postgres {
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
            config_written: AtomicBool::new(false),
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
            "UPDATE outbox SET lease_owner = NULL, lease_until_ms = NULL WHERE lease_owner = $1";
        self.execute(sqlx::query(release).bind(&self.shared.host_id))
            .await?;
        Ok(())
    }

    async fn expire_history(&self, keep: Duration) -> Result<usize> {
        let before = crate::ids::now_ms().saturating_sub(keep.as_millis() as u64);
        let mut c = self.conn().await?;
        let done =
            sqlx::query("DELETE FROM executions WHERE updated_at_ms < $1 AND status <> 'Pending'")
                .bind(before as i64)
                .execute(&mut *c)
                .await
                .map_err(|e| self.err(e))?;
        Ok(done.rows_affected() as usize)
    }

    fn config_epoch(&self) -> u64 {
        self.shared.config_epoch.load(Ordering::SeqCst)
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
