//! Delivery figures (`just bench-delivery`): the real `switchyard` binary
//! with its durable outbox, a local receiver on loopback, and a load
//! generator driving the event API (adding tags, which fires a tag
//! automation with a payload template).
//!
//! Prints sustained events/s end to end (event accepted → receiver
//! acknowledged) under a closed loop of concurrent clients, the
//! event-to-delivery latency p50/p99 at a fixed 1,000 events/s, and the
//! host's RSS. Asserts nothing about time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde_json::{Value, json};

mod common;
use common::{KEY, NO_MODEL, percentile, start_host};

const VERSIONS: usize = 500;
const THROUGHPUT_EVENTS: usize = 20_000;
const CLIENTS: usize = 64;
const RATE_EVENTS: usize = 5_000;
const RATE_PER_SEC: u64 = 1_000;

fn main() {
    common::block_on(run());
}

/// Arrival time of each tag at the receiver.
#[derive(Clone, Default)]
struct Arrivals {
    at: Arc<Mutex<HashMap<String, Instant>>>,
    count: Arc<AtomicUsize>,
}

async fn receiver(arrivals: Arrivals) -> String {
    let app = axum::Router::new().fallback(move |body: Bytes| {
        let arrivals = arrivals.clone();
        async move {
            let now = Instant::now();
            let tag = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["tag"].as_str().map(str::to_string));
            if let Some(tag) = tag {
                arrivals.at.lock().unwrap().insert(tag, now);
                arrivals.count.fetch_add(1, Ordering::SeqCst);
            }
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

async fn call(http: &reqwest::Client, base: &str, method: &str, path: &str, body: Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    assert!(
        status.is_success(),
        "{path}: {status} {}",
        response.text().await.unwrap()
    );
}

const PROJECT: &str = "/v1/teams/bench/projects/load";

async fn setup(http: &reqwest::Client, base: &str, receiver: &str) {
    let steps = [
        ("POST", "/v1/teams".to_string(), json!({"name": "bench"})),
        (
            "PUT",
            "/v1/teams/bench/secrets/TOKEN".into(),
            json!({"value": "t0ken"}),
        ),
        (
            "PUT",
            "/v1/teams/bench/secrets/SIGN".into(),
            json!({"value": "s1gn"}),
        ),
        (
            "POST",
            "/v1/teams/bench/webhooks".into(),
            json!({"name": "sink",
            "url": format!("{receiver}/hook"), "access_token_secret": "TOKEN", "signing_secret": "SIGN"}),
        ),
        (
            "POST",
            "/v1/teams/bench/projects".into(),
            json!({"name": "load"}),
        ),
        (
            "POST",
            format!("{PROJECT}/collections"),
            json!({"name": "model"}),
        ),
        (
            "POST",
            format!("{PROJECT}/automations"),
            json!({"name": "on-tag",
            "event": {"type": "ADD_ARTIFACT_TAG"}, "webhook": {"team": "bench", "name": "sink"},
            "action": "Webhooks",
            "payload": r#"{"event_type": "${event_type}", "tag": "${tag}", "version": "${artifact_version_string}", "author": "${event_author}", "accuracy": ${artifact_metadata.accuracy}}"#}),
        ),
    ];
    for (method, path, body) in steps {
        call(http, base, method, &path, body).await;
    }
    for _ in 0..VERSIONS {
        let path = format!("{PROJECT}/collections/model/versions");
        call(
            http,
            base,
            "POST",
            &path,
            json!({"metadata": {"accuracy": 0.9}}),
        )
        .await;
    }
}

async fn tag(http: &reqwest::Client, base: &str, i: usize) {
    let path = format!(
        "{PROJECT}/collections/model/versions/v{}/tags",
        i % VERSIONS
    );
    call(http, base, "POST", &path, json!({"tag": format!("e{i}")})).await;
}

async fn wait_for(arrivals: &Arrivals, n: usize, limit: Duration) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if arrivals.count.load(Ordering::SeqCst) >= n {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn run() {
    let arrivals = Arrivals::default();
    let receiver = receiver(arrivals.clone()).await;
    let host = start_host(&format!(
        "{NO_MODEL}[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n"
    ));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(CLIENTS)
        .build()
        .unwrap();
    setup(&http, &host.base, &receiver).await;
    println!(
        "bench-delivery: {VERSIONS} versions, tag automation with a 5-variable template, signed + bearer"
    );

    // Closed loop: CLIENTS clients each send their share as fast as answered.
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (http, base, next) = (http.clone(), host.base.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= THROUGHPUT_EVENTS {
                        break;
                    }
                    tag(&http, &base, i).await;
                }
            })
        })
        .collect();
    for c in clients {
        c.await.unwrap();
    }
    let accepted = started.elapsed();
    let done = wait_for(&arrivals, THROUGHPUT_EVENTS, Duration::from_secs(300))
        .await
        .expect("not every event was delivered within 300 s");
    let end_to_end = done - started;
    println!(
        "throughput ({CLIENTS} clients, {THROUGHPUT_EVENTS} events): accepted {:.0} events/s, delivered end to end {:.0} events/s",
        THROUGHPUT_EVENTS as f64 / accepted.as_secs_f64(),
        THROUGHPUT_EVENTS as f64 / end_to_end.as_secs_f64()
    );
    println!(
        "host RSS after throughput run: {:.1} MiB",
        rss_mib(host.child.id())
    );

    // Open loop at a fixed rate: latency from sending the event to arrival.
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let base_count = arrivals.count.load(Ordering::SeqCst);
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / RATE_PER_SEC));
    let mut tasks = Vec::new();
    for i in 0..RATE_EVENTS {
        ticker.tick().await;
        let (http, base, sent) = (http.clone(), host.base.clone(), sent.clone());
        let i = THROUGHPUT_EVENTS + i;
        sent.lock().unwrap().insert(format!("e{i}"), Instant::now());
        tasks.push(tokio::spawn(async move { tag(&http, &base, i).await }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    wait_for(
        &arrivals,
        base_count + RATE_EVENTS,
        Duration::from_secs(120),
    )
    .await
    .expect("not every paced event was delivered");
    let at = arrivals.at.lock().unwrap();
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
    println!("host RSS at the end: {:.1} MiB", rss_mib(host.child.id()));
}
