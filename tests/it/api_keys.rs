//! `/v1/me` and API keys: created once, stored hashed, revocable.

use serde_json::json;
use sha2::Digest;

use crate::harness::{
    Host, OPERATOR_KEY, assert_error_shape, expect_error, into_parts, listed, raw_records,
};

on_each_store!(requests_without_a_valid_key_get_401_with_a_body);
async fn requests_without_a_valid_key_get_401_with_a_body() {
    let host = Host::start().await;
    for auth in [None, Some("Bearer sy_not_a_key"), Some("Basic abc")] {
        let mut request = host.http.get(host.url("/v1/me"));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let (status, body) = into_parts(response).await;
        expect_error(&(status, body.clone()), 401, "invalid_api_key", None);
        let error = assert_error_shape(&body);
        assert_eq!(error["type"], "authentication_error");
    }
}

on_each_store!(a_key_is_shown_once_works_and_stops_working_when_revoked);
async fn a_key_is_shown_once_works_and_stops_working_when_revoked() {
    let host = Host::start().await;
    let (status, me) = host.get("/v1/me").await;
    assert_eq!(status, 200);
    assert_eq!(me["operator"], true);

    let (status, created) = host.post("/v1/me/api-keys", &json!({"name": "ci"})).await;
    assert_eq!(status, 201, "{created}");
    let key = created["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("sy_"), "{key}");
    assert!(key.starts_with(created["prefix"].as_str().unwrap()));

    let as_new = |path: &str| host.http.get(host.url(path)).bearer_auth(&key).send();
    let (status, me_again) = into_parts(as_new("/v1/me").await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(me_again["id"], me["id"]);

    let (_, list) = host.get("/v1/me/api-keys").await;
    let names = listed(&list, "name");
    assert_eq!(names, ["bootstrap", "ci"]);
    assert!(
        !list.to_string().contains(&key),
        "a listing must never show a key"
    );

    let id = created["id"].as_str().unwrap();
    assert_eq!(host.delete(&format!("/v1/me/api-keys/{id}")).await.0, 204);
    let answer = into_parts(as_new("/v1/me").await.unwrap()).await;
    expect_error(&answer, 401, "invalid_api_key", None);

    let (status, body) = host.delete(&format!("/v1/me/api-keys/{id}")).await;
    expect_error(&(status, body.clone()), 404, "not_found", None);
    assert_error_shape(&body);
}

on_each_store!(keys_are_not_stored_in_plain_text);
async fn keys_are_not_stored_in_plain_text() {
    let mut host = Host::start().await;
    let (_, created) = host.post("/v1/me/api-keys", &json!({"name": "ci"})).await;
    let key = created["key"].as_str().unwrap().to_string();
    let status = host.terminate().await;
    assert!(status.success(), "{status}\n{}", host.log());

    let records = raw_records(&host).await;
    for secret in [key.as_str(), OPERATOR_KEY] {
        let hashed = hex::encode(sha2::Sha256::digest(secret.as_bytes()));
        assert!(
            records.iter().any(|r| r.contains(hashed.as_bytes())),
            "the key's SHA-256 is what identifies it in the store"
        );
        if let Some(r) = records.iter().find(|r| r.contains(secret.as_bytes())) {
            panic!("a key is stored in plain text in a {} record", r.kind);
        }
    }
}
