//! Events fire automations and a durable outbox delivers signed webhooks:
//! every event type, filters, retries, history, replay, 410, and kill -9.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Host, expect_error, expect_invalid};
use crate::receiver::{Received, Receiver, expected_signature};
use crate::world::{PROJECT, REGISTRY, SIGN, TOKEN, World, ok};

/// Fast retries so tests see several attempts in well under a second.
pub(crate) const CONFIG: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n\
    [delivery]\nretry_schedule_ms = [0, 150, 150, 150, 150, 150, 150, 150, 150, 150]\n\
    jitter = 0.0\npoll_interval_ms = 50";

/// The world, with webhook `ci` calling `receiver`: (alice, bob).
async fn world(host: &Host, receiver: &Receiver) -> (String, String) {
    let hook = format!("{}/hook", receiver.base);
    let world = World::build(host, Some(&hook)).await;
    (world.alice, world.bob)
}

/// [`CONFIG`] with another retry schedule.
fn retrying(schedule: &str) -> String {
    let fast = "[0, 150, 150, 150, 150, 150, 150, 150, 150, 150]";
    CONFIG.replace(fast, schedule)
}

/// A host started with `config`, the world calling `receiver`, and
/// automation `name` on every ADD_ARTIFACT_TAG in the project:
/// (host, alice, bob).
pub(crate) async fn tagging(
    receiver: &Receiver,
    config: &str,
    name: &str,
) -> (Host, String, String) {
    let host = Host::with_config(config).await;
    let (alice, bob) = tagging_on(&host, receiver, name).await;
    (host, alice, bob)
}

/// [`tagging`] on a host already started: (alice, bob).
pub(crate) async fn tagging_on(host: &Host, receiver: &Receiver, name: &str) -> (String, String) {
    let (alice, bob) = world(host, receiver).await;
    let tags = json!({"type": "ADD_ARTIFACT_TAG"});
    automation(host, &alice, PROJECT, name, tags).await;
    (alice, bob)
}

const TEMPLATE: &str = r#"{"event_type": "${event_type}", "author": "${event_author}",
 "version": "${artifact_version_string}", "collection": "${artifact_collection_name}",
 "alias": "${alias}", "tag": "${tag}", "accuracy": ${artifact_metadata.accuracy},
 "project": "${project_name}", "entity": "${entity_name}", "token": "${ACCESS_TOKEN}",
 "artifact": ${artifact_version}}"#;

async fn automation(host: &Host, key: &str, scope: &str, name: &str, event: Value) {
    let body = json!({"name": name, "event": event, "webhook": {"team": "ml", "name": "ci"},
        "action": "Webhooks", "payload": TEMPLATE});
    let (status, response) = call!(host, key, POST "{scope}/automations", body);
    assert_eq!(status, 201, "{response}");
}

/// Checks what every delivery must carry, and returns the body.
pub(crate) fn verified(request: &Received) -> Value {
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(
        request.header("x-service-signature").unwrap(),
        expected_signature(SIGN, &request.body),
        "signature"
    );
    assert!(
        request
            .header("x-service-delivery")
            .unwrap()
            .starts_with("dlv_")
    );
    request.json()
}

on_each_store!(every_artifact_event_fires_with_its_payload_and_signature);
async fn every_artifact_event_fires_with_its_payload_and_signature() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, bob) = world(&host, &receiver).await;
    automation(
        &host,
        &alice,
        PROJECT,
        "prod-alias",
        json!({"type": "ADD_ARTIFACT_ALIAS", "alias_regex": "^prod$"}),
    )
    .await;
    automation(
        &host,
        &alice,
        PROJECT,
        "prod-moved",
        json!({"type": "UPDATE_ARTIFACT_ALIAS", "alias_regex": "^prod$"}),
    )
    .await;
    automation(
        &host,
        &alice,
        PROJECT,
        "release-tag",
        json!({"type": "ADD_ARTIFACT_TAG", "tag_regex": "^release-"}),
    )
    .await;
    automation(
        &host,
        &alice,
        REGISTRY,
        "linked",
        json!({"type": "LINK_ARTIFACT"}),
    )
    .await;

    let versions = format!("{PROJECT}/collections/detector/versions");
    let v0 =
        ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 0.91, "nested": {"a": 1}}});
    assert_eq!(v0["version"], "v0");
    ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 0.95}});
    ok!(host, bob, POST "{versions}/v0/aliases", {"alias": "staging"});
    ok!(host, bob, POST "{versions}/v0/aliases", {"alias": "prod"});
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "wip"});
    ok!(host, bob, POST "{versions}/v1/tags", {"tag": "release-2"});
    // The alias moves: v1 takes "prod" from v0, which fires
    // UPDATE_ARTIFACT_ALIAS, not ADD_ARTIFACT_ALIAS again.
    let v1 = ok!(host, bob, POST "{versions}/v1/aliases", {"alias": "prod"});
    assert_eq!(
        v1,
        json!({"collection": "detector", "version": "v1", "aliases": ["prod"],
               "moved_from": {"prod": "v0"}})
    );
    let (_, v0) = call!(host, bob, GET "{versions}/v0");
    assert_eq!(
        (&v0["aliases"], &v0["tags"]),
        (&json!(["staging"]), &json!(["wip"]))
    );
    let (_, v1) = call!(host, bob, GET "{versions}/v1");
    assert_eq!(
        (&v1["aliases"], &v1["tags"]),
        (&json!(["prod"]), &json!(["release-2"]))
    );

    // A registry collection created after the automation is covered.
    ok!(host, alice, POST "{REGISTRY}/collections", {"name": "detectors"});
    let linked = ok!(host, bob, POST "{REGISTRY}/collections/detectors/links", {"team": "ml", "project": "vision", "collection": "detector", "version": "v1"});
    assert_eq!(linked["version"], "v0");

    let got = receiver.wait_for(4, 10).await;
    assert_eq!(got.len(), 4, "{got:?}");
    let bodies: Vec<Value> = got.iter().map(verified).collect();
    let ids: HashSet<&str> = got
        .iter()
        .map(|r| r.header("x-service-delivery").unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "each delivery has its own id");
    let find = |event_type: &str, n: usize| {
        bodies
            .iter()
            .filter(|b| b["event_type"] == event_type)
            .nth(n)
            .cloned()
            .unwrap_or_else(|| panic!("no {event_type} #{n} in {bodies:?}"))
    };
    let alias = find("ADD_ARTIFACT_ALIAS", 0);
    assert_eq!(alias["alias"], "prod");
    assert_eq!(alias["tag"], "");
    assert_eq!(alias["version"], "ml/vision/detector:v0");
    assert_eq!(alias["author"], "bob");
    assert_eq!(alias["accuracy"], 0.91);
    assert_eq!(alias["project"], "vision");
    assert_eq!(alias["entity"], "ml");
    assert_eq!(alias["token"], "tok-1");
    assert_eq!(alias["artifact"]["metadata"]["nested"], json!({"a": 1}));
    assert_eq!(
        find("UPDATE_ARTIFACT_ALIAS", 0)["version"],
        "ml/vision/detector:v1"
    );
    let tag = find("ADD_ARTIFACT_TAG", 0);
    assert_eq!(
        (tag["tag"].clone(), tag["alias"].clone()),
        (json!("release-2"), json!(""))
    );
    let link = find("LINK_ARTIFACT", 0);
    assert_eq!(link["version"], "registry/models/detectors:v0");
    assert_eq!(link["collection"], "detectors");
    assert_eq!(link["accuracy"], 0.95);
    assert_eq!(link["project"], "vision");

    // History: one Finished execution per delivery, payload redacted. An
    // attempt is recorded just after the receiver answers it: wait for both.
    let path = format!("{PROJECT}/automations/prod-alias/executions");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let list = loop {
        let (status, list) = call!(host, bob, GET "{path}");
        assert_eq!(status, 200, "{list}");
        let data = list["data"].as_array().cloned().unwrap_or_default();
        if data.len() == 1 && data.iter().all(|e| e["status"] == "Finished") {
            break list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "one Finished execution expected: {list}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let executions = list["data"].as_array().unwrap();
    assert_eq!(executions.len(), 1);
    for e in executions {
        assert_eq!(e["status"], "Finished", "{e}");
        assert_eq!(e["attempts"][0]["status"], 200);
        let payload = e["payload"].as_str().unwrap();
        assert!(
            payload.contains("[REDACTED]") && !payload.contains("tok-1"),
            "{payload}"
        );
        assert!(e.get("body_sealed").is_none_or(Value::is_null));
    }
    // Nothing else fired (no events for staging, wip, or new versions):
    // every action answered once its executions were durable, and the
    // four automations have one each, the four delivered.
    let mut total = 0;
    for (scope, name) in [
        (PROJECT, "prod-alias"),
        (PROJECT, "prod-moved"),
        (PROJECT, "release-tag"),
        (REGISTRY, "linked"),
    ] {
        let path = format!("{scope}/automations/{name}/executions");
        let (_, list) = call!(host, bob, GET "{path}");
        total += list["data"].as_array().unwrap().len();
    }
    assert_eq!(total, 4);
    assert_eq!(receiver.received().len(), 4);
}

on_each_store!(a_list_of_labels_fires_one_event_each_in_one_request);
async fn a_list_of_labels_fires_one_event_each_in_one_request() {
    let receiver = Receiver::start().await;
    let (host, alice, bob) = tagging(&receiver, CONFIG, "tagged").await;
    automation(
        &host,
        &alice,
        PROJECT,
        "aliased",
        json!({"type": "ADD_ARTIFACT_ALIAS", "alias_regex": ".*"}),
    )
    .await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    for _ in 0..2 {
        ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 0.5}});
    }
    let added = ok!(host, bob, POST "{versions}/v0/tags", {"tags": ["b", "a", "c"]});
    assert_eq!(
        added,
        json!({"collection": "detector", "version": "v0", "tags": ["b", "a", "c"]})
    );
    ok!(host, bob, POST "{versions}/v1/aliases", {"alias": "prod"});
    let moved = ok!(host, bob, POST "{versions}/v0/aliases", {"aliases": ["prod", "best"]});
    assert_eq!(
        moved,
        json!({"collection": "detector", "version": "v0", "aliases": ["prod", "best"],
               "moved_from": {"prod": "v1"}})
    );

    // Five: three tags, and "prod" on v1 and "best" on v0; "prod" moving
    // to v0 is an UPDATE_ARTIFACT_ALIAS, which "aliased" does not hear.
    let got = receiver.wait_for(5, 10).await;
    let bodies: Vec<Value> = got.iter().map(verified).collect();
    let ids: HashSet<&str> = got
        .iter()
        .map(|r| r.header("x-service-delivery").unwrap())
        .collect();
    assert_eq!(ids.len(), 5, "one delivery per label: {bodies:?}");
    let mut tags: Vec<&str> = bodies
        .iter()
        .filter_map(|b| b["tag"].as_str())
        .filter(|t| !t.is_empty())
        .collect();
    tags.sort_unstable();
    assert_eq!(tags, ["a", "b", "c"]);
    // The version as an event carries it, without its label lists.
    let artifact = &bodies[0]["artifact"];
    assert_eq!(artifact["metadata"], json!({"accuracy": 0.5}));
    assert!(
        artifact.get("tags").is_none() && artifact.get("aliases").is_none(),
        "{artifact}"
    );
    let (_, v0) = call!(host, bob, GET "{versions}/v0");
    assert_eq!(
        (&v0["tags"], &v0["aliases"]),
        (&json!(["b", "a", "c"]), &json!(["prod", "best"]))
    );
    let (_, v1) = call!(host, bob, GET "{versions}/v1");
    assert_eq!(v1["aliases"], json!([]));

    // Each form alone, 1 to 1,000 labels, each label valid: or nothing happens.
    let tags_path = format!("{versions}/v0/tags");
    let too_many: Vec<String> = (0..1001).map(|i| format!("t{i}")).collect();
    for (body, param, says) in [
        (json!({"tag": "x", "tags": ["y"]}), "tags", "not both"),
        (json!({}), "tag", "missing field `tag`"),
        (json!({"tags": []}), "tags", "0 tags given"),
        (json!({"tags": too_many}), "tags", "1001 tags given"),
        (
            json!({"tags": ["ok", "not ok"]}),
            "tag",
            "'not ok' is not valid",
        ),
    ] {
        let answer = call!(host, bob, POST "{tags_path}", body);
        let error = expect_invalid(&answer, param);
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
    }
    let (_, v0) = call!(host, bob, GET "{versions}/v0");
    assert_eq!(
        v0["tags"],
        json!(["b", "a", "c"]),
        "a refused list adds nothing"
    );
    assert_eq!(receiver.received().len(), 5);
}

on_each_store!(a_link_fires_the_source_projects_link_automations_once);
async fn a_link_fires_the_source_projects_link_automations_once() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, bob) = world(&host, &receiver).await;
    let other_project = "/v1/teams/ml/projects/other";
    ok!(host, alice, POST "/v1/teams/ml/projects", {"name": "other"});
    for (scope, name) in [
        (PROJECT, "linked-here"),
        (REGISTRY, "linked"),
        (other_project, "not-mine"),
    ] {
        automation(&host, &alice, scope, name, json!({"type": "LINK_ARTIFACT"})).await;
    }
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 0.5}});
    ok!(host, alice, POST "{REGISTRY}/collections", {"name": "detectors"});
    ok!(host, bob, POST "{REGISTRY}/collections/detectors/links", {"team": "ml", "project": "vision", "collection": "detector", "version": "v0"});

    // The link answers once its deliveries are durable: each automation's
    // history is complete now.
    let history = |scope: &str, name: &str| format!("{scope}/automations/{name}/executions");
    let (_, here) = host
        .call("GET", &history(PROJECT, "linked-here"), &bob, None)
        .await;
    let (_, there) = host
        .call("GET", &history(REGISTRY, "linked"), &bob, None)
        .await;
    let (_, other) = host
        .call("GET", &history(other_project, "not-mine"), &bob, None)
        .await;
    assert_eq!(here["data"].as_array().map(Vec::len), Some(1), "{here}");
    assert_eq!(there["data"].as_array().map(Vec::len), Some(1), "{there}");
    assert_eq!(other["data"].as_array().map(Vec::len), Some(0), "{other}");

    let got = receiver.wait_for(2, 10).await;
    let bodies: Vec<Value> = got.iter().map(verified).collect();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    for body in &bodies {
        assert_eq!(body["event_type"], "LINK_ARTIFACT", "{body}");
        assert_eq!(body["collection"], "detectors", "{body}");
        assert_eq!(body["version"], "registry/models/detectors:v0", "{body}");
        assert_eq!(
            (body["project"].as_str(), body["entity"].as_str()),
            (Some("vision"), Some("ml"))
        );
    }
    let delivered: HashSet<&str> = got
        .iter()
        .map(|r| r.header("x-service-delivery").unwrap())
        .collect();
    let recorded: HashSet<&str> = [&here, &there]
        .iter()
        .map(|h| h["data"][0]["delivery_id"].as_str().unwrap())
        .collect();
    assert_eq!(delivered, recorded, "one delivery per automation");
}

on_each_store!(bare_secret_references_in_payloads_resolve_as_in_the_webhook_test);
async fn bare_secret_references_in_payloads_resolve_as_in_the_webhook_test() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, bob) = world(&host, &receiver).await;
    ok!(host, alice, PUT "/v1/teams/ml/secrets/OTHER", {"value": "other-1"});
    let save = |name: &str, payload: &str| {
        json!({"name": name, "event": {"type": "ADD_ARTIFACT_TAG"},
            "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks", "payload": payload})
    };
    // A team secret the webhook does not carry is refused, named, with its place.
    let (status, body) = host
        .call(
            "POST",
            &format!("{PROJECT}/automations"),
            &alice,
            Some(&save("bad", r#"{"o": "$OTHER"}"#)),
        )
        .await;
    expect_invalid(&(status, body.clone()), "payload");
    assert_eq!(body["error"]["param"], "payload", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("$OTHER at byte 7") && message.contains("'ci'"),
        "{message}"
    );

    let payload =
        r#"{"s": "$SIGN", "t": "$ACCESS_TOKEN", "u": "Bearer ${TOKEN}", "n": $SIGN, "p": "$5"}"#;
    ok(
        &host,
        &alice,
        "POST",
        &format!("{PROJECT}/automations"),
        save("refs", payload),
    )
    .await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {}});
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "one"});
    let got = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&got[0]),
        json!({"s": "sign-1", "t": "tok-1", "u": "Bearer tok-1", "n": "sign-1", "p": "$5"})
    );
    let executions = format!("{PROJECT}/automations/refs/executions");
    let (_, list) = call!(host, bob, GET "{executions}");
    let stored = list["data"][0]["payload"].as_str().unwrap().to_string();
    assert!(
        !stored.contains("sign-1") && !stored.contains("tok-1"),
        "{stored}"
    );
    assert!(stored.contains("[REDACTED]"), "{stored}");

    // The webhook stops carrying SIGN: the next execution fails saying so,
    // and nothing is sent with the literal text.
    ok!(host, alice, PUT "/v1/teams/ml/webhooks/ci", {"url": format!("{}/hook", receiver.base), "access_token_secret": "TOKEN"});
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "two"});
    let (_, list) = call!(host, bob, GET "{executions}");
    let latest = &list["data"][0];
    assert_eq!(latest["status"], "Failed", "{latest}");
    let error = latest["error"].as_str().unwrap();
    assert!(
        error.contains("$SIGN") && error.contains("does not carry"),
        "{error}"
    );
    assert_eq!(receiver.received().len(), 1, "the literal was never sent");
}

/// `levels` nested arrays around `1`.
fn nested(levels: usize) -> Value {
    serde_json::from_str(&format!("{}1{}", "[".repeat(levels), "]".repeat(levels))).unwrap()
}

on_each_store!(the_deepest_accepted_metadata_is_delivered_and_readable_and_deeper_is_refused);
async fn the_deepest_accepted_metadata_is_delivered_and_readable_and_deeper_is_refused() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, bob) = world(&host, &receiver).await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    // The body itself and `metadata` are two levels; 32 in all is the limit.
    for levels in [31, 123] {
        let (status, body) =
            call!(host, bob, POST "{versions}", {"metadata": {"deep": nested(levels)}});
        expect_error(&(status, body.clone()), 400, "invalid_json", None);
        assert_eq!(body["error"]["code"], "invalid_json", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("32 levels"),
            "{body}"
        );
    }
    automation(
        &host,
        &alice,
        PROJECT,
        "deep",
        json!({"type": "ADD_ARTIFACT_TAG"}),
    )
    .await;
    ok!(host, bob, POST "{versions}", {"metadata": {"deep": nested(30)}});
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "t"});

    let got = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&got[0])["artifact"]["metadata"]["deep"],
        nested(30)
    );
    let executions = format!("{PROJECT}/automations/deep/executions");
    let done = wait_for_status(&host, &bob, &executions, "Finished").await;
    assert_eq!(done["event"]["artifact"]["metadata"]["deep"], nested(30));
    let (status, version) = call!(host, bob, GET "{versions}/v0");
    assert_eq!((status, &version["metadata"]["deep"]), (200, &nested(30)));
    let (status, health) = host.get_anon("/v1/system-check").await;
    assert_eq!(
        (status, &health["quarantined_records"]),
        (200, &json!(0)),
        "{health}"
    );
}

on_each_store!(retry_after_is_honoured_in_both_forms_and_clamped_to_the_schedule);
async fn retry_after_is_honoured_in_both_forms_and_clamped_to_the_schedule() {
    let receiver = Receiver::start().await;
    let config = retrying("[0, 10, 10, 3000]");
    let (host, _, bob) = tagging(&receiver, &config, "retried").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {}});
    let executions = format!("{PROJECT}/automations/retried/executions");
    receiver.answer(503);
    let in_two_seconds =
        httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(2));
    // (value, shortest and longest wait it may cause, in ms). An HTTP-date
    // has whole seconds, and the attempt comes a little after the date was
    // written, so "in two seconds" may mean a little over one; either way
    // far more than the schedule's 10 ms.
    let cases = [
        ("18446744073709551615", 2_900, 3_700),
        ("99999999999999999999999", 2_900, 3_700),
        (in_two_seconds.as_str(), 300, 2_100),
    ];
    for (i, (value, shortest, longest)) in cases.into_iter().enumerate() {
        receiver.reply_header("retry-after", value);
        ok!(host, bob, POST "{versions}/v0/tags", {"tag": format!("t{i}")});
        let newest = wait_for_attempts(&host, &bob, &executions, 1).await;
        let first = &newest["attempts"][0];
        let wait = first["next_attempt_at_ms"].as_u64().unwrap() - first["at_ms"].as_u64().unwrap();
        assert!(
            (shortest..=longest).contains(&wait),
            "Retry-After {value}: waits {wait} ms: {first}"
        );
    }
}

on_each_store!(run_metric_automations_respect_filters_and_fire_once_per_run);
async fn run_metric_automations_respect_filters_and_fire_once_per_run() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, bob) = world(&host, &receiver).await;
    let body = json!({"name": "converged", "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "event": {"type": "RUN_METRIC_THRESHOLD",
            "metric": {"name": "loss", "window": 2, "aggregation": "average", "comparison": "<", "threshold": 0.5},
            "run_filters": {"creator": "alice", "run_name_regex": "^sweep-"}},
        "payload": r#"{"run": "${run_name}", "by": "${run_creator}", "metric": "${metric_name}", "value": ${metric_value}, "type": "${event_type}"}"#});
    ok!(host, alice, POST "{PROJECT}/automations", body);
    let runs = format!("{PROJECT}/runs");
    let sweep = ok!(host, alice, POST "{runs}", {"name": "sweep-1"});
    let other = ok!(host, alice, POST "{runs}", {"name": "baseline"});
    let bobs = ok!(host, bob, POST "{runs}", {"name": "sweep-2"});
    let log = |run: &Value, loss: f64| {
        let path = format!("{runs}/{}/metrics", run["id"].as_str().unwrap());
        let (host, key) = (
            &host,
            if run["creator"] == "bob" {
                &bob
            } else {
                &alice
            },
        );
        async move { ok!(host, key, POST "{path}", {"metrics": {"loss": loss, "acc": 0.5}}) }
    };
    for loss in [1.0, 0.2] {
        log(&sweep, loss).await; // averages 1.0, then 0.6: no
    }
    for run in [&other, &bobs] {
        log(run, 0.1).await;
        log(run, 0.1).await; // below threshold, but filtered out
    }
    log(&sweep, 0.3).await; // average 0.25: fires
    log(&sweep, 0.05).await; // would fire again: once per run per 24 h
    let got = receiver.wait_for(1, 10).await;
    // Each log answered once its executions were durable: one in all.
    let (_, list) = call!(host, alice, GET "{PROJECT}/automations/converged/executions");
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(receiver.received().len(), 1, "{got:?}");
    assert_eq!(
        verified(&got[0]),
        json!({"run": "sweep-1", "by": "alice", "metric": "loss", "value": 0.25, "type": "RUN_METRIC_THRESHOLD"})
    );
}

on_each_store!(retries_history_replay_and_gone);
async fn retries_history_replay_and_gone() {
    let receiver = Receiver::start().await;
    receiver.answer(503);
    let (host, alice, bob) = tagging(&receiver, CONFIG, "tagged").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 1}});
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "a"});

    // Down for a while, then back: the delivery gets through.
    receiver.wait_for(3, 10).await;
    receiver.answer(200);
    let executions = format!("{PROJECT}/automations/tagged/executions");
    let execution = wait_for_status(&host, &alice, &executions, "Finished").await;
    let attempts = execution["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 3, "{execution}");
    assert_eq!(attempts[0]["status"], 503);
    assert!(attempts[0]["next_attempt_at_ms"].is_u64());
    assert_eq!(attempts.last().unwrap()["status"], 200);
    let all = receiver.received();
    let ids: HashSet<&str> = all
        .iter()
        .map(|r| r.header("x-service-delivery").unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "retries keep the delivery id");
    assert_eq!(
        all.iter()
            .map(|r| r.body.clone())
            .collect::<HashSet<_>>()
            .len(),
        1,
        "same bytes"
    );

    // Replay sends it again, same id; members may not replay.
    let replay = format!("{executions}/{}/replay", execution["id"].as_str().unwrap());
    expect_error(
        &call!(host, bob, POST "{replay}"),
        403,
        "permission_denied",
        None,
    );
    let (status, body) = call!(host, alice, POST "{replay}");
    assert_eq!(status, 202, "{body}");
    let before = all.len();
    let again = receiver.wait_for(before + 1, 10).await;
    let replayed = &again[before..];
    assert_eq!(replayed.len(), 1, "one request for one replay");
    assert_eq!(
        replayed[0].header("x-service-delivery"),
        all[0].header("x-service-delivery"),
        "a replay keeps the delivery id"
    );
    assert_eq!(
        replayed[0].body, all[0].body,
        "a replay sends the same bytes"
    );
    verified(&replayed[0]);

    // 410 Gone: the execution fails at once and the webhook is disabled.
    receiver.answer(410);
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "b"});
    let failed = wait_for_status(&host, &alice, &executions, "Failed").await;
    assert_eq!(failed["attempts"].as_array().unwrap().len(), 1, "{failed}");
    let (_, webhook) = call!(host, alice, GET "/v1/teams/ml/webhooks/ci");
    assert!(
        webhook["disabled_reason"].as_str().unwrap().contains("410"),
        "{webhook}"
    );
    let count = receiver.received().len();
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "c"});
    // Held, not failed: what fires for a disabled webhook waits for it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, list) = call!(host, alice, GET "{executions}");
    let newest = &list["data"][0];
    assert_eq!(newest["status"], "Pending", "{newest}");
    assert_eq!(newest["attempts"], json!([]), "no attempt: {newest}");
    assert_eq!(
        receiver.received().len(),
        count,
        "a disabled webhook is not called"
    );

    // Saving the webhook re-enables it and sends what it held; replaying
    // the failures since a time resends the 410 one.
    receiver.answer(200);
    let settings = json!({"url": format!("{}/hook", receiver.base),
        "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    let webhook = ok!(host, alice, PUT "/v1/teams/ml/webhooks/ci", settings);
    assert!(webhook.get("disabled_reason").is_none(), "{webhook}");
    let got = receiver.wait_for(count + 1, 10).await;
    assert_eq!(verified(&got[count])["tag"], "c", "the held one goes");
    wait_for_status(&host, &alice, &executions, "Finished").await;
    let replay_all = format!("{PROJECT}/automations/tagged/replay");
    let (status, body) = call!(host, alice, POST "{replay_all}", {"since_ms": 0});
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["replayed"].as_array().unwrap().len(), 1, "{body}");
    let got = receiver.wait_for(count + 2, 10).await;
    let replayed = &got[count + 1..];
    assert_eq!(replayed.len(), 1, "only the failure is resent");
    assert_eq!(verified(&replayed[0])["tag"], "b");
}

/// Polls the newest execution until it has `status`.
/// The newest execution once it has `n` attempts; fails loudly after 10 s.
async fn wait_for_attempts(host: &Host, key: &str, executions: &str, n: usize) -> Value {
    let mut newest = Value::Null;
    for _ in 0..200 {
        let (_, list) = call!(host, key, GET "{executions}");
        newest = list["data"][0].clone();
        if newest["attempts"].as_array().is_some_and(|a| a.len() >= n) {
            return newest;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no execution with {n} attempts at {executions}; newest: {newest}");
}

async fn wait_for_status(host: &Host, key: &str, executions: &str, status: &str) -> Value {
    for _ in 0..200 {
        let (_, list) = call!(host, key, GET "{executions}");
        if list["data"][0]["status"] == status {
            return list["data"][0].clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no {status} execution at {executions}");
}

/// [`CONFIG`] with retries that outlast a slow machine's 25 tag requests: a
/// delivery that used up its attempts before the kill would fail for good,
/// and the test would not be about the restart any more.
pub(crate) fn lasting_retries() -> String {
    let quick = ["0"].into_iter().chain(["150"; 9]);
    let slow = ["500"; 60];
    let schedule: Vec<&str> = quick.chain(slow).collect();
    // A short cool-off: a circuit opened before a crash holds deliveries
    // after the restart for a moment only.
    retrying(&format!("[{}]", schedule.join(", ")))
        + "\n[delivery.circuit_breaker]\ncooloff_ms = 200\nmax_cooloff_ms = 400"
}

on_each_store!(kill_9_with_deliveries_pending_then_restart_delivers_every_one);
async fn kill_9_with_deliveries_pending_then_restart_delivers_every_one() {
    let receiver = Receiver::start().await;
    receiver.answer(503);
    // A short send timeout: a circuit that was half open at the kill waits
    // a send's timeout (and a second) before the restarted host probes it,
    // and this receiver answers at once.
    let config = lasting_retries().replace("[webhooks]\n", "[webhooks]\ntimeout_ms = 2000\n");
    assert_ne!(config, CONFIG);
    let (mut host, _, bob) = tagging(&receiver, &config, "tagged").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 1}});
    const EVENTS: usize = 25;
    for i in 0..EVENTS {
        ok!(host, bob, POST "{versions}/v0/tags", {"tag": format!("t{i}")});
    }
    host.kill9();
    // Only the restarted host can be answered 200 from here on.
    let before = receiver.received().len();
    receiver.answer(200);
    let restarted = Host::builder()
        .config(&config)
        .same_store(&host)
        .start()
        .await;
    let mut after = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        after = receiver.received().split_off(before);
        let ids: HashSet<_> = after
            .iter()
            .map(|r| r.header("x-service-delivery"))
            .collect();
        if ids.len() >= EVENTS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(after.iter().all(|r| r.answered == 200));
    let ids: HashSet<_> = after
        .iter()
        .map(|r| r.header("x-service-delivery").unwrap())
        .collect();
    assert_eq!(
        ids.len(),
        EVENTS,
        "the restarted host delivered every event; {before} attempts before the kill"
    );
    let tags: HashSet<String> = after
        .iter()
        .map(|r| verified(r)["tag"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tags.len(), EVENTS);
    drop(restarted);
}

on_each_store!(events_on_unknown_objects_are_404_and_outsiders_cannot_act);
async fn events_on_unknown_objects_are_404_and_outsiders_cannot_act() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, _) = world(&host, &receiver).await;
    let eve = host.create_user("mallory").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    for (path, body) in [
        (format!("{PROJECT}/collections/nope/versions"), json!({})),
        (format!("{versions}/v7/aliases"), json!({"alias": "prod"})),
        (format!("{versions}/banana/tags"), json!({"tag": "x"})),
        (
            format!("{REGISTRY}/collections/nope/links"),
            json!({"team": "ml", "project": "vision", "collection": "detector", "version": "v0"}),
        ),
        (
            format!("{PROJECT}/runs/nope/metrics"),
            json!({"metrics": {"loss": 1.0}}),
        ),
    ] {
        let (status, response) = call!(host, alice, POST "{path}", body);
        expect_error(&(status, response.clone()), 404, "not_found", None);
    }
    let answer = call!(host, eve, POST "{versions}", {});
    expect_error(&answer, 404, "not_found", None);
    for (alias, why) in [
        ("v3", "reserved"),
        ("latest", "reserved"),
        ("a b", "not valid"),
    ] {
        ok!(host, alice, POST "{versions}", {});
        let (status, body) = call!(host, alice, POST "{versions}/v0/aliases", {"alias": alias});
        expect_invalid(&(status, body.clone()), "alias");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(why),
            "{body}"
        );
    }
    let (status, body) = call!(host, alice, POST "{REGISTRY}/collections/x/versions", {});
    expect_invalid(&(status, body.clone()), "metadata");
}

/// A second webhook `fast` → `receiver`, and an automation per webhook on tag events.
async fn two_webhooks(host: &Host, alice: &str, fast: &Receiver, extra: Value) {
    let mut hook = json!({"name": "fast", "url": format!("{}/hook", fast.base),
        "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    if let (Some(h), Some(e)) = (hook.as_object_mut(), extra.as_object()) {
        h.extend(e.clone());
    }
    ok!(host, alice, POST "/v1/teams/ml/webhooks", hook);
    for webhook in ["ci", "fast"] {
        let body = json!({"name": format!("to-{webhook}"), "event": {"type": "ADD_ARTIFACT_TAG"},
            "webhook": {"team": "ml", "name": webhook}, "action": "Webhooks"});
        ok!(host, alice, POST "{PROJECT}/automations", body);
    }
    ok!(host, alice, POST "{PROJECT}/collections/detector/versions", {});
}

on_each_store!(a_hanging_receiver_times_out_and_cannot_starve_the_others);
async fn a_hanging_receiver_times_out_and_cannot_starve_the_others() {
    let (slow, fast) = (Receiver::start().await, Receiver::start().await);
    slow.delay(30_000);
    let config = CONFIG.replace("\n[delivery]", "\ntimeout_ms = 300\n[delivery]")
        + "\nper_webhook = 2\nconcurrency = 4";
    let host = Host::with_config(&config).await;
    let (alice, _) = world(&host, &slow).await;
    two_webhooks(&host, &alice, &fast, json!({})).await;
    let started = std::time::Instant::now();
    const EVENTS: usize = 10;
    for i in 0..EVENTS {
        let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
        ok!(host, alice, POST "{path}", {"tag": format!("t{i}")});
    }
    let got = fast.wait_for(EVENTS, 10).await;
    assert_eq!(got.len(), EVENTS);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the fast webhook waited: {:?}",
        started.elapsed()
    );
    // The fast webhook no longer waits for the slow one's attempts at all;
    // those time out on their own.
    let executions = format!("{PROJECT}/automations/to-ci/executions");
    let (mut list, mut timed_out) = (Value::Null, 0);
    for _ in 0..100 {
        list = call!(host, alice, GET "{executions}").1;
        timed_out = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|e| e["attempts"].as_array().unwrap().clone())
            .filter(|a| {
                a["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("did not answer within 300 ms"))
            })
            .count();
        if timed_out >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(timed_out >= 1, "{list}");
    assert!(slow.arrived() >= 1, "the slow webhook was called");
}

on_each_store!(standard_webhooks_headers_are_sent_when_asked_for);
async fn standard_webhooks_headers_are_sent_when_asked_for() {
    use base64::Engine;
    use hmac::Mac;
    let (receiver, standard) = (Receiver::start().await, Receiver::start().await);
    let host = Host::with_config(CONFIG).await;
    let (alice, _) = world(&host, &receiver).await;
    two_webhooks(&host, &alice, &standard, json!({"standard_webhooks": true})).await;
    let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
    ok!(host, alice, POST "{path}", {"tag": "x"});
    let got = standard.wait_for(1, 10).await;
    let request = &got[0];
    let body = verified(request);
    assert_eq!(body["tag"], "x");
    let id = request.header("webhook-id").unwrap();
    assert_eq!(Some(id), request.header("x-service-delivery"));
    let timestamp = request.header("webhook-timestamp").unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"sign-1").unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&request.body);
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    assert_eq!(
        request.header("webhook-signature"),
        Some(format!("v1,{expected}").as_str())
    );
    let plain = receiver.wait_for(1, 10).await;
    assert!(plain[0].header("webhook-signature").is_none());
}

on_each_store!(ssrf_rules_are_enforced_at_delivery_time);
async fn ssrf_rules_are_enforced_at_delivery_time() {
    let receiver = Receiver::start().await;
    let mut host = Host::with_config(CONFIG).await;
    let (alice, _) = world(&host, &receiver).await;
    let by_name = Receiver::start().await;
    two_webhooks(&host, &alice, &by_name, json!({})).await;
    let local = format!(
        "http://localhost:{}/hook",
        by_name.base.rsplit(':').next().unwrap()
    );
    ok!(host, alice, PUT "/v1/teams/ml/webhooks/fast", {"url": local, "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    host.terminate().await;
    // The operator withdraws the allow-list: both webhooks now point inside.
    let strict = CONFIG.replace("allow_private = [\"127.0.0.0/8\"]", "");
    let host = Host::builder()
        .config(&strict)
        .same_store(&host)
        .start()
        .await;
    let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
    ok!(host, alice, POST "{path}", {"tag": "x"});
    for automation in ["to-ci", "to-fast"] {
        let executions = format!("{PROJECT}/automations/{automation}/executions");
        let failed = wait_for_status(&host, &alice, &executions, "Failed").await;
        let error = failed["error"].as_str().unwrap();
        assert!(error.contains("is an internal"), "{automation}: {error}");
        assert_eq!(
            failed["attempts"].as_array().unwrap().len(),
            1,
            "not retried: {failed}"
        );
    }
    assert!(receiver.received().is_empty() && by_name.received().is_empty());
}

on_each_store!(a_template_that_fails_at_render_time_fails_the_execution_without_retries);
async fn a_template_that_fails_at_render_time_fails_the_execution_without_retries() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, _) = world(&host, &receiver).await;
    let (status, body) = host
        .upload_plugin(
            "misbehave",
            "kind=payload-template&version=1.0.0",
            crate::harness::plugin_wasm("misbehave"),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // misbehave accepts any template when it is saved, and traps on "trap".
    let automation = json!({"name": "broken", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": "trap", "template_plugin": "misbehave"});
    ok!(host, alice, POST "{PROJECT}/automations", automation);
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, alice, POST "{versions}", {});
    ok!(host, alice, POST "{versions}/v0/tags", {"tag": "x"});
    let executions = format!("{PROJECT}/automations/broken/executions");
    let failed = wait_for_status(&host, &alice, &executions, "Failed").await;
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("misbehave@1.0.0"), "{error}");
    assert_eq!(failed["attempts"], json!([]), "nothing was sent");
    let (status, body) = host
        .call(
            "POST",
            &format!("{executions}/{}/replay", failed["id"].as_str().unwrap()),
            &alice,
            None,
        )
        .await;
    expect_error(&(status, body.clone()), 409, "conflict", None);
    // Failed before anything was queued: nothing can be sent later.
    assert!(receiver.received().is_empty());
}

on_each_store!(a_full_plugin_queue_delays_matching_but_loses_no_event);
async fn a_full_plugin_queue_delays_matching_but_loses_no_event() {
    let receiver = Receiver::start().await;
    let config = format!("{CONFIG}\n[queues.plugin]\nworkers = 1\ncapacity = 1");
    let (host, alice, _) = tagging(&receiver, &config, "tagged").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, alice, POST "{versions}", {});
    const EVENTS: usize = 30;
    let path = host.url(&format!("{versions}/v0/tags"));
    let tasks: Vec<_> = (0..EVENTS)
        .map(|i| {
            let request = host
                .http
                .post(&path)
                .bearer_auth(&alice)
                .json(&json!({"tag": format!("t{i}")}));
            tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
        })
        .collect();
    for task in tasks {
        assert_eq!(
            task.await.unwrap(),
            200,
            "the action happened, whatever the queue"
        );
    }
    let got = receiver.wait_for(EVENTS, 20).await;
    // An event matched twice would show as a second execution.
    let executions = format!("{PROJECT}/automations/tagged/executions");
    let (_, list) = call!(host, alice, GET "{executions}");
    assert_eq!(list["data"].as_array().unwrap().len(), EVENTS, "{list}");
    let tags: Vec<String> = receiver
        .received()
        .iter()
        .map(|r| r.json()["tag"].as_str().unwrap().to_string())
        .collect();
    let unique: HashSet<&String> = tags.iter().collect();
    assert_eq!(
        (got.len(), tags.len(), unique.len()),
        (EVENTS, EVENTS, EVENTS),
        "each event delivered once"
    );
    assert!(
        host.log().contains("left in the inbox"),
        "the queue never filled; the test proves nothing"
    );
}

on_each_store!(other_4xx_fail_at_once_and_an_exhausted_schedule_ends_failed);
async fn other_4xx_fail_at_once_and_an_exhausted_schedule_ends_failed() {
    let receiver = Receiver::start().await;
    let config = retrying("[0, 10, 10]");
    let (host, alice, bob) = tagging(&receiver, &config, "tagged").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {});
    let executions = format!("{PROJECT}/automations/tagged/executions");
    let tags = format!("{versions}/v0/tags");
    let tag = |t: &'static str| ok(&host, &bob, "POST", &tags, json!({"tag": t}));

    // 422: the endpoint refused the payload; trying again cannot help.
    receiver.answer(422);
    tag("a").await;
    let failed = wait_for_status(&host, &alice, &executions, "Failed").await;
    assert_eq!(failed["attempts"].as_array().unwrap().len(), 1, "{failed}");
    assert_eq!(failed["attempts"][0]["next_attempt_at_ms"], Value::Null);
    assert!(
        failed["error"].as_str().unwrap().contains("422"),
        "{failed}"
    );

    // 500 every time: each step of the schedule is used, then it fails.
    receiver.answer(500);
    tag("b").await;
    let failed = wait_for_attempts(&host, &alice, &executions, 3).await;
    let failed = if failed["status"] == "Failed" {
        failed
    } else {
        wait_for_status(&host, &alice, &executions, "Failed").await
    };
    let attempts = failed["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "one attempt per step: {failed}");
    assert!(attempts.iter().all(|a| a["status"] == 500));
    assert_eq!(attempts[2]["next_attempt_at_ms"], Value::Null, "{failed}");
    assert!(attempts[1]["next_attempt_at_ms"].is_u64());
}

on_each_store!(events_left_in_the_inbox_by_a_crash_are_matched_at_start);
async fn events_left_in_the_inbox_by_a_crash_are_matched_at_start() {
    let receiver = Receiver::start().await;
    // A plugin queue that runs nothing: the first event's matching waits
    // for ever, the others find the queue full; every action has happened
    // and its event waits in the inbox.
    let stalled = format!("{CONFIG}\n[queues.plugin]\nworkers = 0\ncapacity = 1");
    let (mut host, alice, bob) = tagging(&receiver, CONFIG, "tagged").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {});
    host.terminate().await;
    let mut host = Host::builder()
        .config(&stalled)
        .same_store(&host)
        .start()
        .await;
    let tags = host.url(&format!("{versions}/v0/tags"));
    let requests = ["x", "y", "z"].map(|t| {
        host.http
            .post(&tags)
            .bearer_auth(&bob)
            .json(&json!({"tag": t}))
            .timeout(Duration::from_secs(2))
            .send()
    });
    // Answered 200 (its event left for the sweep) or still waiting.
    for answer in futures_util::future::join_all(requests).await {
        assert!(
            answer.as_ref().map_or(true, |r| r.status() == 200),
            "{answer:?}"
        );
    }
    let executions = format!("{PROJECT}/automations/tagged/executions");
    let (_, list) = call!(host, alice, GET "{executions}");
    assert_eq!(list["data"], json!([]), "nothing was matched yet");
    host.kill9();
    assert!(receiver.received().is_empty());
    let _restarted = Host::builder()
        .config(CONFIG)
        .same_store(&host)
        .start()
        .await;
    let got = receiver.wait_for(3, 10).await;
    let mut tags: Vec<String> = got
        .iter()
        .map(|r| verified(r)["tag"].as_str().unwrap().to_string())
        .collect();
    tags.sort();
    assert_eq!(tags, ["x", "y", "z"]);
}

on_each_store!(a_disabled_automation_does_not_deliver_until_saved_again);
async fn a_disabled_automation_does_not_deliver_until_saved_again() {
    let receiver = Receiver::start().await;
    let (host, alice, bob) = tagging(&receiver, CONFIG, "tagged").await;
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {});
    // Force-deleting its webhook disables it.
    let (status, body) = call!(host, alice, DELETE "/v1/teams/ml/webhooks/ci?force=true");
    assert_eq!(status, 204, "{body}");
    let hook = json!({"name": "ci", "url": format!("{}/hook", receiver.base),
        "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    ok!(host, alice, POST "/v1/teams/ml/webhooks", hook);
    let path = format!("{PROJECT}/automations/tagged");
    let (_, automation_now) = call!(host, alice, GET "{path}");
    assert_eq!(automation_now["state"], "disabled", "{automation_now}");
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "while-off"});
    let executions = format!("{path}/executions");
    let (_, list) = call!(host, alice, GET "{executions}");
    assert_eq!(
        list["data"],
        json!([]),
        "a disabled automation does not fire"
    );

    // Saving it again re-validates and re-activates it.
    let definition = json!({"name": "tagged", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks", "payload": TEMPLATE});
    let saved = ok!(host, alice, PUT "{path}", definition);
    assert_eq!(saved["state"], "active", "{saved}");
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "back-on"});
    let got = receiver.wait_for(1, 10).await;
    assert_eq!(got.len(), 1);
    assert_eq!(verified(&got[0])["tag"], "back-on");
}

on_each_store!(linking_needs_membership_of_the_source_team);
async fn linking_needs_membership_of_the_source_team() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    ok!(host, world.alice, POST "{PROJECT}/collections/detector/versions", {});
    // eve becomes a member of the registry, not of team ml.
    ok!(host, world.alice, PUT "{REGISTRY}/members/eve", {"role": "member"});
    ok!(host, world.alice, POST "{REGISTRY}/collections", {"name": "detectors"});
    let link = format!("{REGISTRY}/collections/detectors/links");
    let source =
        json!({"team": "ml", "project": "vision", "collection": "detector", "version": "v0"});
    let answer = call!(host, world.eve, POST "{link}", source);
    expect_error(&answer, 404, "not_found", None);
    let (status, linked) = call!(host, world.bob, POST "{link}", source);
    assert_eq!(status, 201, "a member of both links: {linked}");
}

on_each_store!(an_automation_with_the_github_adapter_sends_a_repository_dispatch);
async fn an_automation_with_the_github_adapter_sends_a_repository_dispatch() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let (alice, bob) = world(&host, &receiver).await;
    let body = json!({"name": "dispatch", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": "model-tagged", "template_plugin": "github"});
    ok!(host, alice, POST "{PROJECT}/automations", body);
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {}});
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "gold"});
    let sent = receiver.wait_for(1, 10).await;
    let dispatch = verified(&sent[0]);
    assert_eq!(dispatch["event_type"], "model-tagged");
    assert_eq!(dispatch["client_payload"]["event_author"], "bob");
    assert_eq!(
        dispatch["client_payload"]["artifact_collection_name"],
        "detector"
    );
    assert_eq!(
        dispatch["client_payload"]["artifact_version_string"],
        "ml/vision/detector:v0"
    );
    assert_eq!(
        dispatch["client_payload"]["artifact_version"]["version"],
        "v0"
    );
}

on_each_store!(a_kept_template_instance_serves_only_the_team_it_first_served);
async fn a_kept_template_instance_serves_only_the_team_it_first_served() {
    let (receiver, eves) = (Receiver::start().await, Receiver::start().await);
    let host = Host::with_config(CONFIG).await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let (status, body) = host
        .upload_plugin(
            "recall",
            "kind=payload-template&version=1.0.0",
            crate::harness::plugin_wasm("recall"),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // eve's team gets the same plugin, its own webhook and project.
    let eve = &world.eve;
    let hook = json!({"name": "hook", "url": format!("{}/hook", eves.base)});
    ok!(host, eve, POST "/v1/teams/other/webhooks", hook);
    let theirs = "/v1/teams/other/projects/lab";
    ok!(host, eve, POST "/v1/teams/other/projects", {"name": "lab"});
    let collection = json!({"name": "detector"});
    ok!(host, eve, POST "{theirs}/collections", collection);
    for (key, scope, team, webhook) in [
        (&world.alice, PROJECT, "ml", "ci"),
        (eve, theirs, "other", "hook"),
    ] {
        let automation = json!({"name": "recall", "event": {"type": "ADD_ARTIFACT_TAG"},
            "webhook": {"team": team, "name": webhook}, "action": "Webhooks",
            "payload": "{}", "template_plugin": "recall"});
        ok!(host, key, POST "{scope}/automations", automation);
        let versions = format!("{scope}/collections/detector/versions");
        ok!(host, key, POST "{versions}", {});
    }
    let tag = async |key: &str, scope: &str, tag: &str| {
        let path = format!("{scope}/collections/detector/versions/v0/tags");
        ok!(host, key, POST "{path}", {"tag": tag});
    };
    let seen = |r: &Received| r.json()["seen"].clone();

    tag(&world.alice, PROJECT, "a1").await;
    assert_eq!(seen(&receiver.wait_for(1, 10).await[0]), json!(["a1"]));
    tag(eve, theirs, "e1").await;
    assert_eq!(seen(&eves.wait_for(1, 10).await[0]), json!(["e1"]));
    // alice's next render runs on the instance that rendered her first.
    tag(&world.alice, PROJECT, "a2").await;
    assert_eq!(
        seen(&receiver.wait_for(2, 10).await[1]),
        json!(["a1", "a2"])
    );
    tag(eve, theirs, "e2").await;
    assert_eq!(seen(&eves.wait_for(2, 10).await[1]), json!(["e1", "e2"]));

    // An instance that trapped is not kept: the next render starts afresh.
    tag(&world.alice, PROJECT, "trap").await;
    let executions = format!("{PROJECT}/automations/recall/executions");
    let failed = wait_for_status(&host, &world.alice, &executions, "Failed").await;
    assert!(
        failed["error"].as_str().unwrap().contains("recall@1.0.0"),
        "{failed}"
    );
    tag(&world.alice, PROJECT, "a3").await;
    assert_eq!(seen(&receiver.wait_for(3, 10).await[2]), json!(["a3"]));
}

/// An outbox row damaged in the database (a scope no build reads) is set
/// aside in the quarantine, counted in the system check and the metrics;
/// the deliveries beside it still go.
#[tokio::test]
async fn an_unreadable_outbox_row_is_quarantined_and_the_rest_go() {
    crate::harness::Engine::Postgres
        .run(async {
            use sqlx::Connection;
            let receiver = Receiver::start().await;
            receiver.answer(503);
            // Without the circuit breaker, which five failures in a row
            // would open, holding the retries past the test's wait.
            let config = retrying("[0, 2000]") + "\n[delivery.circuit_breaker]\nenabled = false";
            let (host, _, bob) = tagging(&receiver, &config, "tagged").await;
            let versions = format!("{PROJECT}/collections/detector/versions");
            ok!(host, bob, POST "{versions}", {"metadata": {}});
            for i in 0..5 {
                ok!(host, bob, POST "{versions}/v0/tags", {"tag": format!("t{i}")});
            }
            receiver.wait_for(5, 10).await;
            receiver.answer(200);
            let url = &host.database.as_ref().unwrap().url;
            let mut db = sqlx::PgConnection::connect(url).await.unwrap();
            let damaged: String = sqlx::query_scalar(
                "UPDATE outbox SET scope = 'no such scope' \
                 WHERE id = (SELECT id FROM outbox ORDER BY id LIMIT 1) RETURNING id",
            )
            .fetch_one(&mut db)
            .await
            .unwrap();

            let second: HashSet<String> = receiver.wait_for(9, 10).await[5..]
                .iter()
                .map(|r| r.header("x-service-delivery").unwrap().to_string())
                .collect();
            assert_eq!(second.len(), 4, "{second:?}");
            assert!(!second.contains(&damaged), "{damaged} was sent");
            // The damaged row may fall due a moment after the others.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let (status, health) = host.get_anon("/v1/system-check").await;
                if health["quarantined_records"] == json!(1) {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "not quarantined within 10 s: {status} {health}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let metrics = host.http.get(host.url("/metrics")).send().await.unwrap();
            let metrics = metrics.text().await.unwrap();
            assert!(
                metrics.contains("\nswitchyard_store_quarantined_records 1\n"),
                "{metrics}"
            );
            let set_aside: String = sqlx::query_scalar("SELECT value FROM quarantine")
                .fetch_one(&mut db)
                .await
                .unwrap();
            assert!(set_aside.contains(&damaged), "{set_aside}");
        })
        .await;
}
