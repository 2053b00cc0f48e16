//! What a receiver can ask of its webhook: its own headers (secrets in,
//! never shown back), its own retry schedule, and when to give up on it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::delivery::CONFIG;
use crate::harness::{Host, expect_error, expect_invalid};
use crate::receiver::{Received, Receiver, expected_signature};
use crate::world::{PROJECT, SIGN, World};

const WEBHOOK: &str = "/v1/teams/ml/webhooks/ci";

/// The world on `host` with webhook `ci` calling `receiver`, an automation
/// sending every tag in the project to it, and a version to tag.
async fn tagged_to(host: &Host, receiver: &Receiver) -> World {
    let hook = format!("{}/hook", receiver.base);
    let world = World::build(host, Some(&hook)).await;
    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    ok!(host, world.alice, POST "{PROJECT}/automations", automation);
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});
    world
}

/// Tags the version with `tag`; returns the request the receiver got.
async fn tag(host: &Host, key: &str, receiver: &Receiver, tag: &str) -> Received {
    let before = receiver.received().len();
    let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
    ok!(host, key, POST "{path}", {"tag": tag});
    let got = receiver.wait_for(before + 1, 10).await;
    got.into_iter().nth(before).unwrap()
}

fn headers_of(request: &Received) -> Value {
    json!({
        "x-api-key": request.header("x-api-key"),
        "x-tenant": request.header("x-tenant"),
        "x-price": request.header("x-price"),
        "authorization": request.header("authorization"),
    })
}

on_each_store!(a_webhooks_own_headers_go_with_every_delivery_and_test);
async fn a_webhooks_own_headers_go_with_every_delivery_and_test() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let World { alice, bob, .. } = tagged_to(&host, &receiver).await;
    ok!(host, alice, PUT "/v1/teams/ml/secrets/PARTNER_KEY", {"value": "pk-123"});
    let headers = json!({"X-Api-Key": "$PARTNER_KEY", "X-Tenant": "acme", "X-Price": "$$5"});
    let settings = json!({"url": format!("{}/hook", receiver.base),
        "access_token_secret": "TOKEN", "signing_secret": "SIGN", "headers": headers});
    let saved = ok!(host, alice, PUT "{WEBHOOK}", settings);
    assert_eq!(saved["headers"], headers, "shown as written: {saved}");
    let shown = ok!(host, bob, GET "{WEBHOOK}");
    assert_eq!(shown["headers"], headers);
    assert!(!shown.to_string().contains("pk-123"), "{shown}");

    let sent = json!({"x-api-key": "pk-123", "x-tenant": "acme", "x-price": "$5",
        "authorization": "Bearer tok-1"});
    let delivered = tag(&host, &bob, &receiver, "staging").await;
    assert_eq!(headers_of(&delivered), sent);
    assert_eq!(
        delivered.header("x-service-signature").unwrap(),
        expected_signature(SIGN, &delivered.body),
        "signed as before"
    );
    let test = ok!(host, alice, POST "{WEBHOOK}/test", {});
    assert_eq!(test["success"], true, "{test}");
    let tested = receiver.received().pop().unwrap();
    assert_eq!(headers_of(&tested), sent, "the test sends them too");

    // A new value goes out with the next delivery.
    ok!(host, alice, PUT "/v1/teams/ml/secrets/PARTNER_KEY", {"value": "pk-456"});
    let delivered = tag(&host, &bob, &receiver, "prod").await;
    assert_eq!(delivered.header("x-api-key"), Some("pk-456"));

    // The secret is protected while a header names it.
    let deleting = call!(host, alice, DELETE "/v1/teams/ml/secrets/PARTNER_KEY");
    let error = expect_error(&deleting, 409, "conflict", None);
    assert!(error["message"].as_str().unwrap().contains("ci"), "{error}");
}

on_each_store!(headers_that_cannot_be_sent_are_refused_saying_why);
async fn headers_that_cannot_be_sent_are_refused_saying_why() {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let World { alice, .. } = tagged_to(&host, &receiver).await;
    let url = format!("{}/hook", receiver.base);
    for (headers, param, says) in [
        (
            json!({"Host": "example.com"}),
            "headers.Host",
            "set by Switchyard",
        ),
        (
            json!({"Webhook-Signature": "v1,x"}),
            "headers.Webhook-Signature",
            "set by Switchyard",
        ),
        (
            json!({"Authorization": "Basic $TOKEN"}),
            "headers.Authorization",
            "access token",
        ),
        (json!({"X Key": "1"}), "headers.X Key", "header name"),
        (json!({"X-Key": "a\nb"}), "headers.X-Key", "line breaks"),
        (
            json!({"X-Key": "$NOPE"}),
            "headers",
            "no secret named 'NOPE'",
        ),
    ] {
        let settings = json!({"url": url, "access_token_secret": "TOKEN", "headers": headers});
        let got = call!(host, alice, PUT "{WEBHOOK}", settings);
        let error = expect_invalid(&got, param);
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(says), "{headers}: {message}");
    }
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    let got = call!(host, alice, PUT "{WEBHOOK}", {"url": url, "headers": many});
    expect_invalid(&got, "headers");
    // Without an access token, Authorization is the receiver's to ask for.
    let basic = json!({"url": url, "headers": {"Authorization": "Basic $SPARE"}});
    ok!(host, alice, PUT "{WEBHOOK}", basic);
}

on_each_store!(a_webhooks_own_retry_schedule_replaces_the_hosts);
async fn a_webhooks_own_retry_schedule_replaces_the_hosts() {
    let receiver = Receiver::start().await;
    receiver.answer(503);
    // The host's schedule has ten attempts; the webhook asks for three.
    let host = Host::with_config(CONFIG).await;
    let World { alice, bob, .. } = tagged_to(&host, &receiver).await;
    let url = format!("{}/hook", receiver.base);
    for schedule in [json!([]), json!(vec![0; 31]), json!([0, 604_800_000, 1])] {
        let got = call!(host, alice, PUT "{WEBHOOK}", {"url": url, "retry_schedule_ms": schedule});
        expect_invalid(&got, "retry_schedule_ms");
    }
    let settings = json!({"url": url, "retry_schedule_ms": [0, 100, 100]});
    let saved = ok!(host, alice, PUT "{WEBHOOK}", settings);
    assert_eq!(saved["retry_schedule_ms"], json!([0, 100, 100]));

    let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
    ok!(host, bob, POST "{path}", {"tag": "staging"});
    receiver.wait_for(3, 10).await;
    let executions = format!("{PROJECT}/automations/tags/executions");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let execution = loop {
        let list = ok!(host, bob, GET "{executions}");
        let first = list["data"][0].clone();
        if first["status"] == "Failed" {
            break first;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failed execution: {list}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        execution["attempts"].as_array().unwrap().len(),
        3,
        "{execution}"
    );
    // The host's schedule would have gone on 150 ms later; nothing comes.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(receiver.received().len(), 3);
}

on_each_store!(a_webhook_that_fails_for_its_disable_after_hours_is_disabled_and_holds_until_saved);
async fn a_webhook_that_fails_for_its_disable_after_hours_is_disabled_and_holds_until_saved() {
    let (receiver, alerts) = (Receiver::start().await, Receiver::start().await);
    receiver.answer(503);
    let host = Host::with_config(CONFIG).await;
    let World { alice, bob, .. } = tagged_to(&host, &receiver).await;
    let hook = json!({"name": "alerts", "url": format!("{}/hook", alerts.base)});
    ok!(host, alice, POST "/v1/teams/ml/webhooks", hook);
    let payload = r#"{"webhook": "${webhook_name}", "reason": "${failure_reason}"}"#;
    let watch = json!({"name": "dead", "event": {"type": "WEBHOOK_DISABLED"},
        "webhook": {"team": "ml", "name": "alerts"}, "action": "Webhooks", "payload": payload});
    ok!(host, alice, POST "/v1/teams/ml/automations", watch);
    let url = format!("{}/hook", receiver.base);
    for hours in [json!(0), json!(-1), json!(9000)] {
        let got = call!(host, alice, PUT "{WEBHOOK}", {"url": url, "disable_after_hours": hours});
        expect_invalid(&got, "disable_after_hours");
    }
    // 3.6 s of failures; attempts every 200 ms, none held by the breaker.
    let settings = json!({"url": url, "access_token_secret": "TOKEN", "signing_secret": "SIGN",
        "disable_after_hours": 0.001, "retry_schedule_ms": vec![200; 30],
        "circuit_breaker": {"enabled": false}});
    let saved = ok!(host, alice, PUT "{WEBHOOK}", (settings.clone()));
    assert_eq!(saved["disable_after_hours"], 0.001);

    let path = format!("{PROJECT}/collections/detector/versions/v0/tags");
    ok!(host, bob, POST "{path}", {"tag": "first"});
    receiver.wait_for(1, 10).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let failing = loop {
        let shown = ok!(host, bob, GET "{WEBHOOK}");
        if let Some(since) = shown["failing_since_ms"].as_u64() {
            break since;
        }
        assert!(std::time::Instant::now() < deadline, "{shown}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // Disabled once failing for its hours: its team hears of it once.
    let alert = alerts.wait_for(1, 15).await[0].json();
    assert_eq!(alert["webhook"], "ci", "{alert}");
    let reason = alert["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("since unix ms {failing}"))
            && reason.contains("disable_after_hours"),
        "{reason}"
    );
    let shown = ok!(host, bob, GET "{WEBHOOK}");
    assert_eq!(shown["disabled_reason"], reason, "{shown}");
    assert!(
        shown.get("failing_since_ms").is_none(),
        "counted afresh: {shown}"
    );
    let attempts = receiver.received().len();
    assert!(attempts >= 10, "attempts for 3.6 s: {attempts}");

    // Held, not failed: the first delivery and one fired since.
    ok!(host, bob, POST "{path}", {"tag": "second"});
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.received().len(), attempts, "nothing goes to it");
    let executions = format!("{PROJECT}/automations/tags/executions");
    let list = ok!(host, bob, GET "{executions}");
    let states: Vec<&Value> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["status"])
        .collect();
    assert_eq!(states, [&json!("Pending"), &json!("Pending")], "{list}");
    assert_eq!(list["data"][0]["attempts"], json!([]), "{list}");

    // Saving it sends both at once, each once.
    receiver.answer(200);
    let saved = ok!(host, alice, PUT "{WEBHOOK}", settings);
    assert!(saved.get("disabled_reason").is_none(), "{saved}");
    let got = receiver.wait_for(attempts + 2, 5).await;
    let mut tags: Vec<String> = got[attempts..]
        .iter()
        .map(|r| r.json()["tag"].as_str().unwrap().to_string())
        .collect();
    tags.sort();
    assert_eq!(tags, ["first", "second"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let list = loop {
        let list = ok!(host, bob, GET "{executions}");
        if list["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["status"] == "Finished")
        {
            break list;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        list["data"][0]["attempts"].as_array().unwrap().len(),
        1,
        "{list}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), attempts + 2);
    assert_eq!(alerts.received().len(), 1, "one alert");
}
