//! What the delivery path keeps through a crash, a full disk and its own
//! history's lifetime: kill -9 under load (mid-append, mid-commit, while
//! segments are dropped), a disk that fills, and history that expires while
//! the store stops growing.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::delivery::{CONFIG, lasting_retries, tagging, tagging_on, verified};
use crate::harness::{Engine, Host};
use crate::receiver::Receiver;
use crate::world::PROJECT;

const VERSIONS: &str = "/v1/teams/ml/projects/vision/collections/detector/versions";

/// `keep_days` of `seconds`.
fn keeping(seconds: f64) -> String {
    format!("{CONFIG}\n[history]\nkeep_days = {}", seconds / 86_400.0)
}

/// Tags v0 with `tag`; whether the host acknowledged it (200).
async fn tag(host_base: &str, http: &reqwest::Client, key: &str, tag: &str) -> Option<u16> {
    let answer = http
        .post(format!("{host_base}{VERSIONS}/v0/tags"))
        .bearer_auth(key)
        .json(&json!({ "tag": tag }))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    Some(answer.status().as_u16())
}

/// `n` clients tagging v0 as fast as they can until the host stops
/// answering, tag `i` of client `c` named `{prefix}c{c}-{i}`; the tags
/// answered 200 go into `acknowledged`.
fn tagging_clients(
    host: &Host,
    key: &str,
    n: usize,
    prefix: &str,
    acknowledged: &Arc<Mutex<HashSet<String>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|c| {
            let (base, http, key) = (host.base.clone(), host.http.clone(), key.to_string());
            let (prefix, acknowledged) = (prefix.to_string(), acknowledged.clone());
            tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("{prefix}c{c}-{i}");
                    match tag(&base, &http, &key, &name).await {
                        Some(200) => acknowledged.lock().unwrap().insert(name),
                        Some(_) => continue,
                        None => return,
                    };
                }
            })
        })
        .collect()
}

/// Waits (at most `secs`) until every tag in `tags` has reached `receiver`;
/// returns the delivery ids seen per tag. Fails naming what is missing.
async fn arrived(
    receiver: &Receiver,
    tags: &HashSet<String>,
    secs: u64,
) -> HashMap<String, HashSet<String>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
        for r in receiver.received().iter().filter(|r| r.answered == 200) {
            let tag = verified(r)["tag"].as_str().unwrap().to_string();
            let id = r.header("x-service-delivery").unwrap().to_string();
            seen.entry(tag).or_default().insert(id);
        }
        let missing: Vec<_> = tags.iter().filter(|t| !seen.contains_key(*t)).collect();
        if missing.is_empty() {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after {secs} s, {} of {} acknowledged events never arrived: {missing:?}",
            missing.len(),
            tags.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_each_store!(kill_9_under_load_delivers_every_acknowledged_event_once);
/// Eight clients tag as fast as they can while segments rotate and drop
/// every second; the host is killed mid-stream (mid-append, mid-commit or
/// mid-drop, wherever it happens to be). After a restart every tag that
/// was answered 200 arrives, each under one delivery id.
async fn kill_9_under_load_delivers_every_acknowledged_event_once() {
    let receiver = Receiver::start().await;
    let config = keeping(2.0);
    let (mut host, _, bob) = tagging(&receiver, &config, "tagged").await;
    ok!(host, bob, POST "{VERSIONS}", {});
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let clients = tagging_clients(&host, &bob, 8, "", &acknowledged);
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    host.kill9();
    for client in clients {
        client.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 50,
        "only {} tags were acknowledged",
        acknowledged.len()
    );
    let restarted = Host::builder()
        .config(&config)
        .same_store(&host)
        .start()
        .await;
    // The tags themselves (configuration, in sled) are there too: those of
    // the last second before the kill only in the journal, sled's log.
    let (_, version) = call!(restarted, bob, GET "{VERSIONS}/v0");
    let tags: HashSet<String> = version["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let lost: Vec<_> = acknowledged.difference(&tags).collect();
    assert!(
        lost.is_empty(),
        "acknowledged tags lost in the crash: {lost:?}"
    );
    let seen = arrived(&receiver, &acknowledged, 60).await;
    for tag in &acknowledged {
        assert_eq!(
            seen[tag].len(),
            1,
            "{tag} arrived under several delivery ids: {:?}",
            seen[tag]
        );
    }
}

on_each_store!(history_past_its_lifetime_goes_and_the_store_stops_growing);
/// With a four-second history, waves of events come and go: each wave's
/// executions leave the history once past their lifetime, and the store
/// (the journal's files, or PostgreSQL's executions) holds about one wave,
/// however many came before.
async fn history_past_its_lifetime_goes_and_the_store_stops_growing() {
    let receiver = Receiver::start().await;
    let (host, alice, bob) = tagging(&receiver, &keeping(4.0), "tagged").await;
    ok!(host, bob, POST "{VERSIONS}", {});
    let executions = format!("{PROJECT}/automations/tagged/executions");
    const WAVE: usize = 40;
    let mut first_wave_bytes = 0;
    let mut first_ids = Vec::new();
    for wave in 0..4 {
        let tags: HashSet<String> = (0..WAVE).map(|i| format!("w{wave}-{i}")).collect();
        for t in &tags {
            ok!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": t});
        }
        arrived(&receiver, &tags, 30).await;
        if wave == 0 {
            first_wave_bytes = journal_bytes(&host.data_dir);
            let (_, list) = call!(host, alice, GET "{executions}");
            first_ids = ids(&list);
            assert_eq!(first_ids.len(), WAVE);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Once past the lifetime only the last wave is left, whatever came.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, list) = call!(host, alice, GET "{executions}");
        let tags: HashSet<String> = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"]["tag"].as_str().unwrap().to_string())
            .collect();
        if tags.iter().all(|t| t.starts_with("w3-")) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "executions past their lifetime are still listed: {} of them",
            tags.iter().filter(|t| !t.starts_with("w3-")).count()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let first = &first_ids[0];
    let (status, _) = call!(host, alice, GET "{PROJECT}/automations/tagged/executions/{first}");
    assert_eq!(status, 404, "an expired execution is gone");
    if Engine::current() == Engine::Sled {
        let now = journal_bytes(&host.data_dir);
        assert!(
            now <= 2 * first_wave_bytes + 64 * 1024,
            "the journal grew to {now} bytes; one wave took {first_wave_bytes}"
        );
    }
}

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

/// The bytes in the embedded store's journal.
fn journal_bytes(data_dir: &Path) -> u64 {
    std::fs::read_dir(data_dir.join("journal"))
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The embedded store on a 96 MiB tmpfs that then fills up: writes answer
/// 503 `store_full` and change nothing, reads go on, the system check says
/// why, the host restarts on the full disk (the reserve's room), and once
/// there is room again writes resume by themselves and every acknowledged
/// delivery arrives.
#[tokio::test]
async fn a_full_disk_answers_503_store_full_starts_and_loses_nothing_acknowledged() {
    let Some(disk) = Tmpfs::mount(96 << 20) else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.answer(503);
    let config = format!("{}\n[store]\nreserve_mb = 8", lasting_retries());
    let data = disk.path().join("data");
    let mut host = Host::builder()
        .config(&config)
        .data_dir(&data)
        .start()
        .await;
    assert!(data.join("reserve").exists(), "the reserve is set aside");
    let (_, bob) = tagging_on(&host, &receiver, "tagged").await;
    ok!(host, bob, POST "{VERSIONS}", {});
    let mut acknowledged: HashSet<String> = (0..5).map(|i| format!("before-{i}")).collect();
    for t in &acknowledged {
        ok!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": t});
    }
    let filler = disk.fill();
    // The journal's last page may still take a record or two: tag until
    // the disk refuses. What was answered 200 meanwhile must arrive too.
    let mut refused = Vec::new();
    for i in 0..50 {
        let t = format!("full-{i}");
        let (status, body) = call!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": t});
        match status {
            200 => {
                assert!(refused.is_empty(), "{t} taken after a refusal");
                acknowledged.insert(t);
            }
            503 => {
                assert_eq!(body["error"]["code"], "store_full", "{body}");
                assert!(
                    body["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("Reads still work")
                );
                refused.push(t);
            }
            _ => panic!("a tag on a full disk answered {status}: {body}"),
        };
    }
    assert!(refused.len() > 40, "50 tags on a full disk were accepted");
    assert!(!data.join("reserve").exists(), "the reserve was given up");
    let (status, _) = call!(host, bob, GET "{VERSIONS}/v0");
    assert_eq!(status, 200, "reads go on");
    let (status, health) = host.get_anon("/v1/system-check").await;
    assert_eq!(status, 503, "{health}");
    assert!(
        health["database"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("store_full"),
        "{health}"
    );

    // A restart on the full disk.
    host.kill9();
    let host = Host::builder()
        .config(&config)
        .same_store(&host)
        .start()
        .await;
    let (status, body) = call!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": "still-full"});
    assert_eq!(
        (status, &body["error"]["code"]),
        (503, &json!("store_full")),
        "{body}"
    );

    std::fs::remove_file(filler).unwrap();
    receiver.answer(200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _) = call!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": "after"});
        if status == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "writes did not resume: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    acknowledged.insert("after".to_string());
    arrived(&receiver, &acknowledged, 30).await;
    let (_, version) = call!(host, bob, GET "{VERSIONS}/v0");
    let tags = version["tags"].as_array().unwrap();
    for t in refused.iter().chain(["still-full".to_string()].iter()) {
        assert!(
            !tags.contains(&json!(t)),
            "the refused {t} changed nothing: {version}"
        );
    }
    assert!(
        data.join("reserve").exists(),
        "the reserve is set aside again"
    );
}

/// A tmpfs of a given size, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts one; `None` (the test skipped) only where
    /// `SWITCHYARD_TEST_NO_MOUNT` says this machine cannot mount (not root).
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted && std::env::var_os("SWITCHYARD_TEST_NO_MOUNT").is_some() {
            return None;
        }
        assert!(
            mounted,
            "mounting a tmpfs for the full-disk test failed (it needs root); \
             set SWITCHYARD_TEST_NO_MOUNT=1 to skip it on this machine"
        );
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk to the last byte; returns the filler's path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.path().join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 << 10];
        while file.write_all(&chunk).is_ok() {}
        while file.write_all(&[0]).is_ok() {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Delivery ids that arrived at `receiver` more than once, with how often.
fn sent_twice(receiver: &Receiver) -> Vec<(String, usize)> {
    let mut twice: Vec<_> = receiver
        .arrivals_per_delivery()
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    twice.sort();
    twice
}

on_each_store!(sigterm_under_load_sends_nothing_twice);
/// 300 events for a receiver that takes 2 s an answer: SIGTERM while
/// dozens are in flight. Those sends finish and are recorded before the
/// host exits, so after a restart none arrives a second time.
async fn sigterm_under_load_sends_nothing_twice() {
    let receiver = Receiver::start().await;
    receiver.delay(2_000);
    let (mut host, _, bob) = tagging(&receiver, CONFIG, "tagged").await;
    ok!(host, bob, POST "{VERSIONS}", {});
    let mut acknowledged = HashSet::new();
    for i in 0..300 {
        let name = format!("t{i}");
        assert_eq!(tag(&host.base, &host.http, &bob, &name).await, Some(200));
        acknowledged.insert(name);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while receiver.arrived() < 20 {
        assert!(tokio::time::Instant::now() < deadline, "no sends in flight");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = host.terminate().await;
    assert!(status.success(), "{status}");
    let in_flight = receiver.arrived();
    assert!(in_flight < 300, "all {in_flight} went before the stop");
    receiver.delay(0);
    let restarted = Host::builder()
        .config(CONFIG)
        .same_store(&host)
        .start()
        .await;
    arrived(&receiver, &acknowledged, 60).await;
    let twice = sent_twice(&receiver);
    assert!(
        twice.is_empty(),
        "{} deliveries went again after the restart ({in_flight} requests had arrived by the stop); the first: {:?}",
        twice.len(),
        &twice[..twice.len().min(5)]
    );
    drop(restarted);
}

on_each_store!(several_kill_9s_during_one_load_deliver_every_acknowledged_event);
/// Four clients tag while the host is killed three times, at moments drawn
/// from a seed the test prints, and restarted each time. Every tag answered
/// 200 arrives; a delivery id that arrives more than once (a send cut off
/// by a kill goes again) is counted and reported, not failed.
async fn several_kill_9s_during_one_load_deliver_every_acknowledged_event() {
    let seed = std::env::var("SWITCHYARD_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.unwrap().as_nanos() as u64
        });
    eprintln!("kill moments from SWITCHYARD_KILL_SEED={seed}");
    let mut rng = seed;
    let mut next_ms = move |range: u64| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) % range
    };
    let receiver = Receiver::start().await;
    receiver.delay(20);
    let (mut host, _, bob) = tagging(&receiver, CONFIG, "tagged").await;
    ok!(host, bob, POST "{VERSIONS}", {});
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    for round in 0..4 {
        let clients = tagging_clients(&host, &bob, 4, &format!("r{round}-"), &acknowledged);
        if round == 3 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            host.terminate().await;
        } else {
            tokio::time::sleep(Duration::from_millis(200 + next_ms(1_500))).await;
            host.kill9();
        }
        for client in clients {
            client.await.unwrap();
        }
        host = Host::builder()
            .config(CONFIG)
            .same_store(&host)
            .start()
            .await;
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() > 50,
        "only {} acknowledged",
        acknowledged.len()
    );
    // Fails naming any acknowledged tag that never arrived.
    arrived(&receiver, &acknowledged, 60).await;
    let twice = sent_twice(&receiver);
    eprintln!(
        "{} acknowledged events, every one delivered; {} delivery ids arrived more than once (sends cut off by a kill)",
        acknowledged.len(),
        twice.len()
    );
    drop(host);
}

/// The host's PostgreSQL crashes (`pg_ctl stop -m immediate`) in the middle
/// of a load and comes back: the host rides it out without a restart, and
/// every event it acknowledged, before or after, is delivered.
#[tokio::test]
async fn postgres_crashing_mid_load_loses_nothing_acknowledged() {
    Engine::Postgres
        .run(async {
            let cluster = Arc::new(
                crate::harness::PrivateCluster::start()
                    .expect("initdb and pg_ctl, for a PostgreSQL of the test's own"),
            );
            let pg_ctl = async |crash: bool| {
                let cluster = cluster.clone();
                let done = tokio::task::spawn_blocking(move || match crash {
                    true => cluster.crash(),
                    false => cluster.up(),
                });
                assert!(done.await.unwrap(), "pg_ctl (crash: {crash})");
            };
            let database = Arc::new(crate::harness::TestDatabase::create_on(&cluster.url).await);
            let receiver = Receiver::start().await;
            let host = Host::builder()
                .config(CONFIG)
                .database(database)
                .start()
                .await;
            let (_, bob) = tagging_on(&host, &receiver, "tagged").await;
            ok!(host, bob, POST "{VERSIONS}", {});
            let acknowledged = Arc::new(Mutex::new(HashSet::new()));
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let clients: Vec<_> = (0..4)
                .map(|c| {
                    let (base, http, bob) = (host.base.clone(), host.http.clone(), bob.clone());
                    let (acknowledged, stop) = (acknowledged.clone(), stop.clone());
                    tokio::spawn(async move {
                        let mut i = 0;
                        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                            let name = format!("c{c}-{i}");
                            i += 1;
                            if tag(&base, &http, &bob, &name).await == Some(200) {
                                acknowledged.lock().unwrap().insert(name);
                            } else {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let before = acknowledged.lock().unwrap().len();
            pg_ctl(true).await;
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            pg_ctl(false).await;
            // The host answers again once the database does.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while acknowledged.lock().unwrap().len() < before + 20 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the host took no writes within 30 s of PostgreSQL's return"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            for client in clients {
                client.await.unwrap();
            }
            let acknowledged = acknowledged.lock().unwrap().clone();
            // Fails naming any acknowledged tag that never arrived.
            arrived(&receiver, &acknowledged, 60).await;
            eprintln!(
                "{} acknowledged ({before} before the crash), every one delivered; {} delivery ids arrived more than once",
                acknowledged.len(),
                sent_twice(&receiver).len()
            );
        })
        .await;
}

/// One byte flipped in the older of two segments, in a record of an
/// acknowledged delivery still waiting: the start refuses, naming the file and
/// the offset; `store check` says so and changes nothing; `store salvage`
/// keeps what comes before the damage, and the host starts again on it.
#[tokio::test]
async fn damage_in_an_older_segment_stops_the_start_until_an_operator_salvages() {
    Engine::Sled
        .run(async {
            let receiver = Receiver::start().await;
            receiver.answer(503);
            let config = lasting_retries();
            let (mut host, _, bob) = tagging(&receiver, &config, "tagged").await;
            ok!(host, bob, POST "{VERSIONS}", {});
            for round in 0..2 {
                for i in 0..20 {
                    ok!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": format!("r{round}-{i}")});
                }
                assert!(host.terminate().await.success());
                if round == 0 {
                    host = Host::builder()
                        .config(&config)
                        .same_store(&host)
                        .start()
                        .await;
                }
            }
            let data = host.data_dir.to_str().unwrap().to_string();
            let older = host.data_dir.join("journal/0000000000000001.log");
            let mut bytes = std::fs::read(&older).unwrap();
            // In the record of an execution whose delivery still waits: a
            // start reads those (and what follows its snapshot) whole.
            let record = br#""op":"execution""#;
            let at = bytes
                .windows(record.len())
                .position(|w| w == record)
                .expect("an execution's record in the older segment");
            bytes[at + 3] ^= 0x40;
            std::fs::write(&older, &bytes).unwrap();

            let refused = Host::builder()
                .config(&config)
                .same_store(&host)
                .try_start()
                .await
                .err()
                .expect("a damaged journal must not start");
            assert!(
                refused.contains("0000000000000001.log is damaged at offset")
                    && refused.contains("store salvage"),
                "{refused}"
            );
            let (ok, out, err) =
                crate::harness::cli(&["store", "check", "--data-dir", &data]).await;
            assert!(!ok && out.contains("DAMAGED"), "{out}{err}");
            assert_eq!(
                std::fs::read(&older).unwrap(),
                bytes,
                "a check changes nothing"
            );

            let (ok, out, err) =
                crate::harness::cli(&["store", "salvage", "--data-dir", &data]).await;
            assert!(ok && out.contains("cut 0000000000000001.log"), "{out}{err}");
            let (ok, out, err) =
                crate::harness::cli(&["store", "check", "--data-dir", &data]).await;
            assert!(ok && out.contains("whole"), "{out}{err}");
            assert!(
                host.data_dir
                    .join("journal/0000000000000002.log.salvaged")
                    .exists()
            );

            receiver.answer(200);
            let restarted = Host::builder()
                .config(&config)
                .same_store(&host)
                .start()
                .await;
            ok!(restarted, bob, POST "{VERSIONS}/v0/tags", {"tag": "after"});
            arrived(&receiver, &HashSet::from(["after".to_string()]), 30).await;
        })
        .await;
}

/// A command refused on a store a running host holds leaves the host's
/// reserve where it is.
#[tokio::test]
async fn a_command_refused_on_a_live_store_leaves_its_reserve() {
    Engine::Sled
        .run(async {
            let host = Host::builder().start().await;
            let reserve = host.data_dir.join("reserve");
            assert!(reserve.exists(), "the reserve is set aside");
            let data = host.data_dir.to_str().unwrap();
            let args = ["admin", "create-user", "eve", "--data-dir", data];
            let (ok, _, err) = crate::harness::cli(&args).await;
            assert!(!ok, "a second process opened a live store: {err}");
            assert!(reserve.exists(), "the live host's reserve went: {err}");
        })
        .await;
}
