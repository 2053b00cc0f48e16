//! Protecting receivers: signing keys that rotate without a failed
//! verification, and Standard Webhooks' asymmetric (Ed25519) signatures,
//! verified as receivers verify them.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::delivery::CONFIG;
use crate::harness::{Host, expect_invalid, python_venv};
use crate::receiver::{Received, Receiver, expected_signature};
use crate::world::{PROJECT, World};

/// Two Standard Webhooks secrets (the library reads `whsec_` as base64).
const OLD: &str = "whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LW9sZC1zZWNyZXQ=";
const NEW: &str = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldy1zZWNyZXQ=";

/// Which of `secrets` and `public_keys` the request verifies with, as the
/// `standardwebhooks` library and `cryptography` say.
fn verifies(request: &Received, secrets: &[&str], public_keys: &[&str]) -> Value {
    let python = python_venv(
        "receivers-venv",
        &["standardwebhooks==1.1.0", "cryptography==50.*"],
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/verify_signatures.py");
    let input = json!({"body": String::from_utf8(request.body.clone()).unwrap(),
        "headers": request.headers, "secrets": secrets, "public_keys": public_keys});
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "verify_signatures.py failed: {stderr}"
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// A tag event that the project's automation sends to webhook `ci`, and the
/// request the receiver got for it.
async fn deliver(host: &Host, key: &str, receiver: &Receiver, tag: &str) -> Received {
    let before = receiver.received().len();
    let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
    ok!(host, key, POST "{path}", {"tag": tag});
    receiver
        .wait_for(before + 1, 10)
        .await
        .into_iter()
        .nth(before)
        .unwrap()
}

on_each_store!(a_rotation_signs_with_both_keys_until_its_overlap_ends);
async fn a_rotation_signs_with_both_keys_until_its_overlap_ends() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let hook = format!("{}/hook", receiver.base);
    let World { alice, bob, .. } = World::build(&host, Some(&hook)).await;
    let team = "/v1/teams/ml";
    for (name, value) in [("OLD", OLD), ("NEW", NEW)] {
        ok!(host, alice, PUT "{team}/secrets/{name}", {"value": value});
    }
    let mut public = Vec::new();
    for name in ["KEY1", "KEY2"] {
        let (status, made) =
            call!(host, alice, PUT "{team}/secrets/{name}", {"generate": "ed25519"});
        assert_eq!(status, 201, "{made}");
        assert!(made.get("value").is_none(), "never the key itself: {made}");
        public.push(made["public_key"].as_str().unwrap().to_string());
    }
    let webhook = format!("{team}/webhooks/ci");
    let settings = json!({"url": hook, "access_token_secret": "TOKEN",
        "signing_secret": "OLD", "signing_key_secret": "KEY1", "standard_webhooks": true});
    ok!(host, alice, PUT "{webhook}", settings);
    let keys = ok!(host, bob, GET "{webhook}/public-key");
    assert_eq!(
        keys,
        json!({"public_key": public[0], "previous_public_key": null,
        "previous_until": null})
    );
    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    ok!(host, alice, POST "{PROJECT}/automations", automation);
    ok!(host, bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});

    let rotated = ok!(host, alice, POST "{webhook}/rotate",
        {"signing_secret": "NEW", "signing_key_secret": "KEY2", "overlap_s": 3600});
    assert_eq!(
        (
            &rotated["previous_signing_secret"],
            &rotated["previous_signing_key_secret"]
        ),
        (&json!("OLD"), &json!("KEY1"))
    );
    let until = rotated["previous_until"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(until.abs_diff(now + 3600) < 60, "{rotated}");
    let keys = ok!(host, bob, GET "{webhook}/public-key");
    assert_eq!(
        keys,
        json!({"public_key": public[1], "previous_public_key": public[0],
        "previous_until": until})
    );

    // During the overlap every key verifies: a receiver on either passes.
    let both = deliver(&host, &bob, &receiver, "overlap").await;
    let keys = [public[0].as_str(), public[1].as_str()];
    assert_eq!(
        verifies(&both, &[OLD, NEW], &keys),
        json!({"secrets": [true, true], "public_keys": [true, true]})
    );
    assert_eq!(
        both.header("x-service-signature").unwrap(),
        expected_signature(NEW, &both.body)
    );
    assert_eq!(
        both.header("x-service-signature-previous").unwrap(),
        expected_signature(OLD, &both.body)
    );

    // The overlap ended: only the new secrets sign.
    let settings = json!({"url": hook, "access_token_secret": "TOKEN",
        "signing_secret": "NEW", "signing_key_secret": "KEY2", "standard_webhooks": true});
    ok!(host, alice, PUT "{webhook}", settings);
    let after = deliver(&host, &bob, &receiver, "after").await;
    assert_eq!(
        verifies(&after, &[OLD, NEW], &keys),
        json!({"secrets": [false, true], "public_keys": [false, true]})
    );
    assert!(after.header("x-service-signature-previous").is_none());
}

on_each_store!(signing_keys_and_rotations_are_checked);
async fn signing_keys_and_rotations_are_checked() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let hook = format!("{}/hook", receiver.base);
    let World { alice, bob, .. } = World::build(&host, Some(&hook)).await;
    let (team, webhook) = ("/v1/teams/ml", "/v1/teams/ml/webhooks/ci");
    let (status, none) = call!(host, bob, GET "{webhook}/public-key");
    assert_eq!(status, 409, "{none}");
    let message = none["error"]["message"].as_str().unwrap();
    assert!(message.contains("generate"), "says how: {message}");

    let refused = call!(host, alice, PUT "{team}/secrets/RSA", {"generate": "rsa"});
    expect_invalid(&refused, "generate");
    let refused =
        call!(host, alice, PUT "{team}/secrets/BOTH", {"value": "x", "generate": "ed25519"});
    expect_invalid(&refused, "value");
    let not_a_key = call!(host, alice, PUT "{webhook}",
        {"url": hook, "signing_key_secret": "SPARE"});
    expect_invalid(&not_a_key, "signing_key_secret");
    let endless = call!(host, alice, PUT "{webhook}",
        {"url": hook, "signing_secret": "SIGN", "previous_signing_secret": "SPARE"});
    expect_invalid(&endless, "previous_until");
    for (body, param) in [
        (json!({}), "signing_secret"),
        (
            json!({"signing_secret": "SPARE", "overlap_s": 0}),
            "overlap_s",
        ),
        (
            json!({"signing_secret": "SPARE", "overlap_s": 31 * 86400}),
            "overlap_s",
        ),
        (json!({"signing_secret": "MISSING"}), "signing_secret"),
    ] {
        let refused = call!(host, alice, POST "{webhook}/rotate", body);
        expect_invalid(&refused, param);
    }
    let (status, _) = call!(host, bob, POST "{webhook}/rotate", {"signing_secret": "SPARE"});
    assert_eq!(status, 403, "members cannot rotate");

    ok!(host, alice, PUT "{team}/secrets/KEY", {"generate": "ed25519"});
    ok!(host, alice, PUT "{webhook}", {"url": hook, "signing_key_secret": "KEY"});
    let (status, used) = call!(host, alice, DELETE "{team}/secrets/KEY");
    assert_eq!(status, 409, "a webhook signs with it: {used}");
    let (_, shown) = call!(host, bob, GET "{webhook}");
    assert!(
        !shown.to_string().contains("whsk_"),
        "never the key: {shown}"
    );
}

/// A `method` request as the holder of `key`, with `Idempotency-Key: idem`:
/// the status, whether it was a replay, and the body.
async fn keyed(
    host: &Host,
    key: &str,
    idem: &str,
    (method, path): (&str, &str),
    body: Value,
) -> (u16, bool, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = host
        .http
        .request(method, host.url(path))
        .bearer_auth(key)
        .header("idempotency-key", idem)
        .json(&body)
        .send()
        .await
        .unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let (status, body) = crate::harness::into_parts(response).await;
    (status, replayed, body)
}

on_each_store!(a_replayed_idempotent_request_causes_one_delivery);
async fn a_replayed_idempotent_request_causes_one_delivery() {
    let receiver = Receiver::start().await;
    let mut host = Host::with_config(CONFIG).await;
    let hook = format!("{}/hook", receiver.base);
    let World { alice, bob, .. } = World::build(&host, Some(&hook)).await;
    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"tag": "${tag}", "by": "${event_author}"}"#});
    ok!(host, alice, POST "{PROJECT}/automations", automation);
    ok!(host, bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});
    let tags = format!("{PROJECT}/collections/detector/versions/v0/tags");
    let post = ("POST", tags.as_str());

    let first = keyed(&host, &bob, "k-1", post, json!({"tag": "x"})).await;
    assert_eq!((first.0, first.1), (200, false), "{}", first.2);
    let again = keyed(&host, &bob, "k-1", post, json!({"tag": "x"})).await;
    assert_eq!(
        again,
        (200, true, first.2.clone()),
        "the first answer, replayed"
    );
    // Across a restart: the key is in the store.
    assert_eq!(host.terminate().await.code(), Some(0));
    let host = Host::builder()
        .config(CONFIG)
        .same_store(&host)
        .start()
        .await;
    let after = keyed(&host, &bob, "k-1", post, json!({"tag": "x"})).await;
    assert_eq!(after, (200, true, first.2.clone()));

    let (status, _, reused) = keyed(&host, &bob, "k-1", post, json!({"tag": "y"})).await;
    assert_eq!(status, 422, "{reused}");
    assert_eq!(reused["error"]["param"], "Idempotency-Key", "{reused}");
    assert_eq!(
        reused["error"]["code"], "idempotency_key_reused",
        "{reused}"
    );
    let (status, _, bad) = keyed(&host, &bob, &"k".repeat(256), post, json!({"tag": "y"})).await;
    assert_eq!(
        (status, &bad["error"]["param"]),
        (400, &json!("Idempotency-Key")),
        "{bad}"
    );
    // The whole path counts: the same body to another collection of routes
    // is another request; a method the route lacks is a 405, key or not.
    let runs = format!("{PROJECT}/runs");
    let made = keyed(&host, &bob, "same", ("POST", &runs), json!({"name": "d"})).await;
    assert_eq!(made.0, 201, "{}", made.2);
    let collections = format!("{PROJECT}/collections");
    let other = keyed(
        &host,
        &bob,
        "same",
        ("POST", &collections),
        json!({"name": "d"}),
    )
    .await;
    assert_eq!(other.0, 422, "{}", other.2);
    let wrong = keyed(&host, &bob, "k-1", ("PATCH", &tags), json!({"tag": "x"})).await;
    assert_eq!(wrong.0, 405, "{}", wrong.2);
    // Keys are the caller's own: alice's k-1 is another request.
    let theirs = keyed(&host, &alice, "k-1", post, json!({"tag": "z"})).await;
    assert_eq!((theirs.0, theirs.1), (200, false), "{}", theirs.2);

    // A run ended twice under one key answers as it did the first time.
    let run = ok!(host, bob, POST "{PROJECT}/runs", {"name": "train"});
    let path = format!("{PROJECT}/runs/{}", run["id"].as_str().unwrap());
    let ended = keyed(
        &host,
        &bob,
        "end-1",
        ("PATCH", &path),
        json!({"state": "finished"}),
    )
    .await;
    let replay = keyed(
        &host,
        &bob,
        "end-1",
        ("PATCH", &path),
        json!({"state": "finished"}),
    )
    .await;
    assert_eq!((ended.0, replay), (200, (200, true, ended.2.clone())));

    // One delivery per event, told apart by delivery id as receivers do:
    // one in flight at the restart may come again, with the same id.
    receiver.wait_for(2, 10).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let deliveries: std::collections::BTreeMap<String, String> = receiver
        .received()
        .iter()
        .map(|r| {
            let id = r.header("x-service-delivery").unwrap().to_string();
            (id, r.json().to_string())
        })
        .collect();
    let mut bodies: Vec<String> = deliveries.into_values().collect();
    bodies.sort();
    assert_eq!(
        bodies,
        [
            json!({"tag": "z", "by": "alice"}).to_string(),
            json!({"tag": "x", "by": "bob"}).to_string(),
        ],
        "a replay causes no delivery"
    );
}

/// Deliveries retried every 100 ms, 40 times: without a breaker, a receiver
/// that is down gets every one of them.
const OUTAGE: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n\
    [delivery]\nretry_schedule_ms = [0, 100, 100, 100, 100, 100, 100, 100, 100, 100, \
    100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, \
    100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100]\n\
    jitter = 0.0\npoll_interval_ms = 50";

/// Webhook `ci` with `extra` settings, and an automation sending each tag
/// in the project to it.
async fn tags_to_ci(host: &Host, alice: &str, bob: &str, hook: &str, extra: Value) {
    let mut settings =
        json!({"url": hook, "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    settings
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    ok!(host, alice, PUT "/v1/teams/ml/webhooks/ci", settings);
    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"tag": "${tag}"}"#});
    ok!(host, alice, POST "{PROJECT}/automations", automation);
    ok!(host, bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});
}

/// The webhook's circuit state, as the API shows it.
async fn circuit(host: &Host, key: &str) -> Value {
    ok!(host, key, GET "/v1/teams/ml/webhooks/ci")["circuit"].clone()
}

on_each_store!(a_receiver_that_is_down_gets_one_probe_per_cooloff_then_everything_once);
async fn a_receiver_that_is_down_gets_one_probe_per_cooloff_then_everything_once() {
    let (host, bob, got, timeline) = outage(true).await;
    let failed: Vec<_> = got
        .iter()
        .filter(|r| r.answered == 503)
        .map(|r| r.at)
        .collect();
    // The first attempts may all fail at once; after them, probes alone,
    // each at least a cool-off after the last.
    let probes = &failed[4.min(failed.len())..];
    for pair in probes.windows(2) {
        let gap = pair[1].duration_since(pair[0]).as_millis();
        assert!(gap >= 450, "two probes {gap} ms apart:\n{timeline}");
    }
    assert!(failed.len() <= 4 + 4, "{timeline}");
    // Held deliveries spent no attempts: the history counts exactly the
    // requests the receiver got, once the last of them are recorded (the
    // receiver answers before the host writes the attempt down).
    let mut list = Value::Null;
    for _ in 0..100 {
        list = call!(host, bob, GET "{PROJECT}/automations/tags/executions").1;
        let data = list["data"].as_array().unwrap();
        if data.iter().all(|e| e["status"] == "Finished") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let attempts: usize = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["attempts"].as_array().unwrap().len())
        .sum();
    assert_eq!(attempts, got.len(), "{list}");
    assert_eq!(circuit(&host, &bob).await, json!({"state": "closed"}));
    let text = crate::metrics::scrape(&host).await;
    let opened = crate::metrics::sample(
        &text,
        "switchyard_circuit_transitions_total",
        &[("to", "open")],
    );
    assert!(opened.unwrap_or(0.0) >= 1.0, "{text}");
}

on_each_store!(without_its_breaker_a_receiver_that_is_down_gets_every_retry);
async fn without_its_breaker_a_receiver_that_is_down_gets_every_retry() {
    let (_host, _bob, got, timeline) = outage(false).await;
    let failed = got.iter().filter(|r| r.answered == 503).count();
    assert!(failed > 40, "every retry went: {timeline}");
}

/// Four deliveries to a receiver that answers 503 for 2.6 s, then 200,
/// with webhook `ci`'s breaker `enabled` or not: the host, bob's key, what
/// the receiver got (each delivery once with 200), and its timeline.
async fn outage(enabled: bool) -> (Host, String, Vec<Received>, String) {
    let receiver = Receiver::start().await;
    let host = Host::with_config(OUTAGE).await;
    let hook = format!("{}/hook", receiver.base);
    let World { alice, bob, .. } = World::build(&host, Some(&hook)).await;
    let breaker =
        json!({"enabled": enabled, "failures": 3, "cooloff_ms": 500, "max_cooloff_ms": 1000});
    tags_to_ci(
        &host,
        &alice,
        &bob,
        &hook,
        json!({"circuit_breaker": breaker}),
    )
    .await;
    assert_eq!(circuit(&host, &bob).await, json!({"state": "closed"}));

    receiver.answer(503);
    let started = std::time::Instant::now();
    let tags = json!({"tags": ["a", "b", "c", "d"]});
    ok!(host, bob, POST "{PROJECT}/collections/detector/versions/v0/tags", tags);
    if enabled {
        let mut state = Value::Null;
        for _ in 0..100 {
            state = circuit(&host, &bob).await;
            if state["state"] == "open" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(state["state"], "open", "{state}");
        assert!(
            state["reason"].as_str().unwrap().contains("consecutive"),
            "{state}"
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(2600).saturating_sub(started.elapsed()))
        .await;
    receiver.answer(200);
    let mut delivered = 0;
    for _ in 0..300 {
        delivered = receiver
            .received()
            .iter()
            .filter(|r| r.answered == 200)
            .count();
        if delivered >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let got = receiver.received();
    let timeline: Vec<String> = got
        .iter()
        .map(|r| {
            let at = r.at.duration_since(started).as_millis();
            format!("{at:>5} ms {} {}", r.answered, r.json()["tag"])
        })
        .collect();
    let timeline = timeline.join("\n");
    eprintln!("receiver timeline, breaker enabled: {enabled}:\n{timeline}");
    assert_eq!(delivered, 4, "everything went once the receiver was back");
    let mut once: Vec<String> = got
        .iter()
        .filter(|r| r.answered == 200)
        .map(|r| r.json()["tag"].to_string())
        .collect();
    once.sort();
    assert_eq!(once, ["\"a\"", "\"b\"", "\"c\"", "\"d\""], "{timeline}");
    (host, bob, got, timeline)
}

/// The times requests reached `receiver`, sorted; waits for `n`.
async fn arrivals(receiver: &Receiver, n: usize) -> Vec<std::time::Instant> {
    let mut at: Vec<_> = receiver
        .wait_for(n, 30)
        .await
        .iter()
        .map(|r| r.at)
        .collect();
    at.sort();
    at
}

/// Deliveries a second between the first and the last of `at`.
fn rate(at: &[std::time::Instant]) -> f64 {
    let span = at[at.len() - 1].duration_since(at[0]).as_secs_f64();
    (at.len() - 1) as f64 / span
}

on_each_store!(a_paced_webhook_gets_no_more_than_its_rate);
async fn a_paced_webhook_gets_no_more_than_its_rate() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let hook = format!("{}/hook", receiver.base);
    let World { alice, bob, .. } = World::build(&host, Some(&hook)).await;
    let refused =
        call!(host, alice, PUT "/v1/teams/ml/webhooks/ci", {"url": hook, "max_per_second": 0});
    expect_invalid(&refused, "max_per_second");
    tags_to_ci(&host, &alice, &bob, &hook, json!({"max_per_second": 20})).await;
    let tags: Vec<String> = (0..30).map(|i| format!("t{i}")).collect();
    ok!(host, bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tags": tags});
    let at = arrivals(&receiver, 30).await;
    let measured = rate(&at);
    eprintln!("paced at 20/s, measured {measured:.1}/s at the receiver");
    assert!(measured <= 22.0, "{measured:.1}/s");
}

/// Three attempts 50 ms apart: deliveries run out quickly.
pub(crate) const SHORT: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n\
    [delivery]\nretry_schedule_ms = [0, 50, 50]\njitter = 0.0\npoll_interval_ms = 50";

/// Webhook `alerts` calling `receiver`, and team automation `name` on each
/// of `events` sending to it with `template_plugin` and `payload`.
async fn team_alerts(
    host: &Host,
    alice: &str,
    receiver: &Receiver,
    events: &[&str],
    payload: &str,
    plugin: &str,
) {
    let hook = json!({"name": "alerts", "url": format!("{}/hook", receiver.base)});
    ok!(host, alice, POST "/v1/teams/ml/webhooks", hook);
    for event in events {
        let automation = json!({"name": event.to_lowercase().replace('_', "-"),
            "event": {"type": event}, "webhook": {"team": "ml", "name": "alerts"},
            "action": "Webhooks", "template_plugin": plugin, "payload": payload});
        let (status, saved) = call!(host, alice, POST "/v1/teams/ml/automations", automation);
        assert_eq!(status, 201, "{saved}");
    }
}

on_each_store!(an_exhausted_delivery_fires_the_teams_slack_automation_once);
async fn an_exhausted_delivery_fires_the_teams_slack_automation_once() {
    let (down, slack) = (Receiver::start().await, Receiver::start().await);
    down.answer(503);
    let host = Host::with_config(SHORT).await;
    let hook = format!("{}/hook", down.base);
    let World { alice, bob, .. } = World::build(&host, Some(&hook)).await;
    team_alerts(
        &host,
        &alice,
        &slack,
        &["DELIVERY_EXHAUSTED"],
        "Delivery failed",
        "slack",
    )
    .await;
    // Operational events live on teams, and only there; members read them.
    let on_project = json!({"name": "x", "event": {"type": "DELIVERY_EXHAUSTED"},
        "webhook": {"team": "ml", "name": "alerts"}, "action": "Webhooks"});
    let refused = call!(host, alice, POST "{PROJECT}/automations", on_project);
    expect_invalid(&refused, "event.type");
    let on_team = json!({"name": "x", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "alerts"}, "action": "Webhooks"});
    let refused = call!(host, alice, POST "/v1/teams/ml/automations", on_team);
    expect_invalid(&refused, "event.type");
    let (status, _) = call!(host, bob, POST "/v1/teams/ml/automations",
        {"name": "y", "event": {"type": "WEBHOOK_RECOVERED"},
         "webhook": {"team": "ml", "name": "alerts"}, "action": "Webhooks"});
    assert_eq!(status, 403, "team admins make team automations");
    let listed = ok!(host, bob, GET "/v1/teams/ml/automations");
    assert_eq!(
        listed["data"][0]["scope"],
        json!({"type": "team", "team": "ml"})
    );

    tags_to_ci(&host, &alice, &bob, &hook, json!({})).await;
    ok!(host, bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tag": "x"});
    let got = slack.wait_for(1, 10).await;
    let message = got[0].json();
    assert_eq!(
        message["text"], "Delivery failed: webhook ci: the endpoint answered 503 (3 attempts)",
        "{message}"
    );
    assert_eq!(down.received().len(), 3, "three attempts, then the alert");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        slack.received().len(),
        1,
        "one alert for one exhausted delivery"
    );
    let history = ok!(host, bob, GET "/v1/teams/ml/automations/delivery-exhausted/executions");
    assert_eq!(
        history["data"][0]["event"]["webhook"]["name"], "ci",
        "{history}"
    );
}

on_each_store!(each_operational_event_fires_and_an_alert_that_fails_alerts_nobody);
async fn each_operational_event_fires_and_an_alert_that_fails_alerts_nobody() {
    let (ci, alerts) = (Receiver::start().await, Receiver::start().await);
    ci.answer(503);
    let host = Host::with_config(SHORT).await;
    let hook = format!("{}/hook", ci.base);
    let World { alice, bob, .. } = World::build(&host, Some(&hook)).await;
    let events = [
        "WEBHOOK_CIRCUIT_OPENED",
        "DELIVERY_EXHAUSTED",
        "WEBHOOK_RECOVERED",
        "WEBHOOK_DISABLED",
    ];
    let payload = r#"{"event": "${event_type}", "webhook": "${webhook_name}", "url": "${webhook_url}", "attempts": "${attempts}"}"#;
    team_alerts(&host, &alice, &alerts, &events, payload, "template-default").await;
    let breaker = json!({"failures": 2, "cooloff_ms": 300, "max_cooloff_ms": 300});
    tags_to_ci(
        &host,
        &alice,
        &bob,
        &hook,
        json!({"circuit_breaker": breaker}),
    )
    .await;
    let tag = async |tag: &str| {
        ok!(host, bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tag": tag});
    };
    // Two failures open the circuit; the third attempt is its probe, fails,
    // and the delivery is exhausted.
    tag("down").await;
    let alerted = alerts.wait_for(2, 10).await;
    // Back up: the next delivery waits for the probe, which closes it.
    ci.answer(200);
    tag("up").await;
    alerts.wait_for(3, 10).await;
    // Gone: the webhook is switched off.
    ci.answer(410);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    tag("gone").await;
    let alerted = [alerted, alerts.wait_for(4, 10).await].concat();
    let mut kinds: Vec<String> = alerts
        .received()
        .iter()
        .map(|r| r.json()["event"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "DELIVERY_EXHAUSTED",
            "WEBHOOK_CIRCUIT_OPENED",
            "WEBHOOK_DISABLED",
            "WEBHOOK_RECOVERED"
        ],
        "{alerted:?}"
    );
    let first = alerts.received()[0].json();
    assert_eq!(
        (&first["webhook"], &first["url"]),
        (&json!("ci"), &json!(hook)),
        "{first}"
    );

    // The alerts webhook itself goes down: its failed alerts alert nobody.
    alerts.answer(503);
    let before = alerts.received().len();
    ok!(host, alice, PUT "/v1/teams/ml/webhooks/ci", {"url": hook, "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    ci.answer(503);
    tag("again").await;
    // ci's delivery is exhausted (one alert, three attempts at the alerts
    // webhook, all failing); those failures cause nothing more.
    alerts.wait_for(before + 3, 10).await;
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(
        alerts.received().len(),
        before + 3,
        "no alert about the alerts webhook"
    );
    let history = ok!(host, bob, GET "/v1/teams/ml/automations/delivery-exhausted/executions");
    assert_eq!(history["data"].as_array().unwrap().len(), 2, "{history}");
}
