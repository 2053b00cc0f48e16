//! Proxy overhead (`just bench-gateway`): a fast local mock of an
//! OpenAI-compatible upstream, called directly and through the real
//! `switchyard` binary's `model-openai` backend, in the same run, at fixed
//! request rates (open loop: latency counts from each request's scheduled
//! start, so a stalled server cannot hide its backlog).
//!
//! Prints p50/p99 of both paths and the added latency at each rate, and how
//! many requests failed. Asserts nothing about time.
//!
//! `BENCH_INFERENCE_WORKERS=N` sets the host's inference queue workers
//! (default: the host's own default).

use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use serde_json::{Value, json};

mod common;
use common::{Host, KEY, NO_MODEL, percentile, start_host};

const RATES: [u64; 3] = [500, 2_000, 5_000];
const SECONDS_PER_RATE: u64 = 4;

fn main() {
    common::block_on(run());
}

/// The mock upstream: a fixed two-token reply, streamed when asked.
async fn completions(body: axum::Json<Value>) -> axum::response::Response {
    let chunk = |delta: Value, finish: Value| json!({"id": "m-1", "object": "chat.completion.chunk", "created": 1, "model": "mock", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let usage = json!({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11});
    if body["stream"] == true {
        let events = [
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Hi"}), Value::Null),
            chunk(json!({"content": "!"}), json!("stop")),
            json!({"id": "m-1", "object": "chat.completion.chunk", "created": 1, "model": "mock", "choices": [], "usage": usage}),
        ];
        let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        text.push_str("data: [DONE]\n\n");
        ([("content-type", "text/event-stream")], text).into_response()
    } else {
        axum::Json(json!({"id": "m-1", "object": "chat.completion", "created": 1, "model": "mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi!"}, "finish_reason": "stop"}],
            "usage": usage}))
        .into_response()
    }
}

async fn mock_upstream() -> String {
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(completions));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("127.0.0.1:{}", addr.port())
}

fn start_gateway(upstream: &str) -> Host {
    let mut config = format!(
        "{NO_MODEL}per_project_concurrency = 4096\n\
         [[inference.upstreams]]\nname = \"mock\"\nbase_url = \"http://{upstream}/v1\"\nmodels = [\"mock\"]\n"
    );
    if let Ok(workers) = std::env::var("BENCH_INFERENCE_WORKERS") {
        config.push_str(&format!(
            "[queues.inference]\nworkers = {workers}\ncapacity = 4096\n"
        ));
    }
    start_host(&config)
}

/// Sends `rate` requests a second for [`SECONDS_PER_RATE`] seconds to `url`;
/// returns the sorted latencies of the successes (ms) and the failures.
async fn load(http: &reqwest::Client, url: &str, rate: u64) -> (Vec<f64>, usize) {
    let body =
        json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let total = rate * SECONDS_PER_RATE;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let mut calls = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = started + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let (http, url, body) = (http.clone(), url.to_string(), body.clone());
        calls.push(tokio::spawn(async move {
            let outcome = match http.post(url).bearer_auth(KEY).json(&body).send().await {
                Ok(r) if r.status().is_success() => {
                    r.bytes().await.map(|_| ()).map_err(|e| e.to_string())
                }
                Ok(r) => Err(format!(
                    "{} {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                )),
                Err(e) => Err(e.to_string()),
            };
            outcome.map(|()| due.elapsed().as_secs_f64() * 1e3)
        }));
    }
    let mut latencies = Vec::with_capacity(calls.len());
    let mut failed = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(ms) => latencies.push(ms),
            Err(why) => {
                if failed == 0 {
                    eprintln!("first failure at {rate} QPS: {why}");
                }
                failed += 1
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    (latencies, failed)
}

async fn run() {
    let upstream = mock_upstream().await;
    let host = start_gateway(&upstream);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .unwrap();
    let direct = format!("http://{upstream}/v1/chat/completions");
    let proxied = format!("{}/v1/chat/completions", host.base);
    // Warm both paths: connections, the compiled plugin, the key cache.
    for url in [&direct, &proxied] {
        let (ok, failed) = load(&http, url, 200).await;
        assert!(
            failed == 0 && !ok.is_empty(),
            "warm-up failed on {url}: {failed} failures"
        );
    }
    println!(
        "bench-gateway: {SECONDS_PER_RATE} s per rate, open loop, latency from scheduled start (ms)"
    );
    println!(
        "{:>6} | {:>17} | {:>17} | {:>17} | failed",
        "QPS", "direct p50 / p99", "proxied p50 / p99", "added p50 / p99"
    );
    for rate in RATES {
        let (d, d_failed) = load(&http, &direct, rate).await;
        let (p, p_failed) = load(&http, &proxied, rate).await;
        let (d50, d99) = (percentile(&d, 0.5), percentile(&d, 0.99));
        let (p50, p99) = (percentile(&p, 0.5), percentile(&p, 0.99));
        println!(
            "{rate:>6} | {d50:>7.3} / {d99:>7.3} | {p50:>7.3} / {p99:>7.3} | {:>7.3} / {:>7.3} | direct {d_failed}, proxied {p_failed} of {}",
            p50 - d50,
            p99 - d99,
            rate * SECONDS_PER_RATE
        );
    }
}
