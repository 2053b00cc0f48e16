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
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (base, http, bob) = (host.base.clone(), host.http.clone(), bob.clone());
            let acknowledged = acknowledged.clone();
            tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("c{c}-{i}");
                    match tag(&base, &http, &bob, &name).await {
                        Some(200) => acknowledged.lock().unwrap().insert(name),
                        Some(_) => continue,
                        None => return,
                    };
                }
            })
        })
        .collect();
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

/// The embedded store on a 48 MiB tmpfs that then fills up: event actions
/// answer 503 and change nothing, deliveries already acknowledged wait, and
/// once there is room again they all arrive and actions succeed.
#[tokio::test]
async fn a_full_disk_answers_503_and_loses_nothing_acknowledged() {
    let Some(disk) = Tmpfs::mount(48 << 20) else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.answer(503);
    let config = lasting_retries();
    let host = Host::builder()
        .config(&config)
        .data_dir(&disk.path().join("data"))
        .start()
        .await;
    let (_, bob) = tagging_on(&host, &receiver, "tagged").await;
    ok!(host, bob, POST "{VERSIONS}", {});
    let mut acknowledged: HashSet<String> = (0..5).map(|i| format!("before-{i}")).collect();
    for t in &acknowledged {
        ok!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": t});
    }
    let filler = disk.fill();
    // The journal's last page may still take a record or two: tag until
    // the disk refuses. What was answered 200 meanwhile must arrive too.
    let mut refused = None;
    for i in 0..50 {
        let t = format!("full-{i}");
        let (status, body) = call!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": t});
        match status {
            200 => acknowledged.insert(t),
            503 => {
                assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
                refused = Some(t);
                break;
            }
            _ => panic!("a tag on a full disk answered {status}: {body}"),
        };
    }
    let refused = refused.expect("50 tags on a full disk were all accepted");
    std::fs::remove_file(filler).unwrap();
    receiver.answer(200);
    arrived(&receiver, &acknowledged, 30).await;
    ok!(host, bob, POST "{VERSIONS}/v0/tags", {"tag": "after"});
    arrived(&receiver, &HashSet::from(["after".to_string()]), 30).await;
    let (_, version) = call!(host, bob, GET "{VERSIONS}/v0");
    let tags = version["tags"].as_array().unwrap();
    assert!(
        !tags.contains(&json!(refused)),
        "the refused action changed nothing: {version}"
    );
    assert!(tags.contains(&json!("after")), "{version}");
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
