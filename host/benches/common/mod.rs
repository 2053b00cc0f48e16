//! What the benches share: a runtime, the real `switchyard` binary started
//! on a loopback port, and percentiles.

#![allow(
    dead_code,
    reason = "each bench is its own crate and uses only part of this module"
)]

pub mod load;

use std::future::Future;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The operator key every bench host is started with.
pub const KEY: &str = "sy_bench_operator_key_0123456789";

/// Config for a host without the embedded model, so a bench neither
/// downloads nor loads it (the host logs that it is missing).
pub const NO_MODEL: &str = "[inference]\nauto_pull = false\nmodel_path = \"{dir}/absent.gguf\"\n";

/// Runs `future` on a multi-threaded tokio runtime.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A running `switchyard serve`, killed on drop.
pub struct Host {
    /// The process.
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the release binary with `config` (TOML, may mention `{dir}` for
/// its temporary directory) and a fresh data directory.
pub fn start_host(config: &str) -> Host {
    start_host_with(config, &[])
}

/// [`start_host`] with extra environment variables (a store URL, a master
/// key).
pub fn start_host_with(config: &str, env: &[(&str, &str)]) -> Host {
    start_host_from(None, config, env)
}

/// [`start_host_with`] from `binary`, if given, rather than this build (or
/// BENCH_SWITCHYARD's).
pub fn start_host_from(binary: Option<&str>, config: &str, env: &[(&str, &str)]) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let mut host = start_host_of(binary, dir.path(), config, env);
    host._dir = Some(dir);
    host
}

/// [`start_host_with`] in `dir`, the caller's, which keeps the config
/// and the data directory (`dir/data`) between hosts.
pub fn start_host_in(dir: &Path, config: &str, env: &[(&str, &str)]) -> Host {
    start_host_of(None, dir, config, env)
}

fn start_host_of(binary: Option<&str>, dir: &Path, config: &str, env: &[(&str, &str)]) -> Host {
    use std::io::{BufRead, BufReader};
    let path = dir.join("switchyard.toml");
    std::fs::write(&path, config.replace("{dir}", &dir.display().to_string())).unwrap();
    // BENCH_SWITCHYARD runs another build, to compare two in one session.
    let binary = binary.map(std::ffi::OsString::from).unwrap_or_else(|| {
        std::env::var_os("BENCH_SWITCHYARD")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_switchyard").into())
    });
    let mut child = Command::new(binary)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("SWITCHYARD_BOOTSTRAP_KEY", KEY)
        .env("RUST_LOG", "error")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning switchyard");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let base = loop {
        let line = lines.next().expect("switchyard exited").unwrap();
        if let Some(base) = line.strip_prefix("switchyard listening on ") {
            break base.to_string();
        }
    };
    Host {
        child,
        base,
        _dir: None,
    }
}

/// The `p` quantile (0..=1) of sorted samples; NaN when there are none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// CPU time (user + system) every process named `name` has used, in
/// seconds (e.g. all of PostgreSQL's server processes).
pub fn cpu_seconds_of(name: &str) -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
        })
        .filter_map(cpu_seconds)
        .sum()
}

/// CPU time (user + system) the process `pid` has used, in seconds, read
/// from `/proc`; `None` where there is no `/proc`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux target Rust supports.
    Some(ticks / 100.0)
}

/// A database of the run's own on the benchmark's PostgreSQL server.
pub struct Database {
    /// The URL a host is given (`SWITCHYARD_STORE_URL`).
    pub url: String,
    admin: String,
    name: String,
}

impl Database {
    /// Creates it (`BENCH_DATABASE_URL` names the server).
    pub async fn create() -> Database {
        use sqlx::Connection;
        let admin = std::env::var("BENCH_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        let name = format!("sy_bench_{}", std::process::id());
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("BENCH_DATABASE_URL {admin}: {e}"));
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap();
        let mut url = url::Url::parse(&admin).unwrap();
        url.set_path(&format!("/{name}"));
        Database {
            admin,
            name,
            url: url.to_string(),
        }
    }

    /// Waits until every delivery in its outbox is held (none due within
    /// ten minutes) and their number holds still for half a second; how
    /// many, or a panic after `limit`.
    pub async fn wait_held(&self, limit: std::time::Duration) -> usize {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.url).await.unwrap();
        let deadline = std::time::Instant::now() + limit;
        let mut last = 0;
        loop {
            let soon = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64
                + 600_000;
            let (held, all): (i64, i64) =
                sqlx::query_as("SELECT count(*) FILTER (WHERE due_ms > $1), count(*) FROM outbox")
                    .bind(soon)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
            if held > 0 && held == all && held == last {
                return held as usize;
            }
            last = if held == all { held } else { 0 };
            assert!(
                std::time::Instant::now() < deadline,
                "deliveries still not all held after {limit:?}: {held} of {all}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    /// Drops it.
    pub async fn drop(self) {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&self.admin).await {
            let _ = sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut conn)
            .await;
        }
    }
}

/// CPU time each thread of `pid` has used, in nanoseconds, from
/// `/proc/PID/task/*/schedstat` (exact, where `/proc/PID/stat` counts in
/// 10 ms ticks); `None` where there is no `/proc`.
pub fn thread_cpu_ns(pid: u32) -> Option<std::collections::HashMap<u32, u64>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .filter_map(|task| {
                let tid: u32 = task.ok()?.file_name().to_str()?.parse().ok()?;
                let stat =
                    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
                Some((tid, stat.split_whitespace().next()?.parse().ok()?))
            })
            .collect(),
    )
}

/// Seconds of CPU used between two [`thread_cpu_ns`] readings: threads
/// started since count whole; threads that ended since are missed.
pub fn cpu_between(
    before: &std::collections::HashMap<u32, u64>,
    after: &std::collections::HashMap<u32, u64>,
) -> f64 {
    let ns: u64 = after
        .iter()
        .map(|(tid, now)| now.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    ns as f64 / 1e9
}
