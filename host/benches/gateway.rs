//! Proxy overhead (`just bench-gateway`): a fast local mock of an
//! OpenAI-compatible upstream, called directly and through the real
//! `switchyard` binary's `model-openai` backend, at fixed request rates
//! (open loop: latency counts from each request's scheduled start, so a
//! stalled server cannot hide its backlog). Both paths get `rate` requests a
//! second at the same moments, so a stall of this noisy machine hits both
//! alike instead of deciding the difference.
//!
//! Prints p50/p99 of both paths, the added latency at each rate, the host's
//! CPU time per proxied request, and how many requests failed, for each of
//! [`ROUNDS`] rounds (rates taken in turn, so a slow minute of the machine
//! spreads over all of them), then the median added p50 and p99 per rate:
//! one run's p99 swings with this machine's stalls. Asserts nothing about
//! time.
//!
//! Each rate is measured twice per round, in alternating order: proxied
//! with a key without limits, and with a key that has rate limits and a
//! daily budget (set high enough never to refuse), so the limiter's cost
//! is the difference of the two added latencies, measured in the same
//! minutes. The summary gives the ratio of the two keys' medians and the
//! median of each round's ratio, which pairs the two measurements of one
//! round and so leaves out the machine's drift between rounds.
//!
//! Then, in the same rounds, two more comparisons, each alternating its two
//! sides round by round:
//! - tracing: the same proxied load through a host exporting traces to a
//!   local OTLP collector (which accepts and drops them) and through the
//!   host without, at [`TRACE_RATE`]: host CPU per request and added p50,
//!   and their ratios;
//! - the response cache: requests to a model whose upstream takes
//!   [`MODEL_MS`] to answer (as a small model would), each one new (a miss,
//!   answered by the upstream) or the same one again (a hit), at
//!   [`CACHE_RATE`]: p50 of each, and hit / miss.
//!
//! With `BENCH_TENSORZERO=path/to/gateway` (TensorZero's, e.g. the one in
//! `../shared/bench/tensorzero/`), the same rounds also measure it beside
//! us on the same mock at 200, 1,000 and 3,000 requests a second
//! (`gateway/tensorzero.rs`).
//!
//! `BENCH_ROUNDS=N` sets the rounds (default 5).
//! `BENCH_INFERENCE_WORKERS=N` sets the host's inference queue workers
//! (default: the host's own default); `BENCH_SWITCHYARD=FILE` runs another
//! build of the host, to compare two builds in one session;
//! `BENCH_HOLD=1` prints both urls and the host's pid after the warm-up and
//! keeps them up until Ctrl-C, for profiling under an outside load (`wrk`).

use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use serde_json::{Value, json};

mod common;
use common::{Host, KEY, NO_MODEL, cpu_seconds, percentile, start_host};

#[path = "gateway/tensorzero.rs"]
mod tensorzero;

const RATES: [u64; 3] = [500, 2_000, 5_000];
const SECONDS_PER_RATE: u64 = 4;
/// Rounds over all rates, unless `BENCH_ROUNDS` says otherwise.
const ROUNDS: usize = 5;
/// Requests a second in the tracing comparison.
const TRACE_RATE: u64 = 1_000;
/// Requests a second in the cache comparison.
const CACHE_RATE: u64 = 200;
/// How long the mock upstream takes to answer the cache comparison's model.
const MODEL_MS: u64 = 20;

fn main() {
    common::block_on(run());
}

/// The mock upstream: a fixed two-token reply, streamed when asked; the
/// model `thinking` takes [`MODEL_MS`] first.
async fn completions(body: axum::Json<Value>) -> axum::response::Response {
    if body["model"] == "thinking" {
        tokio::time::sleep(Duration::from_millis(MODEL_MS)).await;
    }
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
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(completions))
        // An OTLP collector that takes every export and keeps nothing.
        .route("/v1/traces", axum::routing::post(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("127.0.0.1:{}", addr.port())
}

/// The gateway in front of `upstream`, with `extra` configuration.
fn start_gateway(upstream: &str, extra: &str) -> Host {
    let mut config = format!(
        "{NO_MODEL}per_project_concurrency = 4096\n\
         [[inference.upstreams]]\nname = \"mock\"\nbase_url = \"http://{upstream}/v1\"\nmodels = [\"mock\", \"thinking\"]\n{extra}"
    );
    if let Ok(workers) = std::env::var("BENCH_INFERENCE_WORKERS") {
        config.push_str(&format!(
            "[queues.inference]\nworkers = {workers}\ncapacity = 4096\n"
        ));
    }
    start_host(&config)
}

/// Sends `rate` requests a second to each of `urls` for
/// [`SECONDS_PER_RATE`] seconds, all of them at the same scheduled times, so
/// every path is measured under the same conditions of the machine. Returns
/// each url's sorted latencies of the successes (ms) and its failures.
async fn load(http: &reqwest::Client, urls: &[(&str, &str)], rate: u64) -> Vec<(Vec<f64>, usize)> {
    let body = chat();
    let paths: Vec<(&str, &str, &Value)> = urls.iter().map(|(u, k)| (*u, *k, &body)).collect();
    load_bodies(http, &paths, rate).await
}

/// The chat every path is sent.
fn chat() -> Value {
    json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
}

/// [`load`] with a body of each path's own.
async fn load_bodies(
    http: &reqwest::Client,
    urls: &[(&str, &str, &Value)],
    rate: u64,
) -> Vec<(Vec<f64>, usize)> {
    let total = rate * SECONDS_PER_RATE;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let mut calls = Vec::with_capacity(total as usize * urls.len());
    for i in 0..total {
        let due = started + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        // Alternate which path goes first within a tick.
        for k in 0..urls.len() {
            let which = (k + i as usize) % urls.len();
            let (url, key, body) = urls[which];
            let (http, body) = (http.clone(), body.clone());
            let call = call(http, url.to_string(), key.to_string(), body, due);
            calls.push((which, tokio::spawn(call)));
        }
    }
    let mut results = vec![(Vec::with_capacity(total as usize), 0); urls.len()];
    for (which, call) in calls {
        let (latencies, failed) = &mut results[which];
        match call.await.unwrap() {
            Ok(ms) => latencies.push(ms),
            Err(why) => {
                if *failed == 0 {
                    eprintln!("first failure on {} at {rate} QPS: {why}", urls[which].0);
                }
                *failed += 1
            }
        }
    }
    for (latencies, _) in &mut results {
        latencies.sort_by(f64::total_cmp);
    }
    results
}

/// One request; its latency from `due` in ms, or why it failed.
async fn call(
    http: reqwest::Client,
    url: String,
    key: String,
    body: Value,
    due: Instant,
) -> Result<f64, String> {
    match http.post(url).bearer_auth(key).json(&body).send().await {
        Ok(r) if r.status().is_success() => r.bytes().await.map_err(|e| e.to_string())?,
        Ok(r) => {
            let status = r.status();
            return Err(format!("{status} {}", r.text().await.unwrap_or_default()));
        }
        Err(e) => return Err(e.to_string()),
    };
    Ok(due.elapsed().as_secs_f64() * 1e3)
}

async fn run() {
    let upstream = mock_upstream().await;
    let host = start_gateway(&upstream, "");
    let traced = start_gateway(
        &upstream,
        &format!("[telemetry]\notlp_endpoint = \"http://{upstream}\"\n"),
    );
    let cached = start_gateway(
        &upstream,
        "[inference.cache]\nenabled = true\nttl_s = 3600\nmax_bytes = 67108864\n",
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .unwrap();
    let direct = format!("http://{upstream}/v1/chat/completions");
    let proxied = format!("{}/v1/chat/completions", host.base);
    let limited = limited_key(&http, &host).await;
    // Warm every path: connections, the compiled plugin, the key cache.
    let through_traced = format!("{}/v1/chat/completions", traced.base);
    let through_cached = format!("{}/v1/chat/completions", cached.base);
    let warm = [
        (&*direct, KEY),
        (&*proxied, KEY),
        (&*proxied, &*limited),
        (&*through_traced, KEY),
        (&*through_cached, KEY),
    ];
    for ((url, _), (ok, failed)) in warm.iter().zip(load(&http, &warm, 200).await) {
        assert!(
            failed == 0 && !ok.is_empty(),
            "warm-up failed on {url}: {failed} failures"
        );
    }
    if std::env::var_os("BENCH_HOLD").is_some() {
        println!(
            "direct {direct}\nproxied {proxied}\nhost pid {}",
            host.child.id()
        );
        println!("holding both up for profiling; Ctrl-C ends");
        let _ = tokio::signal::ctrl_c().await;
        return;
    }
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS)
        .max(1);
    println!(
        "bench-gateway: {rounds} rounds, {SECONDS_PER_RATE} s per rate, open loop, both paths at once, latency from scheduled start (ms)"
    );
    println!(
        "{:>6} | {:>7} | {:>17} | {:>17} | {:>17} | {:>12} | failed",
        "QPS", "key", "direct p50 / p99", "proxied p50 / p99", "added p50 / p99", "host CPU/req"
    );
    // Per rate and key (without, with limits), each round's added (p50, p99).
    let mut added = vec![[Vec::new(), Vec::new()]; RATES.len()];
    // Each round's (untraced, traced) and (miss, hit).
    let (mut tracing, mut caching) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (rate, added) in RATES.into_iter().zip(&mut added) {
            for which in [round % 2, 1 - round % 2] {
                let key = [KEY, &*limited][which];
                let label = ["open", "limited"][which];
                let got = measure(&http, &host, &direct, (&proxied, key), rate, label).await;
                added[which].push((got.p50, got.p99));
            }
        }
        let mut pair = [None, None];
        for which in [round % 2, 1 - round % 2] {
            let (gateway, url, label) = [
                (&host, &proxied, "untraced"),
                (&traced, &through_traced, "traced"),
            ][which];
            pair[which] =
                Some(measure(&http, gateway, &direct, (url, KEY), TRACE_RATE, label).await);
        }
        tracing.push(pair.map(Option::unwrap));
        caching.push(cache_round(&http, &through_cached, round).await);
    }
    report(rounds, added);
    report_tracing(&tracing);
    report_cache(&caching);
    if let Some(binary) = std::env::var_os("BENCH_TENSORZERO") {
        let theirs = tensorzero::start(&binary.to_string_lossy(), &upstream).await;
        let them = (&*theirs.url, KEY, &tensorzero::body());
        let ours = (&*proxied, KEY, &chat());
        let both = |r| beside_tensorzero(&http, &direct, (&host, ours), (&theirs, them), r);
        let mut compared = Vec::new();
        for round in 0..rounds {
            let mut pairs = Vec::new();
            for rate in tensorzero::RATES {
                pairs.push(both((round, rate)).await);
            }
            compared.push(pairs);
        }
        tensorzero::report(&compared, theirs.nodelay);
    }
}

/// One round of one rate with TensorZero: ours and theirs, in an order
/// that alternates by round.
async fn beside_tensorzero(
    http: &reqwest::Client,
    direct: &str,
    (host, ours): (&Host, (&str, &str, &Value)),
    (theirs, them): (&tensorzero::TensorZero, (&str, &str, &Value)),
    (round, rate): (usize, u64),
) -> tensorzero::Pair {
    let mut got = [[0.0; 3]; 2];
    for which in [round % 2, 1 - round % 2] {
        let (pid, path, label) =
            [(host.child.id(), ours, "ours"), (theirs.pid(), them, "tz")][which];
        let m = measure_of(http, pid, direct, path, rate, label).await;
        got[which] = [m.p50, m.p99, m.cpu_us];
    }
    tensorzero::Pair {
        ours: got[0],
        theirs: got[1],
    }
}

/// One round of the cache comparison, misses and hits in turn: their p50s
/// (ms).
async fn cache_round(http: &reqwest::Client, url: &str, round: usize) -> (f64, f64) {
    let mut p50 = [0.0; 2];
    let first = round.is_multiple_of(2);
    for hit in [first, !first] {
        let n = CACHE_RATE * SECONDS_PER_RATE;
        let body = move |i: u64| {
            let content = if hit {
                "the same question".to_string()
            } else {
                format!("question {round}-{i}")
            };
            json!({"model": "thinking", "messages": [{"role": "user", "content": content}], "max_tokens": 2})
        };
        let (latencies, failed, sample) = paced(http, url, CACHE_RATE, n, body).await;
        let want = if hit { "hit" } else { "miss" };
        assert_eq!(
            sample.as_deref(),
            Some(want),
            "the cache answered {sample:?}, not {want}"
        );
        let (l50, l99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
        println!(
            "{CACHE_RATE:>6} | {:>7} | {l50:>7.3} / {l99:>7.3} through the cache, upstream {MODEL_MS} ms | failed {failed} of {n}",
            want
        );
        p50[usize::from(hit)] = l50;
    }
    (p50[0], p50[1])
}

/// `n` requests to `url`, `rate` a second, open loop, each with
/// `body(i)`: sorted latencies (ms), failures, and the last answer's
/// `x-switchyard-cache`.
async fn paced(
    http: &reqwest::Client,
    url: &str,
    rate: u64,
    n: u64,
    body: impl Fn(u64) -> Value,
) -> (Vec<f64>, usize, Option<String>) {
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let started = Instant::now();
    let mut calls = Vec::with_capacity(n as usize);
    for i in 0..n {
        let due = started + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let request = http.post(url).bearer_auth(KEY).json(&body(i));
        calls.push(tokio::spawn(async move {
            let response = request.send().await.map_err(|e| e.to_string())?;
            let cache = response
                .headers()
                .get("x-switchyard-cache")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let ok = response.status().is_success();
            response.bytes().await.map_err(|e| e.to_string())?;
            ok.then(|| (due.elapsed().as_secs_f64() * 1e3, cache))
                .ok_or_else(|| "not 2xx".to_string())
        }));
    }
    let (mut latencies, mut failed, mut sample) = (Vec::new(), 0, None);
    for call in calls {
        match call.await.unwrap() {
            Ok((ms, cache)) => {
                latencies.push(ms);
                sample = cache;
            }
            Err(_) => failed += 1,
        }
    }
    latencies.sort_by(f64::total_cmp);
    (latencies, failed, sample)
}

/// Tracing against none: host CPU per request and added p50, the medians
/// of the rounds and of each round's ratio.
fn report_tracing(rounds: &[[Measured; 2]]) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    };
    let cpu = |i: usize| median(rounds.iter().map(|r| r[i].cpu_us).collect());
    let p50 = |i: usize| median(rounds.iter().map(|r| r[i].p50).collect());
    let cpu_ratio = median(rounds.iter().map(|r| r[1].cpu_us / r[0].cpu_us).collect());
    let p50_ratio = median(rounds.iter().map(|r| r[1].p50 / r[0].p50).collect());
    println!(
        "tracing at {TRACE_RATE} QPS, median of {} rounds: host CPU/req {:.0} -> {:.0} µs (median ratio {cpu_ratio:.3}), added p50 {:.3} -> {:.3} ms (median ratio {p50_ratio:.3})",
        rounds.len(),
        cpu(0),
        cpu(1),
        p50(0),
        p50(1)
    );
}

/// Cache hits against misses (the upstream answering in [`MODEL_MS`]).
fn report_cache(rounds: &[(f64, f64)]) {
    let (mut misses, mut hits): (Vec<f64>, Vec<f64>) = rounds.iter().copied().unzip();
    let mut ratios: Vec<f64> = rounds.iter().map(|(m, h)| h / m).collect();
    for v in [&mut misses, &mut hits, &mut ratios] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "cache at {CACHE_RATE} QPS, median of {} rounds: p50 miss {:.3} ms, hit {:.3} ms; hit / miss {:.3} (median ratio)",
        rounds.len(),
        percentile(&misses, 0.5),
        percentile(&hits, 0.5),
        percentile(&ratios, 0.5)
    );
}

/// Per rate, the medians of the rounds' added latency with and without
/// limits, and their ratio.
fn report(rounds: usize, added: Vec<[Vec<(f64, f64)>; 2]>) {
    println!(
        "median of {rounds} rounds, added p50 / p99 (ms); with limits / without, as the ratio of those medians and as the median of each round's ratio:"
    );
    for (rate, [open, limited]) in RATES.into_iter().zip(added) {
        // A round measures both keys in the same minute, so its ratio is
        // free of the drift between rounds.
        let paired = open
            .iter()
            .zip(&limited)
            .map(|(o, l)| (l.0 / o.0, l.1 / o.1))
            .collect();
        let (r50, r99) = medians(paired);
        let (o50, o99) = medians(open);
        let (l50, l99) = medians(limited);
        println!(
            "{rate:>6} | without limits {o50:>7.3} / {o99:>7.3} | with limits {l50:>7.3} / {l99:>7.3} | ratio of medians {:.2} / {:.2} | median ratio {r50:.2} / {r99:.2}",
            l50 / o50,
            l99 / o99
        );
    }
}

/// The medians of rounds' (p50, p99).
fn medians(rounds: Vec<(f64, f64)>) -> (f64, f64) {
    let (mut p50s, mut p99s): (Vec<f64>, Vec<f64>) = rounds.into_iter().unzip();
    p50s.sort_by(f64::total_cmp);
    p99s.sort_by(f64::total_cmp);
    (percentile(&p50s, 0.5), percentile(&p99s, 0.5))
}

/// A key with rate limits and a daily budget, all far above what the bench
/// sends, so every request is counted and none refused.
async fn limited_key(http: &reqwest::Client, host: &Host) -> String {
    let spec = json!({"name": "limited", "rpm": 1_000_000, "tpm": 100_000_000,
        "tokens_per_day": 1_000_000_000_000u64});
    let created: Value = http
        .post(format!("{}/v1/me/api-keys", host.base))
        .bearer_auth(KEY)
        .json(&spec)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["key"].as_str().expect("a limited key").to_string()
}

/// One rate's run through a gateway: added latency and host CPU.
#[derive(Clone, Copy)]
struct Measured {
    /// Added p50 and p99 (ms).
    p50: f64,
    p99: f64,
    /// Host CPU per proxied request (µs).
    cpu_us: f64,
}

/// One rate's run: prints its line, returns what it measured.
async fn measure(
    http: &reqwest::Client,
    host: &Host,
    direct: &str,
    (url, key): (&str, &str),
    rate: u64,
    label: &str,
) -> Measured {
    let path = (url, key, &chat());
    measure_of(http, host.child.id(), direct, path, rate, label).await
}

/// [`measure`] of any gateway: the process `pid` serving `proxied`.
async fn measure_of(
    http: &reqwest::Client,
    pid: u32,
    direct: &str,
    proxied: (&str, &str, &Value),
    rate: u64,
    label: &str,
) -> Measured {
    let cpu_before = cpu_seconds(pid);
    let body = chat();
    let mut paths = load_bodies(http, &[(direct, KEY, &body), proxied], rate)
        .await
        .into_iter();
    let cpu = cpu_seconds(pid)
        .zip(cpu_before)
        .map(|(after, before)| (after - before) * 1e6 / (rate * SECONDS_PER_RATE) as f64);
    let ((d, d_failed), (p, p_failed)) = (paths.next().unwrap(), paths.next().unwrap());
    let (d50, d99) = (percentile(&d, 0.5), percentile(&d, 0.99));
    let (p50, p99) = (percentile(&p, 0.5), percentile(&p, 0.99));
    println!(
        "{rate:>6} | {label:>7} | {d50:>7.3} / {d99:>7.3} | {p50:>7.3} / {p99:>7.3} | {:>7.3} / {:>7.3} | {:>9.0} µs | direct {d_failed}, proxied {p_failed} of {}",
        p50 - d50,
        p99 - d99,
        cpu.unwrap_or(f64::NAN),
        rate * SECONDS_PER_RATE
    );
    Measured {
        p50: p50 - d50,
        p99: p99 - d99,
        cpu_us: cpu.unwrap_or(f64::NAN),
    }
}
