//! Start-up against history (`just bench-start`): the embedded store's
//! start time, RSS, open files and disk per retained event, with no
//! history and with `BENCH_HISTORY` settled deliveries (1,000,000 by
//! default), made through the event API and delivered to a local receiver
//! before the host stops. The events are aliases moving between versions
//! (100 a request), so that what the store holds besides the history is
//! the same size with and without it: a tag a delivery would leave a
//! million tags behind, live data a start reads. Each store is
//! started `STARTS` times; the median start (spawn to listening) is
//! printed beside the empty store's, as a ratio. Asserts nothing about
//! time. `BENCH_KEEP=1` keeps the stores and says where (to profile a
//! start).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::load::{Arrivals, PROJECT, VERSIONS, call, memory_mib, receiver, setup, wait_for};
use common::{NO_MODEL, percentile, start_host_in};

const STARTS: usize = 5;
const CLIENTS: usize = 16;
const BATCH: usize = 100;

fn main() {
    common::block_on(async {
        let history: usize = std::env::var("BENCH_HISTORY").map_or(1_000_000, |n| {
            n.parse().expect("BENCH_HISTORY is a number of deliveries")
        });
        let none = measure(0).await;
        let full = measure(history).await;
        println!();
        for (events, figures) in [(0, &none), (history, &full)] {
            println!("start[sled, {events} settled deliveries]: {figures}");
        }
        let per_event = full.disk_bytes.saturating_sub(none.disk_bytes) as f64 / history as f64;
        println!(
            "start with {history} settled deliveries: {:.2}x the start with none (median of {STARTS}); {per_event:.0} bytes of disk per retained event",
            full.start_ms / none.start_ms
        );
    });
}

/// What one store's starts came to.
struct Figures {
    start_ms: f64,
    rss_mib: f64,
    open_files: usize,
    disk_bytes: u64,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "start {:.0} ms (median), RSS {:.1} MiB, {} open files, {:.1} MiB on disk",
            self.start_ms,
            self.rss_mib,
            self.open_files,
            self.disk_bytes as f64 / (1 << 20) as f64
        )
    }
}

async fn measure(events: usize) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{NO_MODEL}[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n");
    let arrivals = Arrivals::default();
    let sink = receiver(arrivals.clone()).await;
    let host = start_host_in(dir.path(), &config, &[]);
    let http = reqwest::Client::new();
    setup(&http, &host.base, &sink).await;
    make_history(&http, &host.base, &arrivals, events).await;
    stop(host);
    let (mut starts, rss_mib, open_files) = restarts(dir.path(), &config).await;
    starts.sort_by(f64::total_cmp);
    if std::env::var_os("BENCH_KEEP").is_some() {
        println!("kept the store in {}", dir.keep().display());
        return Figures {
            start_ms: percentile(&starts, 0.5),
            rss_mib,
            open_files,
            disk_bytes: 0,
        };
    }
    Figures {
        start_ms: percentile(&starts, 0.5),
        rss_mib,
        open_files,
        disk_bytes: size_of(&dir.path().join("data")),
    }
}

/// Moves aliases until `events` deliveries have gone through the host at
/// `base`, from CLIENTS clients, and waits for them all.
async fn make_history(http: &reqwest::Client, base: &str, arrivals: &Arrivals, events: usize) {
    let automation = serde_json::json!({"name": "on-move",
        "event": {"type": "UPDATE_ARTIFACT_ALIAS", "alias_regex": ".*"},
        "webhook": {"team": "bench", "name": "sink"}, "action": "Webhooks",
        "payload": r#"{"event_type": "${event_type}", "tag": "${alias}@${artifact_version_string}", "from": "${previous_version_string}"}"#});
    call(
        http,
        base,
        "POST",
        &format!("{PROJECT}/automations"),
        automation,
    )
    .await;
    let made = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (http, base, next) = (http.clone(), base.to_string(), next.clone());
            tokio::spawn(async move {
                // Each client's aliases, placed on v0 (adding fires no move).
                let aliases: Vec<String> = (0..BATCH).map(|i| format!("c{client}-{i}")).collect();
                let to = |version: usize| {
                    format!("{PROJECT}/collections/model/versions/v{version}/aliases")
                };
                let body = |n: usize| serde_json::json!({"aliases": &aliases[..n]});
                call(&http, &base, "POST", &to(0), body(BATCH)).await;
                for round in 1.. {
                    let first = next.fetch_add(BATCH, Ordering::SeqCst);
                    if first >= events {
                        break;
                    }
                    let n = BATCH.min(events - first);
                    call(
                        &http,
                        &base,
                        "POST",
                        &to(1 + round % (VERSIONS - 1)),
                        body(n),
                    )
                    .await;
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    wait_for(arrivals, events, Duration::from_secs(1800))
        .await
        .expect("every event delivered within 30 minutes");
    if events > 0 {
        println!(
            "{events} events made and delivered in {:.0} s",
            made.elapsed().as_secs_f64()
        );
    }
}

/// Starts a host on `dir` STARTS times: each start's time (ms), and the
/// last one's RSS (MiB) and open files.
async fn restarts(dir: &std::path::Path, config: &str) -> (Vec<f64>, f64, usize) {
    let mut starts = Vec::new();
    let (mut rss_mib, mut open_files) = (0.0, 0);
    for _ in 0..STARTS {
        let began = Instant::now();
        let host = start_host_in(dir, config, &[]);
        starts.push(began.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pid = host.child.id();
        rss_mib = memory_mib(pid, "VmRSS:");
        open_files = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
        stop(host);
    }
    (starts, rss_mib, open_files)
}

/// Stops `host` with SIGTERM, as an operator would, and waits for it.
fn stop(mut host: common::Host) {
    unsafe { libc::kill(host.child.id() as i32, libc::SIGTERM) };
    let _ = host.child.wait();
}

/// The bytes the files under `dir` hold.
fn size_of(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => size_of(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum()
    })
}
