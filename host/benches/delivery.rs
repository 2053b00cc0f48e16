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
//! event; `BENCH_EVENTS=N` sets the closed-loop run's events (20,000);
//! `BENCH_CLIENTS=N` the closed loop's clients (64 on sled, 16 on
//! PostgreSQL).
//!
//! On PostgreSQL two more runs with one host (`BENCH_VARIANTS=plain,backlog,
//! config` picks): with a backlog (100,000 deliveries held for a receiver
//! that was down, its webhook disabled by its 410; after the load it comes
//! back, its webhook is enabled, and the line gains the drain's events/s),
//! and with a configuration write every 100 ms during the load. Set
//! `BENCH_AGAINST=PATH` to a `switchyard` of another build, and one host on
//! PostgreSQL runs with each build in turn for `BENCH_ROUNDS` rounds (3),
//! the order swapped each round: the summary gains each round's line and
//! the medians of host plus database CPU per event, with their ratio.
//! Asserts nothing about time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::load::{Arrivals, Labels, VERSIONS, memory_mib, receiver, setup, tag, wait_for};
use common::{Database, Host, NO_MODEL, cpu_seconds, cpu_seconds_of, percentile};
use serde_json::json;

/// Closed-loop clients: `BENCH_CLIENTS`, else 64 on sled and 16 on
/// PostgreSQL (where fewer clients mean smaller batches: the harder case).
fn clients(engine: Engine) -> usize {
    match std::env::var("BENCH_CLIENTS") {
        Ok(n) => n.parse().expect("BENCH_CLIENTS is a number of clients"),
        Err(_) if engine == Engine::Sled => 64,
        Err(_) => 16,
    }
}
/// Deliveries waiting for a receiver that is down, in the backlog run.
const BACKLOG: usize = 100_000;
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

/// What a PostgreSQL run adds to the plain load.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// The load alone.
    Plain,
    /// [`BACKLOG`] deliveries held for a receiver that is down while the
    /// load runs; then it comes back and they drain.
    Backlog,
    /// A configuration write every 100 ms during the load (another team's
    /// webhook saved again).
    ConfigWrites,
}

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
    // BENCH_VARIANTS=plain,backlog,config picks PostgreSQL's runs (all).
    let variants: Vec<Variant> = std::env::var("BENCH_VARIANTS")
        .unwrap_or_else(|_| "plain,backlog,config".into())
        .split(',')
        .map(|v| match v.trim() {
            "plain" => Variant::Plain,
            "backlog" => Variant::Backlog,
            "config" => Variant::ConfigWrites,
            other => panic!("BENCH_VARIANTS: '{other}' is not plain, backlog or config"),
        })
        .collect();
    let mut summary = Vec::new();
    for engine in engines {
        let mut runs: Vec<(usize, Labels, Variant)> = match engine {
            Engine::Sled => labels.iter().map(|l| (1, *l, Variant::Plain)).collect(),
            Engine::Postgres => host_counts
                .iter()
                .filter(|_| variants.contains(&Variant::Plain))
                .map(|h| (*h, labels[0], Variant::Plain))
                .collect(),
        };
        if engine == Engine::Postgres {
            let more = variants.iter().filter(|v| **v != Variant::Plain);
            runs.extend(more.map(|v| (1, labels[0], *v)));
        }
        for (hosts, labels, variant) in runs {
            let run = Run {
                engine,
                hosts,
                labels,
                batch,
                variant,
                binary: None,
            };
            summary.push(measure(run).await.line);
        }
    }
    // BENCH_AGAINST=PATH: this build and the one at PATH, alternated.
    if let Ok(against) = std::env::var("BENCH_AGAINST") {
        summary.extend(against_build(&against).await);
    }
    println!();
    for line in summary {
        println!("{line}");
    }
}

/// `BENCH_AGAINST=PATH`: one host on PostgreSQL, this build and the one at
/// PATH alternated for `BENCH_ROUNDS` rounds (3), the order swapped each
/// round; each build's host-plus-database CPU per event, and the ratio:
/// the summary's lines.
async fn against_build(against: &str) -> Vec<String> {
    let rounds: usize = std::env::var("BENCH_ROUNDS").map_or(3, |n| {
        n.parse().expect("BENCH_ROUNDS is a number of rounds")
    });
    let this = std::env::var("BENCH_SWITCHYARD")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_switchyard").to_string());
    let builds = [("this build", this), ("BENCH_AGAINST", against.to_string())];
    let mut totals: [Vec<f64>; 2] = Default::default();
    let mut lines = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for b in order {
            let run = Run {
                engine: Engine::Postgres,
                hosts: 1,
                labels: Labels::Spread,
                batch: 1,
                variant: Variant::Plain,
                binary: Some(builds[b].1.clone()),
            };
            let measured = measure(run).await;
            totals[b].push(measured.closed.cpu_us + measured.closed.db_cpu_us.unwrap_or(0.0));
            lines.push(format!("round {round}, {}: {}", builds[b].0, measured.line));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        percentile(v, 0.5)
    };
    let (a, b) = (median(&mut totals[0]), median(&mut totals[1]));
    lines.push(format!(
        "delivery[postgres, this build against {against}]: host + database CPU per event {a:.0} µs against {b:.0} µs (medians of {rounds}), {:.2}×",
        a / b
    ));
    lines
}

/// What one run measures.
struct Run {
    engine: Engine,
    hosts: usize,
    labels: Labels,
    batch: usize,
    variant: Variant,
    /// Another build than BENCH_SWITCHYARD's (or this one's).
    binary: Option<String>,
}

/// One run's figures and its summary line.
struct Measured {
    closed: Closed,
    line: String,
}

/// One run: `hosts` hosts on `engine`; returns its summary line.
async fn measure(run: Run) -> Measured {
    let Run {
        engine,
        hosts,
        labels,
        batch,
        variant,
        binary,
    } = run;
    let arrivals = Arrivals::default();
    let receiver = receiver(arrivals.clone()).await;
    let (hosts, database) = start_hosts(engine, hosts, binary.as_deref()).await;
    let label = label_of(engine, hosts.len(), labels, batch, variant);
    let bases: Vec<String> = hosts.iter().map(|h| h.base.clone()).collect();
    let clients = clients(engine);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients.max(16))
        .build()
        .unwrap();
    setup(&http, &bases[0], &receiver).await;
    let backlog = match variant {
        Variant::Backlog => Some(Backlog::fill(&http, &bases[0], database.as_ref()).await),
        _ => None,
    };
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
        clients,
    };
    let writer = (variant == Variant::ConfigWrites).then(|| config_writes(&http, &bases[0]));
    let closed = closed_loop(&load, &hosts, engine, batch).await;
    drop(writer);
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
    let mut extra = String::new();
    if let Some(backlog) = backlog {
        let per_s = backlog.drain(&http, &bases[0]).await;
        extra.push_str(&format!(", backlog drained at {per_s:.0} events/s"));
    }
    // The paced and FIFO runs are the plain runs' (and left out in a
    // comparison of builds, which measures the closed loop only).
    let full = variant == Variant::Plain && binary.is_none();
    let p99 = if full {
        let p99 = paced(&load, throughput_events()).await;
        check_exactly_once(&arrivals, throughput_events() + RATE_EVENTS);
        format!(", p99 {p99:.1} ms at 1000/s")
    } else {
        check_exactly_once(&arrivals, throughput_events());
        String::new()
    };
    // (BENCH_FIFO=off leaves it out, for builds from before FIFO webhooks.)
    if full && std::env::var("BENCH_FIFO").as_deref() != Ok("off") {
        let per_s = fifo(&load, &receiver, throughput_events() + RATE_EVENTS).await;
        extra.push_str(&format!(", fifo {per_s:.0} ordered events/s"));
    }
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
    let db_us = closed.db_cpu_us.map_or(String::new(), |us| {
        format!(", {us:.0} µs database CPU per event")
    });
    let line = format!(
        "delivery[{label}]: {:.0} events/s, {:.0} µs host CPU per event{db_us}{p99}, peak RSS {peak_rss:.0} MiB{extra}",
        closed.events_per_s, closed.cpu_us
    );
    Measured { closed, line }
}

/// Saves another team's webhook every 100 ms until dropped.
fn config_writes(http: &reqwest::Client, base: &str) -> AbortOnDrop {
    let (http, base) = (http.clone(), base.to_string());
    AbortOnDrop(tokio::spawn(async move {
        let team = json!({"name": "elsewhere"});
        common::load::call(&http, &base, "POST", "/v1/teams", team).await;
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        for n in 0u64.. {
            ticker.tick().await;
            let hook = json!({"url": format!("http://127.0.0.1:9/hook/{n}")});
            let path = "/v1/teams/elsewhere/webhooks/other";
            common::load::call(&http, &base, "PUT", path, hook).await;
        }
    }))
}

/// A task aborted when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// [`BACKLOG`] deliveries held for a receiver that was down: its endpoint
/// answered 410 Gone, which disabled its webhook, and every later delivery
/// waits for the webhook to be enabled again.
struct Backlog {
    arrivals: Arrivals,
    receiver: String,
    up: Arc<std::sync::atomic::AtomicBool>,
    held: usize,
}

impl Backlog {
    /// Queues the backlog through the event API (100 tags a request, 16
    /// at a time, to a second project whose automation calls the receiver
    /// that is down), and waits until every one is held.
    async fn fill(http: &reqwest::Client, base: &str, db: Option<&Database>) -> Backlog {
        let arrivals = Arrivals::default();
        let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let receiver = common::load::gated_receiver(arrivals.clone(), up.clone()).await;
        common::load::setup_backlog(http, base, &receiver).await;
        let started = Instant::now();
        let next = Arc::new(AtomicUsize::new(0));
        let fillers: Vec<_> = (0..16)
            .map(|_| {
                let (http, base, next) = (http.clone(), base.to_string(), next.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(100, Ordering::SeqCst);
                        if i >= BACKLOG {
                            break;
                        }
                        common::load::tag_backlog(&http, &base, i, 100).await;
                    }
                })
            })
            .collect();
        for f in fillers {
            f.await.unwrap();
        }
        let db = db.expect("the backlog run is PostgreSQL's");
        let held = db.wait_held(Duration::from_secs(600)).await;
        println!(
            "backlog: {held} of {BACKLOG} deliveries held for a receiver that is down (the rest met its 410 before their webhook was disabled), queued in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Backlog {
            arrivals,
            receiver,
            up,
            held,
        }
    }

    /// The receiver comes back and its webhook is enabled again: every
    /// held delivery goes. Their events/s end to end.
    async fn drain(self, http: &reqwest::Client, base: &str) -> f64 {
        self.up.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let hook = common::load::webhook(&self.receiver, false);
        let path = "/v1/teams/bench/webhooks/down";
        common::load::call(http, base, "PUT", path, hook).await;
        let done = wait_for(&self.arrivals, self.held, Duration::from_secs(600))
            .await
            .expect("the backlog did not drain within 600 s");
        let per_s = self.held as f64 / (done - started).as_secs_f64();
        println!(
            "backlog drained: {} events at {per_s:.0} events/s",
            self.held
        );
        check_exactly_once(&self.arrivals, self.held);
        per_s
    }
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
async fn start_hosts(
    engine: Engine,
    n: usize,
    binary: Option<&str>,
) -> (Vec<Host>, Option<Database>) {
    let config = format!("{NO_MODEL}[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n");
    let database = match engine {
        Engine::Postgres => Some(Database::create().await),
        Engine::Sled => None,
    };
    let mut env = vec![("SWITCHYARD_MASTER_KEY", MASTER_KEY)];
    if let Some(db) = &database {
        env.push(("SWITCHYARD_STORE_URL", db.url.as_str()));
    }
    let hosts = (0..n)
        .map(|_| common::start_host_from(binary, &config, &env))
        .collect();
    (hosts, database)
}

/// The run's name in its summary line.
fn label_of(
    engine: Engine,
    hosts: usize,
    labels: Labels,
    batch: usize,
    variant: Variant,
) -> String {
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
    match variant {
        Variant::Plain => {}
        Variant::Backlog => label.push_str(&format!(", {BACKLOG} waiting")),
        Variant::ConfigWrites => label.push_str(", a configuration write every 100 ms"),
    }
    label
}

/// What the clients send through and where it arrives.
struct Load<'a> {
    http: &'a reqwest::Client,
    bases: &'a [String],
    arrivals: &'a Arrivals,
    labels: Labels,
    clients: usize,
}

/// The closed loop's figures.
struct Closed {
    events_per_s: f64,
    cpu_us: f64,
    /// The database's CPU per event, on PostgreSQL.
    db_cpu_us: Option<f64>,
}

/// Closed loop: the load's clients each send their share as fast as
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
    let clients: Vec<_> = (0..load.clients)
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
        "throughput ({} clients, {throughput_events} events): accepted {:.0} events/s, delivered end to end {events_per_s:.0} events/s",
        load.clients,
        throughput_events as f64 / accepted.as_secs_f64(),
    );
    println!("host CPU per delivered event: {cpu_us:.0} µs");
    println!(
        "bench CPU per delivered event (clients and receiver): {:.0} µs",
        (own_cpu() - own_before) * 1e6 / throughput_events as f64
    );
    let db_cpu_us = match (db_before, db_cpu()) {
        (Some(before), Some(after)) => {
            let us = (after - before) * 1e6 / throughput_events as f64;
            println!("PostgreSQL CPU per delivered event: {us:.0} µs");
            Some(us)
        }
        _ => None,
    };
    Closed {
        events_per_s,
        cpu_us,
        db_cpu_us,
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
