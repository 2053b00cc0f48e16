//! Delivery figures (`just bench-delivery`): the real `switchyard` binary
//! with its durable outbox, a local receiver on loopback, and a load
//! generator driving the event API (adding tags, which fires a tag
//! automation with a payload template).
//!
//! For each store engine and host count it prints sustained events/s end
//! to end (event accepted → receiver acknowledged) under a closed loop of
//! concurrent clients spread over the hosts, the hosts' CPU per delivered
//! event (and PostgreSQL's, on that engine), the event-to-delivery latency
//! at a fixed 1,000 events/s, and RSS; then one summary line per run:
//! `delivery[ENGINE]: N events/s, M µs host CPU per event[, D µs database
//! CPU per event], p99 P ms at 1000/s, peak RSS R MiB` (the most any host
//! held at once, start included).
//! Every event must arrive exactly once, or the bench fails.
//!
//! Then the webhook turns FIFO and one client queues `FIFO_EVENTS` more,
//! 100 per request: the summary line gains the ordered events/s end to end
//! (`fifo N ordered events/s`), and the bench fails unless they arrived in
//! the order they were accepted (`BENCH_FIFO=off` leaves this out).
//!
//! `BENCH_STORE=sled|postgres` picks the engine (both by default),
//! `BENCH_HOSTS=1..3` the hosts on PostgreSQL (1 and 3 by default), and
//! `BENCH_DATABASE_URL` the PostgreSQL server (the local one by default).
//! Tags go to 500 versions in turn; on sled a second run puts every tag on
//! one version (`BENCH_LABELS=spread|one` runs only one of the two), to show
//! that an event costs the same however many tags its version has.
//! `BENCH_BATCH=N` sends N tags per request (the list form), each its own
//! event; `BENCH_EVENTS=N` sets the closed-loop run's events (20,000).
//! Asserts nothing about time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::load::{Arrivals, Labels, VERSIONS, memory_mib, receiver, setup, tag, wait_for};
use common::{Database, Host, NO_MODEL, cpu_seconds, cpu_seconds_of, percentile, start_host_with};

const CLIENTS: usize = 64;
const RATE_EVENTS: usize = 5_000;
const RATE_PER_SEC: u64 = 1_000;
const FIFO_EVENTS: usize = 2_000;

/// Events in the closed-loop run: `BENCH_EVENTS`, 20,000 by default (more
/// makes a longer, steadier sample).
fn throughput_events() -> usize {
    std::env::var("BENCH_EVENTS").map_or(20_000, |n| {
        n.parse().expect("BENCH_EVENTS is a number of events")
    })
}

fn main() {
    common::block_on(run());
}

/// The largest RSS (MiB) any of the hosts had since the last take, sampled
/// every 20 ms.
struct RssSampler {
    max_kib: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssSampler {
    fn start(pids: Vec<u32>) -> RssSampler {
        let max_kib = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let max = max_kib.clone();
        let task = tokio::spawn(async move {
            loop {
                for pid in &pids {
                    let kib = (memory_mib(*pid, "VmRSS:") * 1024.0) as u64;
                    max.fetch_max(kib, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        RssSampler { max_kib, task }
    }

    fn take_max(&self) -> f64 {
        self.max_kib.swap(0, Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a run keeps its state.
#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Sled,
    Postgres,
}

/// Every host of a run shares the master key.
const MASTER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

async fn run() {
    let engines = match std::env::var("BENCH_STORE").as_deref() {
        Ok("sled") => vec![Engine::Sled],
        Ok("postgres") => vec![Engine::Postgres],
        _ => vec![Engine::Sled, Engine::Postgres],
    };
    let host_counts: Vec<usize> = match std::env::var("BENCH_HOSTS") {
        Ok(n) => vec![n.parse().expect("BENCH_HOSTS is a number, 1 to 3")],
        Err(_) => vec![1, 3],
    };
    let labels = match std::env::var("BENCH_LABELS").as_deref() {
        Ok("spread") => vec![Labels::Spread],
        Ok("one") => vec![Labels::OneVersion],
        _ => vec![Labels::Spread, Labels::OneVersion],
    };
    let batch: usize = std::env::var("BENCH_BATCH").map_or(1, |n| {
        n.parse()
            .expect("BENCH_BATCH is a number of tags per request")
    });
    let mut summary = Vec::new();
    for engine in engines {
        let runs: Vec<(usize, Labels)> = match engine {
            Engine::Sled => labels.iter().map(|l| (1, *l)).collect(),
            Engine::Postgres => host_counts.iter().map(|h| (*h, labels[0])).collect(),
        };
        for (hosts, labels) in runs {
            summary.push(measure(engine, hosts, labels, batch).await);
        }
    }
    println!();
    for line in summary {
        println!("{line}");
    }
}

/// One run: `hosts` hosts on `engine`; returns its summary line.
async fn measure(engine: Engine, hosts: usize, labels: Labels, batch: usize) -> String {
    let arrivals = Arrivals::default();
    let receiver = receiver(arrivals.clone()).await;
    let (hosts, database) = start_hosts(engine, hosts).await;
    let label = label_of(engine, hosts.len(), labels, batch);
    let bases: Vec<String> = hosts.iter().map(|h| h.base.clone()).collect();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CLIENTS)
        .build()
        .unwrap();
    setup(&http, &bases[0], &receiver).await;
    print_rss_before_load(&hosts);
    let sampler = RssSampler::start(hosts.iter().map(|h| h.child.id()).collect());
    let spread = match labels {
        Labels::Spread => format!("tags spread over {VERSIONS} versions"),
        Labels::OneVersion => "every tag on one version".to_string(),
    };
    println!(
        "\nbench-delivery [{label}]: {spread}, {batch} per request, tag automation with a 5-variable template, signed + bearer"
    );
    let load = Load {
        http: &http,
        bases: &bases,
        arrivals: &arrivals,
        labels,
    };
    let closed = closed_loop(&load, &hosts, engine, batch).await;
    for host in &hosts {
        println!(
            "host RSS after throughput run: {:.1} MiB",
            memory_mib(host.child.id(), "VmRSS:")
        );
    }
    println!(
        "host RSS at most during the throughput run: {:.1} MiB",
        sampler.take_max()
    );
    let p99 = paced(&load, throughput_events()).await;
    check_exactly_once(&arrivals, throughput_events() + RATE_EVENTS);
    // (BENCH_FIFO=off leaves it out, for builds from before FIFO webhooks.)
    let fifo = match std::env::var("BENCH_FIFO").as_deref() {
        Ok("off") => String::new(),
        _ => {
            let per_s = fifo(&load, &receiver, throughput_events() + RATE_EVENTS).await;
            format!(", fifo {per_s:.0} ordered events/s")
        }
    };
    println!(
        "host RSS at most during the paced run: {:.1} MiB",
        sampler.take_max()
    );
    let peak_rss = hosts
        .iter()
        .map(|h| memory_mib(h.child.id(), "VmHWM:"))
        .fold(0.0, f64::max);
    drop(hosts);
    if let Some(db) = database {
        db.drop().await;
    }
    let Closed {
        events_per_s,
        cpu_us,
        db_us,
    } = closed;
    format!(
        "delivery[{label}]: {events_per_s:.0} events/s, {cpu_us:.0} µs host CPU per event{db_us}, p99 {p99:.1} ms at 1000/s, peak RSS {peak_rss:.0} MiB{fifo}"
    )
}

fn print_rss_before_load(hosts: &[Host]) {
    for host in hosts {
        println!(
            "host RSS before the load: {:.1} MiB (peak so far, start included: {:.1} MiB)",
            memory_mib(host.child.id(), "VmRSS:"),
            memory_mib(host.child.id(), "VmHWM:")
        );
    }
}

/// `n` hosts on `engine`, with the database they share on PostgreSQL.
async fn start_hosts(engine: Engine, n: usize) -> (Vec<Host>, Option<Database>) {
    let config = format!("{NO_MODEL}[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n");
    let database = match engine {
        Engine::Postgres => Some(Database::create().await),
        Engine::Sled => None,
    };
    let mut env = vec![("SWITCHYARD_MASTER_KEY", MASTER_KEY)];
    if let Some(db) = &database {
        env.push(("SWITCHYARD_STORE_URL", db.url.as_str()));
    }
    let hosts = (0..n).map(|_| start_host_with(&config, &env)).collect();
    (hosts, database)
}

/// The run's name in its summary line.
fn label_of(engine: Engine, hosts: usize, labels: Labels, batch: usize) -> String {
    let mut label = match (engine, hosts) {
        (Engine::Sled, _) => "sled".to_string(),
        (Engine::Postgres, 1) => "postgres".to_string(),
        (Engine::Postgres, n) => format!("postgres x{n}"),
    };
    if labels == Labels::OneVersion {
        label.push_str(", one version");
    }
    if batch > 1 {
        label.push_str(&format!(", {batch} per request"));
    }
    label
}

/// What the clients send through and where it arrives.
struct Load<'a> {
    http: &'a reqwest::Client,
    bases: &'a [String],
    arrivals: &'a Arrivals,
    labels: Labels,
}

/// The closed loop's figures.
struct Closed {
    events_per_s: f64,
    cpu_us: f64,
    /// The database's CPU per event, as the summary line says it (or "").
    db_us: String,
}

/// Closed loop: CLIENTS clients each send their share as fast as
/// answered, spread over the hosts; events/s end to end and CPU per event.
async fn closed_loop(load: &Load<'_>, hosts: &[Host], engine: Engine, batch: usize) -> Closed {
    let host_cpu = || -> f64 { hosts.iter().filter_map(|h| cpu_seconds(h.child.id())).sum() };
    let db_cpu = || (engine == Engine::Postgres).then(|| cpu_seconds_of("postgres"));
    let throughput_events = throughput_events();
    // The clients and the receiver share the two cores with the host: a
    // figure for what they cost says how much of the machine was left.
    let own_cpu = || cpu_seconds(std::process::id()).unwrap_or_default();
    let (cpu_before, db_before, own_before) = (host_cpu(), db_cpu(), own_cpu());
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let base = load.bases[c % load.bases.len()].clone();
            let (http, next, labels) = (load.http.clone(), next.clone(), load.labels);
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(batch, Ordering::SeqCst);
                    if i >= throughput_events {
                        break;
                    }
                    let n = batch.min(throughput_events - i);
                    tag(&http, &base, labels, i, n).await;
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    let accepted = started.elapsed();
    let done = wait_for(load.arrivals, throughput_events, Duration::from_secs(300))
        .await
        .expect("not every event was delivered within 300 s");
    let end_to_end = done - started;
    let cpu_us = (host_cpu() - cpu_before) * 1e6 / throughput_events as f64;
    let events_per_s = throughput_events as f64 / end_to_end.as_secs_f64();
    println!(
        "throughput ({CLIENTS} clients, {throughput_events} events): accepted {:.0} events/s, delivered end to end {events_per_s:.0} events/s",
        throughput_events as f64 / accepted.as_secs_f64(),
    );
    println!("host CPU per delivered event: {cpu_us:.0} µs");
    println!(
        "bench CPU per delivered event (clients and receiver): {:.0} µs",
        (own_cpu() - own_before) * 1e6 / throughput_events as f64
    );
    let db_us = match (db_before, db_cpu()) {
        (Some(before), Some(after)) => {
            let us = (after - before) * 1e6 / throughput_events as f64;
            println!("PostgreSQL CPU per delivered event: {us:.0} µs");
            format!(", {us:.0} µs database CPU per event")
        }
        _ => String::new(),
    };
    Closed {
        events_per_s,
        cpu_us,
        db_us,
    }
}

/// Open loop at a fixed rate, after the `first` events of the closed
/// loop: the p99 from sending an event to its arrival (ms).
async fn paced(load: &Load<'_>, first: usize) -> f64 {
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let base_count = load.arrivals.count.load(Ordering::SeqCst);
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / RATE_PER_SEC));
    let mut tasks = Vec::new();
    for i in 0..RATE_EVENTS {
        ticker.tick().await;
        let base = load.bases[i % load.bases.len()].clone();
        let (http, sent, labels) = (load.http.clone(), sent.clone(), load.labels);
        let i = first + i;
        sent.lock().unwrap().insert(format!("e{i}"), Instant::now());
        tasks.push(tokio::spawn(async move {
            tag(&http, &base, labels, i, 1).await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    wait_for(
        load.arrivals,
        base_count + RATE_EVENTS,
        Duration::from_secs(120),
    )
    .await
    .expect("not every paced event was delivered");
    let at = load.arrivals.at.lock().unwrap();
    let mut latencies: Vec<f64> = sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(tag, s)| at.get(tag).map(|a| (*a - *s).as_secs_f64() * 1e3))
        .collect();
    latencies.sort_by(f64::total_cmp);
    println!(
        "latency at {RATE_PER_SEC} events/s ({RATE_EVENTS} events): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(0.0)
    );
    percentile(&latencies, 0.99)
}

/// The webhook made FIFO, `FIFO_EVENTS` more queued by one client, 100
/// per request, after the `first`: ordered events/s end to end, once
/// every one arrived in the order it was accepted.
async fn fifo(load: &Load<'_>, receiver: &str, first: usize) -> f64 {
    let settings = common::load::webhook(receiver, true);
    let path = "/v1/teams/bench/webhooks/sink";
    common::load::call(load.http, &load.bases[0], "PUT", path, settings).await;
    let base_count = load.arrivals.count.load(Ordering::SeqCst);
    let started = Instant::now();
    for i in (0..FIFO_EVENTS).step_by(100) {
        tag(load.http, &load.bases[0], load.labels, first + i, 100).await;
    }
    let done = wait_for(
        load.arrivals,
        base_count + FIFO_EVENTS,
        Duration::from_secs(300),
    )
    .await
    .expect("not every FIFO event was delivered within 300 s");
    let at = load.arrivals.at.lock().unwrap();
    let mut order: Vec<(Instant, usize)> = (first..first + FIFO_EVENTS)
        .map(|i| (at[&format!("e{i}")], i))
        .collect();
    order.sort();
    let out_of_order = order.windows(2).filter(|w| w[1].1 < w[0].1).count();
    assert_eq!(out_of_order, 0, "FIFO events arrived out of order");
    let per_s = FIFO_EVENTS as f64 / (done - started).as_secs_f64();
    println!(
        "fifo ({FIFO_EVENTS} events, one client, 100 per request): {per_s:.0} ordered events/s end to end, in order"
    );
    per_s
}

/// Every one of `total` events arrived, each with its own delivery id, once.
fn check_exactly_once(arrivals: &Arrivals, total: usize) {
    let ids = arrivals.ids.lock().unwrap().clone();
    assert_eq!(
        ids.len(),
        total,
        "every event delivered, each with its own delivery id"
    );
    assert!(ids.values().all(|n| *n == 1), "a delivery id arrived twice");
    println!("exactly once: {total} events, {total} delivery ids, none twice");
}
