//! TensorZero's gateway beside ours on the same mock upstream
//! (`BENCH_TENSORZERO=path/to/gateway`), in the same rounds and at the same
//! rates, each side alternating which goes first: its added p50 / p99 and
//! its CPU per request, every round, then the median of the rounds' ratios.
//!
//! TensorZero 2026.3.4 leaves Nagle's algorithm on, which stalls a busy
//! keep-alive connection ~40 ms a response; `tz_nodelay.c` (in
//! `../shared/bench/tensorzero/`, or `BENCH_TENSORZERO_NODELAY=path`) is
//! built with `gcc` and preloaded to set `TCP_NODELAY`, as its authors'
//! own benchmarks would have it. Without it the run says so.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// The rates the comparison runs at (requests a second).
pub const RATES: [u64; 3] = [200, 1_000, 3_000];

/// A running TensorZero gateway, killed on drop.
pub struct TensorZero {
    child: Child,
    /// Its OpenAI-compatible chat URL.
    pub url: String,
    /// Whether `TCP_NODELAY` is set on its sockets.
    pub nodelay: bool,
    _dir: tempfile::TempDir,
}

impl Drop for TensorZero {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TensorZero {
    /// Its process id, for its CPU time.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The request the load sends it: the same chat as ours, to the model its
/// configuration routes to the mock.
pub fn body() -> Value {
    json!({"model": "tensorzero::model_name::gpt-4o-mini",
           "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
}

/// Starts `binary` in front of `upstream` (`127.0.0.1:PORT`) and waits
/// until it answers a chat.
pub async fn start(binary: &str, upstream: &str) -> TensorZero {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tensorzero.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nobservability.enabled = false\n[models.\"gpt-4o-mini\"]\nrouting = [\"mock\"]\n\
             [models.\"gpt-4o-mini\".providers.mock]\ntype = \"openai\"\nmodel_name = \"gpt-4o-mini\"\n\
             api_base = \"http://{upstream}/v1/\"\napi_key_location = \"none\"\n"
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let shim = nodelay_shim(dir.path());
    let mut command = Command::new(binary);
    command
        .arg("--config-file")
        .arg(&config)
        .args(["--bind-address", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(shim) = &shim {
        command.env("LD_PRELOAD", shim);
    }
    let child = command.spawn().expect("spawning BENCH_TENSORZERO");
    let gateway = TensorZero {
        child,
        url: format!("http://127.0.0.1:{port}/openai/v1/chat/completions"),
        nodelay: shim.is_some(),
        _dir: dir,
    };
    wait_until_it_answers(&gateway.url).await;
    gateway
}

/// Builds the `TCP_NODELAY` shim into `dir`, if its source and `gcc` are
/// there.
fn nodelay_shim(dir: &Path) -> Option<PathBuf> {
    let source = std::env::var_os("BENCH_TENSORZERO_NODELAY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench/tensorzero/tz_nodelay.c")
        });
    let shim = dir.join("tz_nodelay.so");
    let built = source.exists()
        && Command::new("gcc")
            .args(["-O2", "-shared", "-fPIC", "-o"])
            .arg(&shim)
            .arg(&source)
            .arg("-ldl")
            .status()
            .is_ok_and(|s| s.success());
    if !built {
        eprintln!(
            "TensorZero runs without its TCP_NODELAY shim ({} or gcc missing): expect ~40 ms stalls on busy connections",
            source.display()
        );
    }
    built.then_some(shim)
}

async fn wait_until_it_answers(url: &str) {
    let http = reqwest::Client::new();
    for _ in 0..300 {
        let answer = http.post(url).json(&body()).send().await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("TensorZero did not answer a chat at {url} within 30 s");
}

/// One round of one rate: (ours, TensorZero's) added p50, p99 (ms) and CPU
/// per request (µs).
#[derive(Clone, Copy)]
pub struct Pair {
    pub ours: [f64; 3],
    pub theirs: [f64; 3],
}

/// Prints every round's ratios and their medians, per rate.
pub fn report(rounds: &[Vec<Pair>], nodelay: bool) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        super::percentile(&v, 0.5)
    };
    println!(
        "TensorZero (TCP_NODELAY {}) / Switchyard, per round: added p50, added p99, CPU per request; then the medians",
        if nodelay { "set" } else { "NOT set" }
    );
    for (i, rate) in RATES.into_iter().enumerate() {
        let pairs: Vec<Pair> = rounds.iter().map(|r| r[i]).collect();
        let ratio =
            |k: usize| -> Vec<f64> { pairs.iter().map(|p| p.theirs[k] / p.ours[k]).collect() };
        let each: Vec<String> = (0..pairs.len())
            .map(|r| {
                let [a, b, c] = [0, 1, 2].map(|k| ratio(k)[r]);
                format!("{a:.2}/{b:.2}/{c:.2}")
            })
            .collect();
        let ours = [0, 1, 2].map(|k| median(pairs.iter().map(|p| p.ours[k]).collect()));
        let theirs = [0, 1, 2].map(|k| median(pairs.iter().map(|p| p.theirs[k]).collect()));
        let [r50, r99, rcpu] = [0, 1, 2].map(|k| median(ratio(k)));
        println!(
            "{rate:>6} | Switchyard +{:.3} / +{:.3} ms, {:.0} µs | TensorZero +{:.3} / +{:.3} ms, {:.0} µs | rounds {} | median TensorZero / Switchyard {r50:.2} / {r99:.2}, CPU {rcpu:.2} (Switchyard / TensorZero CPU {:.2})",
            ours[0],
            ours[1],
            ours[2],
            theirs[0],
            theirs[1],
            theirs[2],
            each.join(" "),
            1.0 / rcpu
        );
    }
}
