//! Team webhooks: lifecycle, roles, secret references and the SSRF guard.

use serde_json::json;

use crate::harness::{Host, assert_error_shape};

/// A host whose operator allows loopback targets, with alice (admin of `ml`,
/// holding secrets TOKEN and SIGN), bob (member) and eve (outsider).
async fn setup(config: &str) -> (Host, String, String, String) {
    let host = Host::builder().config(config).start();
    let (alice, bob, eve) = (
        host.create_user("alice").await,
        host.create_user("bob").await,
        host.create_user("eve").await,
    );
    host.call("POST", "/v1/teams", &alice, Some(&json!({"name": "ml"})))
        .await;
    host.call(
        "PUT",
        "/v1/teams/ml/members/bob",
        &alice,
        Some(&json!({"role": "member"})),
    )
    .await;
    for name in ["TOKEN", "SIGN"] {
        let (status, _) = host
            .call(
                "PUT",
                &format!("/v1/teams/ml/secrets/{name}"),
                &alice,
                Some(&json!({"value": "v"})),
            )
            .await;
        assert_eq!(status, 201);
    }
    (host, alice, bob, eve)
}

const LOOPBACK: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]";

#[tokio::test]
async fn webhook_lifecycle_with_roles_and_secret_references() {
    let (host, alice, bob, eve) = setup(LOOPBACK).await;
    let hook = json!({"name": "ci", "url": "http://127.0.0.1:9/hook", "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    let (status, created) = host
        .call("POST", "/v1/teams/ml/webhooks", &alice, Some(&hook))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["access_token_secret"], "TOKEN");
    let (status, _) = host
        .call("POST", "/v1/teams/ml/webhooks", &alice, Some(&hook))
        .await;
    assert_eq!(status, 409);

    let (status, list) = host.call("GET", "/v1/teams/ml/webhooks", &bob, None).await;
    assert_eq!(status, 200);
    assert_eq!(list["data"][0]["name"], "ci");
    let (status, body) = host
        .call(
            "POST",
            "/v1/teams/ml/webhooks",
            &bob,
            Some(&json!({"name": "b", "url": "http://127.0.0.1:9/"})),
        )
        .await;
    assert_eq!(status, 403, "{body}");
    for path in ["/v1/teams/ml/webhooks", "/v1/teams/ml/webhooks/ci"] {
        let (status, _) = host.call("GET", path, &eve, None).await;
        assert_eq!(status, 404, "{path}");
    }

    let settings = json!({"url": "http://127.0.0.1:10/other", "access_token_secret": "TOKEN"});
    let (status, updated) = host
        .call("PUT", "/v1/teams/ml/webhooks/ci", &alice, Some(&settings))
        .await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["url"], "http://127.0.0.1:10/other");
    assert_eq!(updated["signing_secret"], serde_json::Value::Null);

    for (settings, param) in [
        (
            json!({"url": "http://127.0.0.1:9/", "access_token_secret": "MISSING"}),
            "access_token_secret",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "access_token_secret": "TOKEN", "signing_secret": "TOKEN"}),
            "signing_secret",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "colour": "red"}),
            "colour",
        ),
    ] {
        let (status, body) = host
            .call("PUT", "/v1/teams/ml/webhooks/ci", &alice, Some(&settings))
            .await;
        assert_eq!(status, 400, "{settings}: {body}");
        let error = assert_error_shape(&body);
        assert!(
            error["param"] == param || error["message"].as_str().unwrap().contains(param),
            "{body}"
        );
    }

    // A secret in use is not deleted by accident.
    let (status, body) = host
        .call("DELETE", "/v1/teams/ml/secrets/TOKEN", &alice, None)
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("ci"),
        "names the webhook: {body}"
    );
    let (status, _) = host
        .call(
            "DELETE",
            "/v1/teams/ml/secrets/TOKEN?force=true",
            &alice,
            None,
        )
        .await;
    assert_eq!(status, 204);

    let (status, _) = host
        .call("DELETE", "/v1/teams/ml/webhooks/ci", &alice, None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = host
        .call("GET", "/v1/teams/ml/webhooks/ci", &alice, None)
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn internal_targets_are_refused_unless_the_operator_allows_them() {
    let (host, alice, ..) = setup("").await;
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.5/",
        "http://[::1]/",
    ] {
        let (status, body) = host
            .call(
                "POST",
                "/v1/teams/ml/webhooks",
                &alice,
                Some(&json!({"name": "x", "url": url})),
            )
            .await;
        assert_eq!(status, 400, "{url}: {body}");
        let error = assert_error_shape(&body);
        assert_eq!(error["param"], "url");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("internal address"),
            "{body}"
        );
    }
    let (status, body) = host
        .call(
            "POST",
            "/v1/teams/ml/webhooks",
            &alice,
            Some(&json!({"name": "x", "url": "ftp://example.com/"})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = host
        .call(
            "POST",
            "/v1/teams/ml/webhooks",
            &alice,
            Some(&json!({"name": "public", "url": "https://hooks.example.com/services/T0"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}
