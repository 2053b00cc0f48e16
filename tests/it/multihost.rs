//! Several hosts over one PostgreSQL database serve as one: deliveries are
//! sent once whichever host accepted the event, a dead host's deliveries are
//! taken over, a secret set on one host signs on another, and a database
//! that goes away and comes back is survived without a restart.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{Engine, Host, TestDatabase, expect_error};
use crate::receiver::{Receiver, expected_signature};
use crate::world::{PROJECT, SIGN, World, ok};

/// Every host of a deployment shares the master key.
const MASTER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

const CONFIG: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n\
    [plugins]\nwatch_interval_ms = 100\n\
    [delivery]\nretry_schedule_ms = [0, 150, 150, 150, 150, 150, 150, 150, 150, 150, 150, 150]\n\
    jitter = 0.0\npoll_interval_ms = 50\n\
    [store]\nlease_ms = 1000";

/// `n` hosts on one new database.
async fn hosts(n: usize) -> Vec<Host> {
    let first = Host::builder()
        .config(CONFIG)
        .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
        .start()
        .await;
    let mut all = vec![];
    for _ in 1..n {
        all.push(
            Host::builder()
                .config(CONFIG)
                .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
                .same_database(&first)
                .start()
                .await,
        );
    }
    all.insert(0, first);
    all
}

/// The world on the first host, an automation on tags that calls
/// `receiver`, and version v0 to tag: (alice, bob).
async fn world(hosts: &[Host], receiver: &Receiver) -> (String, String) {
    let hook = format!("{}/hook", receiver.base);
    let world = World::build(&hosts[0], Some(&hook)).await;
    let body = json!({"name": "tagged", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"tag": "${tag}"}"#});
    ok(
        &hosts[0],
        &world.alice,
        "POST",
        &format!("{PROJECT}/automations"),
        body,
    )
    .await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok(&hosts[0], &world.bob, "POST", &versions, json!({})).await;
    (world.alice, world.bob)
}

async fn tag(host: &Host, key: &str, tag: &str) {
    let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
    ok!(host, key, POST "{path}", {"tag": tag});
}

/// Waits (at most `secs`) until the automation has `n` executions, all
/// Finished; returns their attempt counts.
async fn finished(host: &Host, key: &str, n: usize, secs: u64) -> Vec<usize> {
    let path = format!("{PROJECT}/automations/tagged/executions");
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (_, list) = call!(host, key, GET "{path}");
        let data = list["data"].as_array().cloned().unwrap_or_default();
        if data.len() == n && data.iter().all(|e| e["status"] == "Finished") {
            return data
                .iter()
                .map(|e| e["attempts"].as_array().map_or(0, Vec::len))
                .collect();
        }
        let statuses: Vec<_> = data.iter().map(|e| e["status"].clone()).collect();
        assert!(
            Instant::now() < deadline,
            "waited {secs} s for {n} finished executions; have {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Requests the receiver answered 200, by delivery id.
fn acknowledged(receiver: &Receiver) -> HashMap<String, usize> {
    let mut by_id = HashMap::new();
    for request in receiver.received() {
        if request.answered == 200 {
            let id = request.header("x-service-delivery").unwrap().to_string();
            *by_id.entry(id).or_insert(0) += 1;
        }
    }
    by_id
}

#[tokio::test]
async fn three_hosts_deliver_every_event_exactly_once() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(3).await;
            let (_, bob) = world(&hosts, &receiver).await;
            let events = 30;
            for i in 0..events {
                tag(&hosts[i % 3], &bob, &format!("t{i}")).await;
            }
            receiver.wait_for(events, 30).await;
            let attempts = finished(&hosts[1], &bob, events, 30).await;
            assert!(
                attempts.iter().all(|a| *a == 1),
                "one attempt each: {attempts:?}"
            );
            let acked = acknowledged(&receiver);
            assert_eq!(acked.len(), events, "every event, its own delivery id");
            assert!(
                acked.values().all(|n| *n == 1),
                "no delivery id twice: {acked:?}"
            );
            let tags: HashSet<String> = receiver
                .received()
                .iter()
                .map(|r| r.json()["tag"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(tags.len(), events);
        })
        .await;
}

#[tokio::test]
async fn three_hosts_keep_one_fifo_line() {
    Engine::Postgres
        .run(async {
            let (receiver, hook) = crate::fifo::Sequencer::start().await;
            let hosts = hosts(3).await;
            let world = World::build(&hosts[0], Some(&hook)).await;
            let settings = json!({"url": hook, "ordering": "fifo"});
            ok!(hosts[1], world.alice, PUT "/v1/teams/ml/webhooks/ci", settings);
            let body = json!({"name": "tagged", "event": {"type": "ADD_ARTIFACT_TAG"},
                "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
                "payload": r#"{"tag": "${tag}"}"#});
            ok!(hosts[0], world.alice, POST "{PROJECT}/automations", body);
            let versions = format!("{PROJECT}/collections/detector/versions");
            ok!(hosts[0], world.bob, POST "{versions}", {});
            // Each host accepts every third event; each sends in turn.
            let events = 45;
            for i in 0..events {
                tag(&hosts[i % 3], &world.bob, &format!("t{i}")).await;
            }
            let delivered = receiver.delivered(events).await;
            assert_eq!(delivered, (0..events).collect::<Vec<_>>());
            receiver.assert_in_order();
            let most = receiver
                .most_at_once
                .load(std::sync::atomic::Ordering::SeqCst);
            assert_eq!(most, 1, "one in flight across the hosts");
        })
        .await;
}

/// `host` accepts `events` tags (`{prefix}0`…) and holds their deliveries,
/// in flight to a receiver that answers slowly, when it dies (kill -9);
/// then the receiver answers 200 at once.
async fn dies_holding(
    host: &mut Host,
    receiver: &Receiver,
    key: &str,
    prefix: &str,
    events: usize,
) {
    receiver.delay(10_000);
    receiver.answer(503);
    for i in 0..events {
        tag(host, key, &format!("{prefix}{i}")).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while receiver.arrived() < events {
        assert!(Instant::now() < deadline, "the sends never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.kill9();
    receiver.delay(0);
    receiver.answer(200);
}

#[tokio::test]
async fn a_dead_hosts_deliveries_are_taken_over() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let mut hosts = hosts(3).await;
            let (_, bob) = world(&hosts, &receiver).await;
            let events = 5;
            dies_holding(&mut hosts[2], &receiver, &bob, "t", events).await;
            let killed = Instant::now();
            let attempts = finished(&hosts[0], &bob, events, 30).await;
            let took = killed.elapsed();
            eprintln!(
                "take-over: every delivery of the killed host acknowledged {} ms after the kill",
                took.as_millis()
            );
            assert!(attempts.iter().all(|a| *a >= 1), "{attempts:?}");
            let acked = acknowledged(&receiver);
            assert_eq!(acked.len(), events, "every event delivered: {acked:?}");
        })
        .await;
}

#[tokio::test]
async fn a_secret_set_on_one_host_signs_on_another() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(3).await;
            let (alice, bob) = world(&hosts, &receiver).await;
            tag(&hosts[2], &bob, "before").await;
            let first = receiver.wait_for(1, 10).await;
            assert_eq!(
                first[0].header("x-service-signature").unwrap(),
                expected_signature(SIGN, &first[0].body)
            );
            let rotated = "rotated-sign-2";
            ok(
                &hosts[1],
                &alice,
                "PUT",
                "/v1/teams/ml/secrets/SIGN",
                json!({"value": rotated}),
            )
            .await;
            tag(&hosts[2], &bob, "after").await;
            let all = receiver.wait_for(2, 10).await;
            assert_eq!(
                all[1].header("x-service-signature").unwrap(),
                expected_signature(rotated, &all[1].body),
                "host 3 signs with the secret set on host 2"
            );
        })
        .await;
}

/// Hosts keep what let a caller in; a key revoked, or a member removed,
/// on one host stops working on the others within a second (PostgreSQL's
/// notice), after it had worked there.
#[tokio::test]
async fn a_key_revoked_or_a_member_removed_on_one_host_stops_working_on_another() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(2).await;
            let (alice, bob) = world(&hosts, &receiver).await;
            let (status, created) = hosts[0]
                .call(
                    "POST",
                    "/v1/me/api-keys",
                    &bob,
                    Some(&json!({"name": "second"})),
                )
                .await;
            assert_eq!(status, 201, "{created}");
            let (key, id) = (
                created["key"].as_str().unwrap(),
                created["id"].as_str().unwrap(),
            );
            let collections = format!("{PROJECT}/collections");
            let works = |host: &Host, key: &str| {
                let (host, key) = (host.base.clone(), key.to_string());
                let path = collections.clone();
                async move {
                    reqwest::Client::new()
                        .get(format!("{host}{path}"))
                        .bearer_auth(key)
                        .send()
                        .await
                        .unwrap()
                        .status()
                        .as_u16()
                }
            };
            assert_eq!(works(&hosts[1], key).await, 200, "kept by host 2");
            assert_eq!(works(&hosts[1], &bob).await, 200);
            let revoke = format!("/v1/me/api-keys/{id}");
            assert_eq!(hosts[0].call("DELETE", &revoke, &bob, None).await.0, 204);
            assert_eq!(works(&hosts[0], key).await, 401, "at once where revoked");
            within_a_second(|| works(&hosts[1], key), 401, "the revoked key").await;
            let remove = "/v1/teams/ml/members/bob";
            let (status, body) = hosts[0].call("DELETE", remove, &alice, None).await;
            assert_eq!(status, 204, "{body}");
            within_a_second(|| works(&hosts[1], &bob), 404, "the removed member").await;
        })
        .await;
}

/// Waits until `answer` gives `status`; fails after a second.
async fn within_a_second<F: std::future::Future<Output = u16>>(
    answer: impl Fn() -> F,
    status: u16,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let now = answer().await;
        if now == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} still answered {now} after a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (at most 10 s) until `host` answers `status` for `path`.
async fn until_status(host: &Host, path: &str, status: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (now, body) = host.get(path).await;
        if now == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} on {} stayed {now}, not {status}: {body}",
            host.base
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_plugin_uploaded_on_one_host_serves_on_another_and_leaves_with_it() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(2).await;
            let (alice, bob) = world(&hosts, &receiver).await;
            let (status, body) = hosts[0]
                .upload_plugin(
                    "uploaded-template",
                    "kind=payload-template&version=2.0.0",
                    crate::harness::plugin_wasm("template_default"),
                )
                .await;
            assert_eq!(status, 201, "{body}");
            let path = "/v1/admin/plugins/uploaded-template";
            until_status(&hosts[1], path, 200).await;
            let automation = json!({"name": "uploaded", "event": {"type": "ADD_ARTIFACT_TAG"},
                "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
                "payload": r#"{"via": "uploaded", "tag": "${tag}"}"#,
                "template_plugin": "uploaded-template"});
            ok(
                &hosts[1],
                &alice,
                "POST",
                &format!("{PROJECT}/automations"),
                automation,
            )
            .await;
            tag(&hosts[1], &bob, "x").await;
            let sent = receiver.wait_for(2, 10).await;
            assert!(
                sent.iter().any(|r| r.json()["via"] == "uploaded"),
                "host 2 rendered with the plugin uploaded on host 1"
            );
            // It is in use: removing it takes force, and disables the automation.
            let (status, body) = hosts[1].delete(&format!("{path}?force=true")).await;
            assert_eq!(status, 204, "{body}");
            until_status(&hosts[0], path, 404).await;
        })
        .await;
}

/// A TCP relay to the database that the test can cut and restore: the
/// database going away and coming back, for the hosts behind it.
struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
    /// Accept connections and hold them open, answering nothing.
    stall: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let stall = Arc::new(AtomicBool::new(false));
        let links = Arc::new(Mutex::new(Vec::new()));
        let (flag, stalled, open) = (cut.clone(), stall.clone(), links.clone());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut client, _)) = listener.accept().await {
                if flag.load(Ordering::SeqCst) {
                    continue; // dropped: the database is away
                }
                if stalled.load(Ordering::SeqCst) {
                    held.push(client); // open, and silent
                    continue;
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                open.lock().unwrap().push(link.abort_handle());
            }
        });
        Relay {
            port,
            cut,
            stall,
            links,
            task,
        }
    }

    /// Cuts every open connection and refuses new ones, or lets them through.
    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
        if cut {
            self.drop_links();
        }
    }

    /// Cuts every open connection and holds new ones open without an
    /// answer: a database that stalls rather than refuses.
    fn stall(&self) {
        self.stall.store(true, Ordering::SeqCst);
        self.drop_links();
    }

    fn drop_links(&self) {
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// A URL for `database` that reaches it through a new relay.
    async fn to(database: &TestDatabase) -> (Relay, url::Url) {
        let mut url = url::Url::parse(&database.url).unwrap();
        let target = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
        let relay = Relay::start(target).await;
        url.set_port(Some(relay.port)).unwrap();
        (relay, url)
    }
}

/// A host on `database`, reaching it at `url` (a relay's).
async fn through(url: &url::Url, database: TestDatabase, config: &str) -> Host {
    Host::builder()
        .config(config)
        .database(Arc::new(database))
        .env("SWITCHYARD_STORE_URL", url.as_str())
        .start()
        .await
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
        self.set_cut(true);
    }
}

#[tokio::test]
async fn a_database_that_goes_away_is_survived_without_a_restart() {
    Engine::Postgres
        .run(async {
            let database = TestDatabase::create().await;
            let (relay, url) = Relay::to(&database).await;
            let receiver = Receiver::start().await;
            let host = through(
                &url,
                database,
                &format!("{CONFIG}\nconnect_timeout_ms = 1000"),
            )
            .await;
            let hosts = [host];
            let (_, bob) = world(&hosts, &receiver).await;
            let host = &hosts[0];
            // Accepted before the outage, its delivery failing meanwhile.
            receiver.answer(503);
            tag(host, &bob, "accepted").await;
            receiver.wait_for(1, 10).await;
            relay.set_cut(true);
            let (status, report) = host.get_anon("/v1/system-check").await;
            assert_eq!(status, 503, "{report}");
            assert_eq!(report["database"]["success"], false, "{report}");
            assert!(
                report["database"]["errors"][0]
                    .as_str()
                    .unwrap()
                    .contains("the store is unavailable"),
                "{report}"
            );
            let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
            let refused = call!(host, bob, POST "{path}", {"tag": "refused"});
            let error = expect_error(&refused, 503, "store_unavailable", None);
            assert!(
                error["message"].as_str().unwrap().contains("store"),
                "{error}"
            );
            receiver.answer(200);
            relay.set_cut(false);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let (status, report) = host.get_anon("/v1/system-check").await;
                if status == 200 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the host did not recover: {report}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tag(host, &bob, "after").await;
            let attempts = finished(host, &bob, 2, 30).await;
            assert_eq!(attempts.len(), 2);
            let tags: HashSet<String> = receiver
                .received()
                .iter()
                .filter(|r| r.answered == 200)
                .map(|r| r.json()["tag"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(
                tags,
                HashSet::from(["accepted".to_string(), "after".to_string()]),
                "nothing accepted is lost, nothing refused is sent"
            );
        })
        .await;
}

/// Credentials in both forms a URL carries them, in a database URL.
const USERINFO_PASSWORD: &str = "Ui-pw-4471x";
const QUERY_PASSWORD: &str = "Query-pw-8812y";

#[tokio::test]
async fn an_unreachable_database_shows_no_credential_or_location_to_callers() {
    Engine::Postgres
        .run(async {
            let database = TestDatabase::create().await;
            let (relay, mut url) = Relay::to(&database).await;
            // Trust authentication: the server never asks for them.
            url.set_password(Some(USERINFO_PASSWORD)).unwrap();
            url.query_pairs_mut()
                .append_pair("password", QUERY_PASSWORD);
            let database_name = url.path().trim_start_matches('/').to_string();
            let receiver = Receiver::start().await;
            let host = through(
                &url,
                database,
                &format!("{CONFIG}\nconnect_timeout_ms = 500"),
            )
            .await;
            let hosts = [host];
            let (_, bob) = world(&hosts, &receiver).await;
            let host = &hosts[0];
            relay.set_cut(true);

            let mut answers = Vec::new();
            let (status, report) = host.get_anon("/v1/system-check").await;
            assert_eq!(status, 503, "{report}");
            assert_eq!(report["database"]["success"], false, "{report}");
            answers.push(report.to_string());
            let metrics = host.http.get(host.url("/metrics")).send().await.unwrap();
            assert_eq!(metrics.status(), 503);
            answers.push(metrics.text().await.unwrap());
            let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
            for key in ["sy_not_a_key_at_all", bob.as_str()] {
                let answer = call!(host, key, POST "{path}", {"tag": "t"});
                let error = expect_error(&answer, 503, "store_unavailable", None);
                assert!(
                    error["message"]
                        .as_str()
                        .unwrap()
                        .starts_with("the store is unavailable"),
                    "{error}"
                );
                answers.push(answer.1.to_string());
            }
            let port = format!(":{}", relay.port);
            for answer in &answers {
                for needle in [
                    USERINFO_PASSWORD,
                    QUERY_PASSWORD,
                    &database_name,
                    &port,
                    "127.0.0.1",
                ] {
                    assert!(!answer.contains(needle), "{needle} in {answer}");
                }
            }
            // Operators read where and why in the log, without a credential.
            host.wait_for_log(&["the store is unavailable", &database_name])
                .await;
            let log = host.log();
            for secret in [USERINFO_PASSWORD, QUERY_PASSWORD] {
                assert!(!log.contains(secret), "{secret} in the log:\n{log}");
            }
        })
        .await;
}

#[tokio::test]
async fn the_system_check_answers_within_its_timeout_while_the_database_stalls() {
    Engine::Postgres
        .run(async {
            let database = TestDatabase::create().await;
            let (relay, url) = Relay::to(&database).await;
            // Waiting for a connection takes far longer than the check may.
            let host = through(
                &url,
                database,
                &format!("{CONFIG}\nconnect_timeout_ms = 8000\n[health]\nprobe_timeout_ms = 1000"),
            )
            .await;
            let (status, _) = host.get_anon("/v1/system-check").await;
            assert_eq!(status, 200);
            relay.stall();
            let started = Instant::now();
            let (status, report) = host.get_anon("/v1/system-check").await;
            let took = started.elapsed();
            assert_eq!(status, 503, "{report}");
            let error = report["database"]["errors"][0].as_str().unwrap();
            assert!(error.contains("within 1000 ms"), "{report}");
            // The probe's own bound, not the 8 s connection wait.
            assert!(took < Duration::from_secs(4), "answered after {took:?}");
        })
        .await;
}

#[tokio::test]
async fn a_wrong_master_key_or_an_unreachable_database_stops_start_clearly() {
    Engine::Postgres
        .run(async {
            let first = Host::builder()
                .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
                .start()
                .await;
            let other_key = "ff".repeat(32);
            let refused = Host::builder()
                .env("SWITCHYARD_MASTER_KEY", &other_key)
                .same_database(&first)
                .try_start()
                .await
                .err()
                .expect("a host with another master key must not start");
            assert!(refused.contains("master key does not match"), "{refused}");
            let port = crate::receiver::closed_port();
            let url = format!("postgres://app:hunter2-secret@127.0.0.1:{port}/sy");
            let refused = Host::builder()
                .env("SWITCHYARD_STORE_URL", &url)
                .try_start()
                .await
                .err()
                .expect("a host without its database must not start");
            assert!(
                refused.contains("cannot connect to the store, PostgreSQL at 127.0.0.1"),
                "{refused}"
            );
            assert!(!refused.contains("hunter2-secret"), "{refused}");
        })
        .await;
}

#[tokio::test]
async fn a_database_at_a_newer_schema_is_refused() {
    Engine::Postgres
        .run(async {
            use sqlx::Connection;
            let first = Host::builder().start().await;
            let url = first.database.as_ref().unwrap().url.clone();
            let mut db = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::query(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                 VALUES (999, 'from the future', true, '\\x00', 0)",
            )
            .execute(&mut db)
            .await
            .unwrap();
            let refused = Host::builder()
                .same_database(&first)
                .try_start()
                .await
                .err()
                .expect("a newer schema must be refused");
            assert!(
                refused.contains("schema version 999") && refused.contains("newer switchyard"),
                "{refused}"
            );
        })
        .await;
}

#[tokio::test]
async fn a_run_fires_once_however_many_hosts_log_its_metrics() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(3).await;
            let (alice, _) = world(&hosts, &receiver).await;
            let body = json!({"name": "converged", "webhook": {"team": "ml", "name": "ci"},
                "action": "Webhooks", "event": {"type": "RUN_METRIC_THRESHOLD",
                "metric": {"name": "loss", "window": 1, "comparison": "<", "threshold": 0.5}}});
            ok(
                &hosts[0],
                &alice,
                "POST",
                &format!("{PROJECT}/automations"),
                body,
            )
            .await;
            let runs = format!("{PROJECT}/runs");
            let run = ok(&hosts[0], &alice, "POST", &runs, json!({"name": "r"})).await;
            let path = format!("{runs}/{}/metrics", run["id"].as_str().unwrap());
            // Every log crosses the threshold, on every host at once.
            let logs = (0..12).map(|i| {
                let (host, path, alice) = (&hosts[i % 3], path.clone(), alice.clone());
                async move {
                    ok!(host, alice, POST "{path}", {"metrics": {"loss": 0.1}});
                }
            });
            futures_util::future::join_all(logs).await;
            receiver.wait_for(1, 10).await;
            let executions = format!("{PROJECT}/automations/converged/executions");
            let (_, list) = hosts[2].call("GET", &executions, &alice, None).await;
            assert_eq!(
                list["data"].as_array().unwrap().len(),
                1,
                "once per run per 24 h across hosts: {list}"
            );
            assert_eq!(receiver.received().len(), 1);
        })
        .await;
}

/// One Idempotency-Key sent to three hosts at once: one of them carries the
/// request out, the others replay it or say it is still running.
#[tokio::test]
async fn one_idempotency_key_acts_once_across_hosts() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(3).await;
            let (_, bob) = world(&hosts, &receiver).await;
            let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
            let sends = (0..9).map(|i| {
                let (host, path, bob) = (&hosts[i % 3], path.clone(), bob.clone());
                async move {
                    let response = host
                        .http
                        .post(host.url(&path))
                        .bearer_auth(&bob)
                        .header("idempotency-key", "once")
                        .json(&json!({"tag": "t"}))
                        .send()
                        .await
                        .unwrap();
                    response.status().as_u16()
                }
            });
            let statuses = futures_util::future::join_all(sends).await;
            assert!(
                statuses.iter().all(|s| [200, 409].contains(s)),
                "{statuses:?}"
            );
            assert!(statuses.contains(&200), "{statuses:?}");
            finished(&hosts[0], &bob, 1, 10).await;
            let (_, list) = call!(hosts[1], bob, GET "{PROJECT}/automations/tagged/executions");
            assert_eq!(
                list["data"].as_array().unwrap().len(),
                1,
                "one event: {list}"
            );
        })
        .await;
}

/// A webhook paced to 20 a second, sent to from three hosts at once, still
/// gets 20 a second (±10%) at the receiver.
#[tokio::test]
async fn a_pace_holds_across_hosts() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(3).await;
            let (alice, bob) = world(&hosts, &receiver).await;
            let hook = format!("{}/hook", receiver.base);
            let paced = json!({"url": hook, "access_token_secret": "TOKEN",
                "signing_secret": "SIGN", "max_per_second": 20});
            ok(&hosts[0], &alice, "PUT", "/v1/teams/ml/webhooks/ci", paced).await;
            let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
            let sends = hosts.iter().enumerate().map(|(h, host)| {
                let (path, bob) = (path.clone(), bob.clone());
                async move {
                    let tags: Vec<String> = (0..15).map(|i| format!("h{h}-{i}")).collect();
                    ok!(host, bob, POST "{path}", {"tags": tags});
                }
            });
            futures_util::future::join_all(sends).await;
            let mut at: Vec<_> = receiver
                .wait_for(45, 30)
                .await
                .iter()
                .map(|r| r.at)
                .collect();
            at.sort();
            let span = at[44].duration_since(at[0]).as_secs_f64();
            let measured = 44.0 / span;
            eprintln!("three hosts paced at 20/s, measured {measured:.1}/s at the receiver");
            assert!(measured <= 22.0, "{measured:.1}/s");
        })
        .await;
}

/// What migrations 22 and 23 changed, undone: the outbox and history as
/// schema 21 (the build before them) kept them, leases as lease_until_ms,
/// bodies as hex in both tables, attempts inside their execution's row,
/// and the configuration announced by table.
const AS_SCHEMA_21: &str = "\
    ALTER TABLE outbox ADD COLUMN lease_until_ms bigint; \
    UPDATE outbox SET lease_until_ms = CASE WHEN lease_owner IS NOT NULL THEN visible_at END, \
        due_ms = least(due_ms, visible_at); \
    ALTER TABLE outbox DROP COLUMN visible_at; \
    CREATE INDEX outbox_by_due ON outbox (due_ms); \
    UPDATE outbox o SET body_sealed = e.body_sealed FROM executions e WHERE o.body_sealed IS NULL \
        AND e.scope = o.scope AND e.automation = o.automation AND e.id = o.execution_id; \
    ALTER TABLE outbox ALTER COLUMN body_sealed TYPE text USING encode(body_sealed, 'hex'); \
    ALTER TABLE outbox ALTER COLUMN body_sealed SET NOT NULL; \
    ALTER TABLE executions ALTER COLUMN body_sealed TYPE text USING encode(body_sealed, 'hex'); \
    ALTER TABLE executions ADD COLUMN attempts jsonb NOT NULL DEFAULT '[]'; \
    UPDATE executions e SET attempts = coalesce((SELECT jsonb_agg(a.attempt ORDER BY a.seq) \
        FROM attempts a WHERE a.scope = e.scope AND a.automation = e.automation \
        AND a.execution_id = e.id), '[]'); \
    ALTER TABLE executions ALTER COLUMN attempts DROP DEFAULT; \
    DROP TABLE attempts; DROP INDEX executions_by_time; \
    DROP TRIGGER secrets_changed ON secrets; DROP TRIGGER webhooks_changed ON webhooks; \
    DROP TRIGGER automations_changed ON automations; DROP TRIGGER api_keys_changed ON api_keys; \
    DROP TRIGGER members_changed ON members; DROP TRIGGER projects_changed ON projects; \
    DROP FUNCTION switchyard_record_changed(); DROP FUNCTION switchyard_announce(text, jsonb, text[]); \
    CREATE TRIGGER secrets_changed AFTER INSERT OR UPDATE OR DELETE ON secrets \
        FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed(); \
    CREATE TRIGGER webhooks_changed AFTER INSERT OR UPDATE OR DELETE ON webhooks \
        FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed(); \
    CREATE TRIGGER automations_changed AFTER INSERT OR UPDATE OR DELETE ON automations \
        FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed(); \
    CREATE TRIGGER api_keys_changed AFTER INSERT OR UPDATE OR DELETE ON api_keys \
        FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed(); \
    CREATE TRIGGER members_changed AFTER INSERT OR UPDATE OR DELETE ON members \
        FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed(); \
    CREATE TRIGGER projects_changed AFTER INSERT OR UPDATE OR DELETE ON projects \
        FOR EACH STATEMENT EXECUTE FUNCTION switchyard_config_changed(); \
    ALTER TABLE usage DROP COLUMN cached_tokens; \
    DELETE FROM _sqlx_migrations WHERE version > 21;";

#[tokio::test]
async fn a_database_from_before_the_queue_delivers_what_it_held() {
    Engine::Postgres
        .run(async {
            use sqlx::Connection;
            let receiver = Receiver::start().await;
            let mut hosts = hosts(1).await;
            let (_, bob) = world(&hosts, &receiver).await;
            // The outbox holds the dead host's deliveries with live leases
            // and their sealed bodies.
            let events = 4;
            dies_holding(&mut hosts[0], &receiver, &bob, "old", events).await;
            let url = hosts[0].database.as_ref().unwrap().url.clone();
            let mut db = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(AS_SCHEMA_21).execute(&mut db).await.unwrap();
            let hex: String = sqlx::query_scalar("SELECT body_sealed FROM outbox LIMIT 1")
                .fetch_one(&mut db)
                .await
                .unwrap();
            assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{hex}");
            // A host of this build migrates it and, once the dead host's
            // leases run out, sends what it held.
            let next = Host::builder()
                .config(CONFIG)
                .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
                .same_database(&hosts[0])
                .start()
                .await;
            // (The dead host's own attempts died with it, unrecorded.)
            let attempts = finished(&next, &bob, events, 30).await;
            assert!(attempts.iter().all(|a| *a >= 1), "{attempts:?}");
            let acked = acknowledged(&receiver);
            assert_eq!(acked.len(), events, "every event delivered: {acked:?}");
            assert!(acked.values().all(|n| *n == 1), "{acked:?}");
            let bodies: Vec<String> = receiver
                .received()
                .iter()
                .filter(|r| r.answered == 200)
                .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                .collect();
            for i in 0..events {
                let sent = format!(r#"{{"tag": "old{i}"}}"#);
                assert!(bodies.contains(&sent), "{sent} not in {bodies:?}");
            }
            let version: i64 = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
                .fetch_one(&mut db)
                .await
                .unwrap();
            assert!(version >= 23, "migrated forward: {version}");
        })
        .await;
}

/// Each write to what hosts keep is announced as that record's path, the
/// one hosts read it under (`store::changes`), so that every host drops
/// that entry only: a secret as its team's, a webhook, a project's
/// automations, a member, a project.
#[tokio::test]
async fn the_database_announces_each_kept_record_by_its_path() {
    Engine::Postgres
        .run(async {
            let receiver = Receiver::start().await;
            let hosts = hosts(1).await;
            let (alice, _) = world(&hosts, &receiver).await;
            let url = hosts[0].database.as_ref().unwrap().url.clone();
            let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
            listener.listen("switchyard_config").await.unwrap();
            let put_secret = json!({"value": "another"});
            ok(
                &hosts[0],
                &alice,
                "PUT",
                "/v1/teams/ml/secrets/SIGN",
                put_secret,
            )
            .await;
            let hook = json!({"url": format!("{}/hook", receiver.base), "signing_secret": "SIGN"});
            ok(&hosts[0], &alice, "PUT", "/v1/teams/ml/webhooks/ci", hook).await;
            let automation = json!({"name": "again", "event": {"type": "ADD_ARTIFACT_TAG"},
                "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
            let automations = format!("{PROJECT}/automations");
            ok(&hosts[0], &alice, "POST", &automations, automation).await;
            let (status, body) = hosts[0]
                .call("DELETE", "/v1/teams/ml/members/bob", &alice, None)
                .await;
            assert_eq!(status, 204, "{body}");
            let mut heard: Vec<String> = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(5);
            let bob = |heard: &[String]| heard.iter().any(|p| p.starts_with("members/team/ml/"));
            while !bob(&heard) && Instant::now() < deadline {
                let next = tokio::time::timeout(Duration::from_secs(1), listener.recv()).await;
                if let Ok(Ok(n)) = next {
                    heard.push(n.payload().to_string());
                }
            }
            let project = PROJECT
                .trim_start_matches("/v1/teams/")
                .replace("/projects/", "/");
            for path in [
                "secrets/ml".to_string(),
                "webhooks/ml/ci".to_string(),
                format!("automations/p/{project}"),
            ] {
                assert!(heard.contains(&path), "{path} not announced: {heard:?}");
            }
            assert!(bob(&heard), "the member removed: {heard:?}");
            assert!(
                heard.iter().all(|p| p.contains('/')),
                "every announcement names its record: {heard:?}"
            );
        })
        .await;
}
