//! Team webhooks: lifecycle, roles, secret references, the SSRF guard and
//! the webhook test against a real receiver.

use serde_json::{Value, json};

use crate::harness::{Host, assert_error_shape, expect_error, expect_invalid, raw_records};
use crate::receiver::{Receiver, closed_port, expected_signature};
use crate::world::World;

/// A host with the shared world without its webhook: alice (admin of
/// `ml`, holding secrets TOKEN, SIGN and SPARE), bob (member) and eve
/// (outsider).
async fn setup(config: &str) -> (Host, String, String, String) {
    let host = Host::with_config(config).await;
    let world = World::build(&host, None).await;
    (host, world.alice, world.bob, world.eve)
}

const LOOPBACK: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]";

on_each_store!(webhook_lifecycle_with_roles_and_secret_references);
async fn webhook_lifecycle_with_roles_and_secret_references() {
    let (host, alice, bob, eve) = setup(LOOPBACK).await;
    let hook = json!({"name": "ci", "url": "http://127.0.0.1:9/hook", "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    let (status, created) = call!(host, alice, POST "/v1/teams/ml/webhooks", hook);
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["access_token_secret"], "TOKEN");
    let answer = call!(host, alice, POST "/v1/teams/ml/webhooks", hook);
    expect_error(&answer, 409, "conflict", None);

    let (status, list) = call!(host, bob, GET "/v1/teams/ml/webhooks");
    assert_eq!(status, 200);
    assert_eq!(list["data"][0]["name"], "ci");
    let (status, body) =
        call!(host, bob, POST "/v1/teams/ml/webhooks", {"name": "b", "url": "http://127.0.0.1:9/"});
    expect_error(&(status, body.clone()), 403, "permission_denied", None);
    for path in ["/v1/teams/ml/webhooks", "/v1/teams/ml/webhooks/ci"] {
        let answer = call!(host, eve, GET "{path}");
        expect_error(&answer, 404, "not_found", None);
    }

    let settings = json!({"url": "http://127.0.0.1:10/other", "access_token_secret": "TOKEN"});
    let (status, updated) = call!(host, alice, PUT "/v1/teams/ml/webhooks/ci", settings);
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["url"], "http://127.0.0.1:10/other");
    assert_eq!(updated["signing_secret"], serde_json::Value::Null);

    for (settings, code, param) in [
        (
            json!({"url": "http://127.0.0.1:9/", "access_token_secret": "MISSING"}),
            "invalid_request",
            "access_token_secret",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "access_token_secret": "TOKEN", "signing_secret": "TOKEN"}),
            "invalid_request",
            "signing_secret",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "colour": "red"}),
            "invalid_json",
            "colour",
        ),
    ] {
        let answer = call!(host, alice, PUT "/v1/teams/ml/webhooks/ci", settings);
        expect_error(&answer, 400, code, Some(param));
    }

    // A secret in use is not deleted by accident.
    let (status, body) = call!(host, alice, DELETE "/v1/teams/ml/secrets/TOKEN");
    expect_error(&(status, body.clone()), 409, "conflict", None);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("ci"),
        "names the webhook: {body}"
    );
    let (status, _) = call!(host, alice, DELETE "/v1/teams/ml/secrets/TOKEN?force=true");
    assert_eq!(status, 204);

    let (status, _) = call!(host, alice, DELETE "/v1/teams/ml/webhooks/ci");
    assert_eq!(status, 204);
    let answer = call!(host, alice, GET "/v1/teams/ml/webhooks/ci");
    expect_error(&answer, 404, "not_found", None);
}

on_each_store!(internal_targets_are_refused_unless_the_operator_allows_them);
async fn internal_targets_are_refused_unless_the_operator_allows_them() {
    let (host, alice, ..) = setup("").await;
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.5/",
        "http://[::1]/",
    ] {
        let (status, body) =
            call!(host, alice, POST "/v1/teams/ml/webhooks", {"name": "x", "url": url});
        expect_invalid(&(status, body.clone()), "url");
        let error = assert_error_shape(&body);
        assert_eq!(error["param"], "url");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("is an internal"),
            "{body}"
        );
    }
    let long = format!("https://example.com/{}", "a".repeat(3000));
    for url in ["ftp://example.com/", "not a url", "", long.as_str()] {
        let (status, body) =
            call!(host, alice, POST "/v1/teams/ml/webhooks", {"name": "x", "url": url});
        expect_invalid(&(status, body.clone()), "url");
        assert_eq!(assert_error_shape(&body)["param"], "url");
    }
    let (status, body) = call!(host, alice, POST "/v1/teams/ml/webhooks", {"name": "public", "url": "https://hooks.example.com/services/T0"});
    assert_eq!(status, 201, "{body}");
}

on_each_store!(allowing_loopback_opens_loopback_and_nothing_else);
async fn allowing_loopback_opens_loopback_and_nothing_else() {
    let (host, alice, ..) = setup(LOOPBACK).await;
    let refused = [
        "http://api.localhost/hook",
        "http://localhost.localhost/",
        "http://printer.local/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://db.internal./",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://[::1]/",
        "http://198.18.0.1/",
        "http://240.0.0.1/",
        "http://[fec0::1]/",
        "http://10.0.0.5/",
    ];
    for (i, url) in refused.iter().enumerate() {
        let body = json!({"name": format!("r{i}"), "url": url});
        let (status, body) = call!(host, alice, POST "/v1/teams/ml/webhooks", body);
        expect_invalid(&(status, body.clone()), "url");
        assert_eq!(assert_error_shape(&body)["param"], "url", "{url}");
    }
    let allowed = [
        "http://localhost:9/hook",
        "http://127.0.0.1:9/",
        "http://2130706433:9/",
        "http://[::ffff:127.0.0.1]:9/",
    ];
    for (i, url) in allowed.iter().enumerate() {
        let body = json!({"name": format!("a{i}"), "url": url});
        let (status, body) = call!(host, alice, POST "/v1/teams/ml/webhooks", body);
        assert_eq!(status, 201, "{url}: {body}");
    }
}

on_each_store!(a_redirect_to_a_refused_address_is_not_followed);
async fn a_redirect_to_a_refused_address_is_not_followed() {
    let receiver = Receiver::start().await;
    let metadata = Receiver::start().await;
    receiver.redirect_to("http://169.254.169.254/latest/meta-data");
    let (host, alice, _) = hook_to(&format!("{}/hook", receiver.base)).await;
    let (status, outcome) = call!(host, alice, POST "/v1/teams/ml/webhooks/ci/test", {});
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["success"], false, "{outcome}");
    assert_eq!(outcome["response"]["status"], 307, "{outcome}");
    assert_eq!(receiver.received().len(), 1, "one request, not followed");
    // Even a redirect to an allowed loopback receiver is not followed.
    receiver.redirect_to(&format!("{}/elsewhere", metadata.base));
    call!(host, alice, POST "/v1/teams/ml/webhooks/ci/test", {});
    assert_eq!(receiver.received().len(), 2);
    assert!(metadata.received().is_empty(), "the redirect was followed");
}

/// [`setup`] on loopback plus webhook `ci` (TOKEN, SIGN) pointing at `url`.
async fn hook_to(url: &str) -> (Host, String, String) {
    let (host, alice, bob, _) = setup(LOOPBACK).await;
    let hook =
        json!({"name": "ci", "url": url, "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    let (status, body) = call!(host, alice, POST "/v1/teams/ml/webhooks", hook);
    assert_eq!(status, 201, "{body}");
    (host, alice, bob)
}

on_each_store!(webhook_test_is_signed_and_authorised_like_a_delivery);
async fn webhook_test_is_signed_and_authorised_like_a_delivery() {
    let receiver = Receiver::start().await;
    let (host, alice, bob) = hook_to(&format!("{}/hook", receiver.base)).await;

    let payload = json!({"payload": r#"{"text": "signed with $SIGN", "auth": "${ACCESS_TOKEN}", "cost": "$5"}"#});
    let (status, body) = call!(host, bob, POST "/v1/teams/ml/webhooks/ci/test", payload);
    expect_error(&(status, body.clone()), 403, "permission_denied", None);
    let (status, outcome) = call!(host, alice, POST "/v1/teams/ml/webhooks/ci/test", payload);
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["success"], true, "{outcome}");
    assert_eq!(outcome["response"]["status"], 200);
    assert_eq!(outcome["response"]["body"], "ok");
    let headers = outcome["response"]["headers"].as_array().unwrap();
    assert!(
        headers.contains(&json!(["x-receiver", "test"])),
        "{outcome}"
    );

    let got = receiver.wait_for(1, 5).await;
    assert_eq!(got.len(), 1);
    let request = &got[0];
    assert_eq!(request.header("authorization"), Some("Bearer tok-1"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(
        request.header("x-service-signature").unwrap(),
        expected_signature("sign-1", &request.body)
    );
    assert_eq!(
        request.header("x-service-delivery"),
        outcome["delivery_id"].as_str()
    );
    assert_eq!(
        request.json(),
        json!({"text": "signed with sign-1", "auth": "tok-1", "cost": "$5"})
    );
    let everything = format!("{outcome}{}", host.log());
    for secret in ["tok-123", "sign-456"] {
        assert!(!everything.contains(secret), "{secret} leaked");
    }

    // Without a body a sample payload goes out, signed the same way.
    let response = host
        .http
        .post(host.url("/v1/teams/ml/webhooks/ci/test"))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let got = receiver.wait_for(2, 5).await;
    assert_eq!(got[1].json()["event_type"], "TEST");
    assert_eq!(
        got[1].header("x-service-signature").unwrap(),
        expected_signature("sign-1", &got[1].body)
    );

    // A secret the webhook does not carry, or JSON that breaks, is refused
    // before anything is sent.
    for (payload, needle) in [
        (r#"{"a": "$SPARE"}"#, "does not carry"),
        (r#"{"a": "#, "not valid JSON"),
    ] {
        let (status, body) =
            call!(host, alice, POST "/v1/teams/ml/webhooks/ci/test", {"payload": payload});
        expect_invalid(&(status, body.clone()), "payload");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(needle),
            "{body}"
        );
    }
    assert_eq!(receiver.received().len(), 2);
}

on_each_store!(webhook_test_reports_refusals_and_closed_ports_as_unsuccessful);
async fn webhook_test_reports_refusals_and_closed_ports_as_unsuccessful() {
    let receiver = Receiver::start().await;
    receiver.answer(401);
    let (host, alice, _) = hook_to(&format!("{}/hook", receiver.base)).await;
    let (status, outcome) = call!(host, alice, POST "/v1/teams/ml/webhooks/ci/test");
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["success"], false);
    assert_eq!(outcome["response"]["status"], 401);
    assert!(
        outcome["error"].as_str().unwrap().contains("credentials"),
        "{outcome}"
    );

    let closed = format!("http://127.0.0.1:{}/hook", closed_port());
    let (status, _) = call!(host, alice, PUT "/v1/teams/ml/webhooks/ci", {"url": closed, "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    assert_eq!(status, 200);
    let (status, outcome) = call!(host, alice, POST "/v1/teams/ml/webhooks/ci/test");
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["success"], false);
    assert_eq!(outcome["response"], Value::Null);
    let error = outcome["error"].as_str().unwrap();
    assert!(
        error.contains("could not connect") && error.contains(&closed),
        "{error}"
    );
}

on_each_store!(webhook_test_payloads_are_not_stored);
async fn webhook_test_payloads_are_not_stored() {
    let receiver = Receiver::start().await;
    let (mut host, alice, _) = hook_to(&format!("{}/hook", receiver.base)).await;
    let marker = "marker-5f1d9c-never-stored";
    let (status, outcome) =
        call!(host, alice, POST "/v1/teams/ml/webhooks/ci/test", {"payload": {"note": marker}});
    assert_eq!(
        (status, outcome["success"].clone()),
        (200, json!(true)),
        "{outcome}"
    );
    assert_eq!(receiver.received()[0].json()["note"], marker);
    host.terminate().await;
    if let Some(r) = raw_records(&host)
        .await
        .iter()
        .find(|r| r.contains(marker.as_bytes()))
    {
        panic!("the test payload was stored, in a {} record", r.kind);
    }
}

on_each_store!(the_endpoints_answer_is_shown_cut_at_max_response_bytes);
async fn the_endpoints_answer_is_shown_cut_at_max_response_bytes() {
    let receiver = Receiver::start().await;
    receiver.reply_body(&"0123456789".repeat(10));
    let host = Host::with_config(&format!("{LOOPBACK}\nmax_response_bytes = 16")).await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let (status, outcome) = call!(host, world.alice, POST "/v1/teams/ml/webhooks/ci/test", {});
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["success"], true, "{outcome}");
    assert_eq!(outcome["response"]["body"], "0123456789012345");
    assert_eq!(outcome["response"]["truncated"], true);
    let sent = receiver.wait_for(1, 10).await;
    assert_eq!(
        outcome["delivery_id"].as_str(),
        sent[0].header("x-service-delivery"),
        "the id shown is the one sent"
    );
}
