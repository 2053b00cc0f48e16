//! Input an attacker or a careless client sends: NUL characters anywhere a
//! string reaches the store, and payloads that reference secrets by the
//! thousand. Each is a clear 400 or a cheap answer, never a 500 or minutes
//! of database work, on both engines.

use serde_json::{Value, json};

use crate::harness::{Engine, Host, expect_error, expect_invalid};
use crate::receiver::Receiver;
use crate::world::{PROJECT, REGISTRY, World};

const LOOPBACK: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]";

/// A world with webhook `ci`, a run and a version to act on.
async fn world(host: &Host, receiver: &Receiver) -> (World, String) {
    let world = World::build(host, Some(&format!("{}/hook", receiver.base))).await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, world.alice, POST "{versions}", {"metadata": {}});
    let run = ok!(host, world.alice, POST "{PROJECT}/runs", {"name": "r1"});
    (world, run["id"].as_str().unwrap().to_string())
}

on_each_store!(a_nul_anywhere_is_a_400_naming_its_field_and_nothing_is_stored);
async fn a_nul_anywhere_is_a_400_naming_its_field_and_nothing_is_stored() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(LOOPBACK).await;
    let (world, run) = world(&host, &receiver).await;
    let version = format!("{PROJECT}/collections/detector/versions/v0");
    let automation = |name: &str, payload: &str| {
        json!({"name": name, "event": {"type": "ADD_ARTIFACT_TAG"},
               "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
               "payload": payload})
    };
    let nul = "a\u{0}b";
    // (method, path, body, the field the 400 names): every string field of
    // every write, at any depth.
    let table: Vec<(&str, String, Value, &str)> = vec![
        ("POST", "/v1/teams".into(), json!({"name": nul}), "name"),
        (
            "PUT",
            "/v1/teams/ml/secrets/NEW".into(),
            json!({"value": nul}),
            "value",
        ),
        (
            "POST",
            "/v1/teams/ml/webhooks".into(),
            json!({"name": nul, "url": receiver.base}),
            "name",
        ),
        (
            "POST",
            "/v1/teams/ml/webhooks".into(),
            json!({"name": "h2", "url": format!("{}/{nul}", receiver.base)}),
            "url",
        ),
        (
            "PUT",
            "/v1/teams/ml/webhooks/ci".into(),
            json!({"url": receiver.base, "signing_secret": nul}),
            "signing_secret",
        ),
        (
            "POST",
            "/v1/teams/ml/webhooks/ci/test".into(),
            json!({"payload": {"text": nul}}),
            "payload.text",
        ),
        (
            "POST",
            "/v1/teams/ml/projects".into(),
            json!({"name": "p2", "description": nul}),
            "description",
        ),
        (
            "POST",
            "/v1/registries".into(),
            json!({"name": nul}),
            "name",
        ),
        (
            "POST",
            format!("{PROJECT}/collections"),
            json!({"name": "c2", "description": nul}),
            "description",
        ),
        (
            "POST",
            format!("{PROJECT}/collections/detector/versions"),
            json!({"metadata": {"k": nul}}),
            "metadata.k",
        ),
        (
            "POST",
            format!("{PROJECT}/collections/detector/versions"),
            json!({"metadata": {"outer": [{"inner": nul}]}}),
            "metadata.outer[0].inner",
        ),
        (
            "POST",
            format!("{PROJECT}/collections/detector/versions"),
            json!({"metadata": {nul: 1}}),
            "metadata.a\\u0000b",
        ),
        (
            "POST",
            format!("{version}/aliases"),
            json!({"alias": nul}),
            "alias",
        ),
        (
            "POST",
            format!("{version}/aliases"),
            json!({"aliases": ["ok", nul]}),
            "aliases[1]",
        ),
        (
            "POST",
            format!("{version}/tags"),
            json!({"tag": nul}),
            "tag",
        ),
        (
            "POST",
            format!("{REGISTRY}/collections/detector/links"),
            json!({"team": "ml", "project": "vision", "collection": "detector", "version": nul}),
            "version",
        ),
        (
            "POST",
            format!("{PROJECT}/runs"),
            json!({"name": nul}),
            "name",
        ),
        (
            "POST",
            format!("{PROJECT}/runs/{run}/metrics"),
            json!({"metrics": {nul: 1.0}}),
            "metrics.a\\u0000b",
        ),
        (
            "POST",
            format!("{PROJECT}/automations"),
            automation("a1", &format!("{{\"x\": \"{nul}\"}}")),
            "payload",
        ),
        (
            "POST",
            format!("{PROJECT}/automations"),
            automation(nul, "{}"),
            "name",
        ),
        (
            "POST",
            "/v1/me/api-keys".into(),
            json!({"name": nul}),
            "name",
        ),
        (
            "POST",
            "/v1/admin/users".into(),
            json!({"name": nul}),
            "name",
        ),
    ];
    let key_for = |path: &str| {
        if path.starts_with("/v1/admin") {
            crate::harness::OPERATOR_KEY
        } else {
            world.alice.as_str()
        }
    };
    for (method, path, body, param) in &table {
        let answer = host.call(method, path, key_for(path), Some(body)).await;
        let error = expect_invalid(&answer, param);
        assert!(
            error["message"].as_str().unwrap().contains("NUL"),
            "{method} {path}: {error}"
        );
    }
    // Paths: a name with a NUL in it is a 400, never a 500 from the database.
    for path in [
        "/v1/teams/bad%00x",
        "/v1/teams/ml/projects/bad%00x",
        "/v1/teams/ml/webhooks/bad%00x",
        "/v1/registries/models/collections/bad%00x/versions",
        "/v1/teams/ml/projects/vision/collections/detector/versions?since=1%00",
    ] {
        let answer = call!(host, world.alice, GET "{path}");
        let error = expect_error(&answer, 400, "invalid_request", None);
        assert!(error["message"].as_str().unwrap().contains("NUL"), "{path}");
    }
    let answer = call!(host, world.alice, PUT "/v1/teams/ml/secrets/A%00B", {"value": "v"});
    expect_error(&answer, 400, "invalid_request", None);
    // Nothing of it was stored, and the host carries on serving.
    let listed = |path: &str| {
        let path = path.to_string();
        let key = world.alice.clone();
        let host = &host;
        async move {
            let (status, body) = call!(host, key, GET "{path}");
            assert_eq!(status, 200, "{path}: {body}");
            body["data"].as_array().unwrap().len()
        }
    };
    assert_eq!(listed("/v1/teams").await, 1);
    assert_eq!(listed("/v1/teams/ml/secrets").await, 3);
    assert_eq!(listed("/v1/teams/ml/webhooks").await, 1);
    assert_eq!(listed("/v1/teams/ml/projects").await, 1);
    assert_eq!(listed(&format!("{PROJECT}/collections")).await, 1);
    assert_eq!(
        listed(&format!("{PROJECT}/collections/detector/versions")).await,
        1
    );
    assert_eq!(listed(&format!("{PROJECT}/runs")).await, 1);
    assert_eq!(listed(&format!("{PROJECT}/automations")).await, 0);
    assert!(receiver.received().is_empty(), "a refused test was sent");
    assert!(!host.log().contains("internal error"), "{}", host.log());
}

on_each_store!(a_payload_naming_one_missing_secret_many_times_costs_one_lookup);
async fn a_payload_naming_one_missing_secret_many_times_costs_one_lookup() {
    let receiver = Receiver::start().await;
    // The statement log shows every query the host sends PostgreSQL.
    let host = Host::builder()
        .config(LOOPBACK)
        .env("RUST_LOG", "info,sqlx::query=debug")
        .start()
        .await;
    let (world, _) = world(&host, &receiver).await;
    let lookups = || {
        host.log()
            .lines()
            .filter(|l| l.contains("FROM secrets"))
            .count()
    };
    let before = lookups();
    let text = format!("{{\"x\": \"{}\"}}", "$NOPE ".repeat(16_000));
    let (status, outcome) =
        call!(host, world.alice, POST "/v1/teams/ml/webhooks/ci/test", {"payload": text});
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["success"], true, "{outcome}");
    // Not a team secret: plain text, sent as written.
    let got = receiver.wait_for(1, 10).await;
    assert!(
        got[0].json()["x"]
            .as_str()
            .unwrap()
            .starts_with("$NOPE $NOPE")
    );
    if Engine::current() == Engine::Postgres {
        let during = lookups() - before;
        // The webhook's own two secrets, and one lookup of the rest.
        assert!(
            during <= 3,
            "{during} secret queries for one payload (one per reference before the fix)"
        );
    }

    // More distinct names than a payload may hold: refused before any
    // lookup, at the test and at an automation's save alike.
    let many: String = (0..1_001).map(|i| format!("$N{i} ")).collect();
    let answer = call!(host, world.alice, POST "/v1/teams/ml/webhooks/ci/test", {"payload": format!("{{\"x\": \"{many}\"}}")});
    let error = expect_invalid(&answer, "payload");
    assert!(
        error["message"].as_str().unwrap().contains("at most 1000"),
        "{error}"
    );
    let automation = json!({"name": "many", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": format!("{{\"x\": \"{many}\"}}")});
    let answer = call!(host, world.alice, POST "{PROJECT}/automations", automation);
    expect_invalid(&answer, "payload");
    assert_eq!(receiver.received().len(), 1);
}
