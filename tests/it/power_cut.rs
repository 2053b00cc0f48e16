//! The store's promise against power loss, proven from outside (issue 67):
//! the real binary with its data directory on a filesystem that keeps
//! each file's writes in memory until that file is fsynced and drops the
//! rest at a cut (`power_cut_fs.rs`). The harness is first shown to catch
//! SQLite with `synchronous=OFF` and to pass it with `FULL`. Then rounds
//! cut the power at seeded moments, start a fresh host on what the disk
//! kept, and check that it starts, that every acknowledged configuration
//! write reads back, that every acknowledged event is delivered under one
//! delivery id, and that nothing appears that was never sent.
//!
//! `SWITCHYARD_POWER_CUT_SEED=N` runs round N alone; a failing round
//! prints its seed. Where FUSE cannot be mounted (not root, no
//! `/dev/fuse`) the tests say so and pass, unless
//! `SWITCHYARD_TEST_REQUIRE_FUSE=1` (CI) makes that a failure.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::delivery::{CONFIG, tagging_on, verified};
use crate::harness::{Host, listed, plugin_wasm};
use crate::power_cut_fs::{self, PowerCut};
use crate::receiver::Receiver;
use crate::world::PROJECT;

const VERSIONS: &str = "/v1/teams/ml/projects/vision/collections/detector/versions";

/// A mountable power-cut filesystem, or why not (then the test passes,
/// saying so, unless CI requires it).
fn mounted() -> Option<PowerCut> {
    let why = match power_cut_fs::available()
        .and_then(|()| PowerCut::mount().map_err(|e| e.to_string()))
    {
        Ok(fs) => return Some(fs),
        Err(why) => why,
    };
    if std::env::var("SWITCHYARD_TEST_REQUIRE_FUSE").is_ok_and(|v| v == "1") {
        panic!("the power-cut filesystem cannot be mounted ({why}), and CI requires it");
    }
    println!("skipped: the power-cut filesystem cannot be mounted here ({why})");
    None
}

/// Runs `script` with python3, its arguments after; its stdout.
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const SQLITE_WRITER: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode=DELETE")
con.execute("PRAGMA synchronous=" + sys.argv[2])
con.execute("CREATE TABLE t(i INTEGER PRIMARY KEY, v TEXT)")
n = int(sys.argv[3])
for i in range(n):
    con.execute("INSERT INTO t(v) VALUES (?)", ("x" * 200,))
print(n)
"#;

const SQLITE_COUNT: &str = r#"
import sqlite3, sys
try:
    con = sqlite3.connect(sys.argv[1])
    print(con.execute("SELECT count(*) FROM t").fetchone()[0])
except sqlite3.DatabaseError:
    print(0)
"#;

/// Commits `n` rows with SQLite's `synchronous` at `mode` on a fresh
/// power-cut filesystem, cuts, and counts the rows the disk kept (and
/// the bytes SQLite had fsynced).
fn sqlite_keeps(mode: &str, n: usize) -> Option<(usize, u64)> {
    let fs = mounted()?;
    let db = fs.mount.join("t.db");
    let committed: usize = python(SQLITE_WRITER, &[db.to_str().unwrap(), mode, &n.to_string()])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(committed, n);
    let synced = fs.synced_bytes();
    fs.cut();
    let kept = python(SQLITE_COUNT, &[fs.backing.join("t.db").to_str().unwrap()]);
    Some((kept.trim().parse().unwrap(), synced))
}

/// The harness itself, proven: SQLite without syncs loses what it
/// committed, and with `FULL` keeps every row.
#[test]
fn the_power_cut_filesystem_catches_sqlite_without_syncs_and_passes_it_with_full() {
    let Some((off, off_synced)) = sqlite_keeps("OFF", 400) else {
        return;
    };
    let (full, full_synced) = sqlite_keeps("FULL", 400).unwrap();
    println!(
        "power-cut filesystem against SQLite: synchronous=OFF kept {off} of 400 committed rows \
         ({off_synced} bytes fsynced), FULL kept {full} of 400 ({full_synced} bytes fsynced)"
    );
    assert!(
        off < 400,
        "synchronous=OFF kept every row: the cut drops nothing"
    );
    assert_eq!(
        full, 400,
        "synchronous=FULL lost committed rows: the filesystem loses synced data"
    );
}

/// When in a round the power goes.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// While configuration is written.
    Configuring,
    /// In the middle of an event load.
    Loading,
    /// With sends in flight to a slow receiver.
    SendsInFlight,
    /// Seconds after a load, past a checkpoint.
    AfterLoad,
    /// Just after a plugin was uploaded.
    AfterUpload,
    /// While history expires and segments rotate.
    Expiring,
    /// Right after a restart on the same disk (a kill, no cut).
    AfterRestart,
}

const MOMENTS: [Moment; 7] = [
    Moment::Configuring,
    Moment::Loading,
    Moment::SendsInFlight,
    Moment::AfterLoad,
    Moment::AfterUpload,
    Moment::Expiring,
    Moment::AfterRestart,
];

/// SplitMix64: a seed replays a round.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// What clients sent and what the host acknowledged (a 2xx answer).
#[derive(Default)]
struct Ledger {
    tags_sent: HashSet<String>,
    tags_acked: HashSet<String>,
    projects_sent: HashSet<String>,
    projects_acked: HashSet<String>,
    plugin_acked: bool,
}

type Shared = Arc<Mutex<Ledger>>;

/// What a client writes: tags on v0 (events, client `c`), or projects
/// (configuration, in sled).
#[derive(Clone, Copy)]
enum Writes {
    Tags(usize),
    Projects,
}

impl Writes {
    /// The `i`th write's name, path and body.
    fn request(self, i: usize) -> (String, String, Value) {
        match self {
            Writes::Tags(c) => {
                let tag = format!("tag_{c}_{i}");
                let body = json!({ "tag": tag });
                (tag, format!("{VERSIONS}/v0/tags"), body)
            }
            Writes::Projects => {
                let name = format!("p{i}");
                let body = json!({ "name": name });
                (name, "/v1/teams/ml/projects".into(), body)
            }
        }
    }

    /// The ledger's sets for these writes: sent, acknowledged.
    fn sets(self, ledger: &mut Ledger) -> (&mut HashSet<String>, &mut HashSet<String>) {
        match self {
            Writes::Tags(_) => (&mut ledger.tags_sent, &mut ledger.tags_acked),
            Writes::Projects => (&mut ledger.projects_sent, &mut ledger.projects_acked),
        }
    }
}

/// A client that makes `writes` one after another until the host stops
/// answering or `stop` is set, noting each sent and each acknowledged.
fn client(
    host: &Host,
    key: &str,
    writes: Writes,
    ledger: &Shared,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (base, http, key) = (host.base.clone(), host.http.clone(), key.to_string());
    let (ledger, stop) = (ledger.clone(), stop.clone());
    tokio::spawn(async move {
        for i in 0.. {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let (name, path, body) = writes.request(i);
            writes
                .sets(&mut ledger.lock().unwrap())
                .0
                .insert(name.clone());
            let sent = http
                .post(format!("{base}{path}"))
                .bearer_auth(&key)
                .json(&body)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            match sent {
                Ok(answer) if answer.status().is_success() => {
                    writes.sets(&mut ledger.lock().unwrap()).1.insert(name);
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(_) => return,
            }
        }
    })
}

/// The configuration of a round's host: fast retries, and for the
/// expiry round a history of a few seconds, so segments close and go.
fn config_for(moment: Moment) -> String {
    match moment {
        Moment::Expiring => format!("{CONFIG}\n[history]\nkeep_days = {}", 3.0 / 86_400.0),
        _ => CONFIG.to_string(),
    }
}

/// What a round saw, for its line in the output.
struct Outcome {
    tags_acked: usize,
    projects_acked: usize,
    dropped_bytes: u64,
    resent: usize,
}

/// One round: a host on a power-cut disk, load, a cut at a seeded moment,
/// then a fresh host on what the disk kept, checked.
async fn round(seed: u64) -> Result<Outcome, String> {
    let mut rng = Rng(seed);
    let moment = MOMENTS[(seed % MOMENTS.len() as u64) as usize];
    let mut fs = PowerCut::mount().map_err(|e| format!("mounting: {e}"))?;
    let data = fs.mount.join("data");
    let config = config_for(moment);
    let receiver = Receiver::start().await;
    // Half the rounds keep the master key in the data directory (the
    // default), half take it from the environment, as several hosts do.
    let key_from_env = seed.is_multiple_of(2);
    let builder = || {
        let builder = Host::builder().config(&config);
        match key_from_env {
            true => builder.env("SWITCHYARD_MASTER_KEY", &"ab".repeat(32)),
            false => builder,
        }
    };
    let mut host = builder().data_dir(&data).start().await;
    let ledger: Shared = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (alice, bob) = tagging_on(&host, &receiver, "tagged").await;
    ok!(host, bob, POST "{VERSIONS}", {});
    let mut clients = Vec::new();
    let spawn_load = |host: &Host, clients: &mut Vec<_>, taggers: usize| {
        for c in 0..taggers {
            clients.push(client(host, &bob, Writes::Tags(c), &ledger, &stop));
        }
        clients.push(client(host, &alice, Writes::Projects, &ledger, &stop));
    };
    match moment {
        Moment::Configuring => {
            spawn_load(&host, &mut clients, 1);
            sleep_ms(100 + rng.below(1_500)).await;
        }
        Moment::Loading | Moment::Expiring => {
            spawn_load(&host, &mut clients, 6);
            let base = if matches!(moment, Moment::Expiring) {
                4_000
            } else {
                300
            };
            sleep_ms(base + rng.below(2_500)).await;
        }
        Moment::SendsInFlight => {
            receiver.delay(300);
            spawn_load(&host, &mut clients, 6);
            sleep_ms(500 + rng.below(1_500)).await;
        }
        Moment::AfterLoad => {
            spawn_load(&host, &mut clients, 6);
            sleep_ms(800 + rng.below(800)).await;
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            for client in clients.drain(..) {
                let _ = client.await;
            }
            sleep_ms(1_200 + rng.below(2_500)).await;
        }
        Moment::AfterUpload => {
            let (status, body) = host
                .upload_plugin(
                    "kept",
                    "kind=payload-template&version=1.0.0",
                    plugin_wasm("template_default"),
                )
                .await;
            if status != 201 {
                return Err(format!("uploading a plugin: {status} {body}"));
            }
            ledger.lock().unwrap().plugin_acked = true;
            sleep_ms(rng.below(1_500)).await;
        }
        Moment::AfterRestart => {
            spawn_load(&host, &mut clients, 4);
            sleep_ms(500 + rng.below(1_000)).await;
            host.kill9();
            for client in clients.drain(..) {
                let _ = client.await;
            }
            host = builder().data_dir(&data).start().await;
            let restarted_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            for c in 0..4 {
                clients.push(client(
                    &host,
                    &bob,
                    Writes::Tags(10 + c),
                    &ledger,
                    &restarted_stop,
                ));
            }
            sleep_ms(rng.below(800)).await;
        }
    }
    let dropped_bytes = fs.cut();
    host.kill9();
    // What the dead host had sent has arrived by now; nothing new comes
    // until the next host starts.
    sleep_ms(300).await;
    let before_cut = receiver.arrived();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for client in clients {
        let _ = client.await;
    }
    fs.unmount();
    receiver.delay(0);
    let after =
        format!("after a cut at {moment:?} ({dropped_bytes} bytes not synced were dropped)");
    let restarted = builder()
        .data_dir(&fs.backing.join("data"))
        .try_start()
        .await
        .map_err(|log| format!("{after}, the host did not start:\n{log}"))?;
    // Every client has stopped: what they saw is final.
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    let checked = check(&restarted, &bob, &receiver, &ledger, before_cut).await;
    checked
        .map(|resent| Outcome {
            tags_acked: ledger.tags_acked.len(),
            projects_acked: ledger.projects_acked.len(),
            dropped_bytes,
            resent,
        })
        .map_err(|e| format!("{after}: {e}\n{}", restarted.log()))
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// What a round checks on the host started after the cut; the number of
/// deliveries a receiver got twice under one id, each of which must have
/// been in flight at the cut (its first arrival among the first
/// `before_cut`).
async fn check(
    host: &Host,
    bob: &str,
    receiver: &Receiver,
    ledger: &Ledger,
    before_cut: usize,
) -> Result<usize, String> {
    let (status, health) = host.get_anon("/v1/system-check").await;
    if status != 200 {
        return Err(format!("the system check answers {status}: {health}"));
    }
    // The configuration the world was built with (all acknowledged).
    for path in [
        "/v1/teams/ml",
        "/v1/teams/ml/webhooks/ci",
        PROJECT,
        "/v1/teams/ml/projects/vision/automations/tagged",
    ] {
        let (status, body) = host.call("GET", path, bob, None).await;
        if status != 200 {
            return Err(format!(
                "acknowledged configuration lost: GET {path} answers {status} {body}"
            ));
        }
    }
    for name in &ledger.projects_acked {
        let (status, body) = host
            .call("GET", &format!("/v1/teams/ml/projects/{name}"), bob, None)
            .await;
        if status != 200 {
            return Err(format!(
                "the acknowledged project {name} is lost: {status} {body}"
            ));
        }
    }
    let (_, projects) = host.call("GET", "/v1/teams/ml/projects", bob, None).await;
    for name in listed(&projects, "name") {
        if name != "vision" && !ledger.projects_sent.contains(name) {
            return Err(format!("a project nobody created appeared: {name}"));
        }
    }
    if ledger.plugin_acked {
        let (status, body) = host
            .invoke("kept", &json!({"template": "{\"a\": 1}"}))
            .await;
        if status != 200 {
            return Err(format!(
                "the acknowledged plugin upload is lost: {status} {body}"
            ));
        }
    }
    let (status, version) = host.call("GET", &format!("{VERSIONS}/v0"), bob, None).await;
    if status != 200 {
        return Err(format!("the version is lost: {status} {version}"));
    }
    let tags: HashSet<String> = version["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(String::from))
        .collect();
    if let Some(lost) = ledger.tags_acked.difference(&tags).next() {
        return Err(format!(
            "the acknowledged tag {lost} is lost ({} acknowledged, {} kept)",
            ledger.tags_acked.len(),
            tags.len()
        ));
    }
    if let Some(phantom) = tags.iter().find(|t| !ledger.tags_sent.contains(*t)) {
        return Err(format!("a tag nobody sent appeared: {phantom}"));
    }
    let resent = delivered_once(receiver, &ledger.tags_acked, &ledger.tags_sent).await?;
    let arrivals = receiver.arrivals();
    let after: Vec<&String> = arrivals[before_cut.min(arrivals.len())..].iter().collect();
    let mut seen_after = HashSet::new();
    for id in &after {
        if !seen_after.insert(*id) {
            return Err(format!("{id} was sent twice after the restart"));
        }
    }
    let in_flight: HashSet<&String> = arrivals[..before_cut.min(arrivals.len())].iter().collect();
    let counts = receiver.arrivals_per_delivery();
    if let Some(id) = counts
        .iter()
        .find(|(id, n)| **n > 1 && !in_flight.contains(id))
        .map(|(id, _)| id)
    {
        return Err(format!(
            "{id} arrived twice without being in flight at the cut"
        ));
    }
    Ok(resent)
}

/// Waits (60 s at most) until every acknowledged tag has been delivered;
/// each tag under one delivery id, none that was never sent. Returns how
/// many deliveries arrived more than once under their id.
async fn delivered_once(
    receiver: &Receiver,
    acked: &HashSet<String>,
    sent: &HashSet<String>,
) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
        for r in receiver.received().iter().filter(|r| r.answered == 200) {
            let body: Value = verified(r);
            let tag = body["tag"].as_str().unwrap_or_default().to_string();
            let id = r
                .header("x-service-delivery")
                .unwrap_or_default()
                .to_string();
            seen.entry(tag).or_default().insert(id);
        }
        if let Some((tag, ids)) = seen.iter().find(|(_, ids)| ids.len() > 1) {
            return Err(format!(
                "{tag} was delivered under several delivery ids: {ids:?}"
            ));
        }
        if let Some(tag) = seen.keys().find(|t| !sent.contains(*t)) {
            return Err(format!("a delivery for a tag nobody sent: {tag}"));
        }
        let missing = acked.iter().filter(|t| !seen.contains_key(*t)).count();
        if missing == 0 {
            let resent = receiver
                .arrivals_per_delivery()
                .values()
                .filter(|n| **n > 1)
                .count();
            return Ok(resent);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "after 60 s, {missing} of {} acknowledged events were never delivered",
                acked.len()
            ));
        }
        sleep_ms(100).await;
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SWITCHYARD_POWER_CUT_SEED") {
        Ok(seed) => vec![seed.parse().expect("SWITCHYARD_POWER_CUT_SEED is a number")],
        Err(_) => (1..=14).collect(),
    }
}

/// At least twelve rounds, each at a seeded moment; every one must keep
/// what it acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_at_any_moment_loses_nothing_acknowledged() {
    if mounted().is_none() {
        return;
    }
    let started = Instant::now();
    let mut failures = Vec::new();
    let rounds = seeds();
    for &seed in &rounds {
        match round(seed).await {
            Ok(o) => println!(
                "power cut, seed {seed} ({:?}): started again; {} acknowledged events delivered once each, {} acknowledged projects kept, {} bytes dropped, {} deliveries resent under their id",
                MOMENTS[(seed % MOMENTS.len() as u64) as usize],
                o.tags_acked,
                o.projects_acked,
                o.dropped_bytes,
                o.resent
            ),
            Err(e) => {
                println!(
                    "power cut, seed {seed}: FAILED (SWITCHYARD_POWER_CUT_SEED={seed} replays it): {e}"
                );
                failures.push(seed);
            }
        }
    }
    println!(
        "power cut: {} rounds in {:.0} s, {} failed",
        rounds.len(),
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "rounds failed, seeds {failures:?} (their lines above say what was lost)"
    );
}
