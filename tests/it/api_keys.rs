//! `/v1/me` and API keys: created once, stored hashed, revocable.

use serde_json::json;

use crate::harness::{Host, OPERATOR_KEY, assert_error_shape, into_parts};

#[tokio::test]
async fn requests_without_a_valid_key_get_401_with_a_body() {
    let host = Host::start();
    for auth in [None, Some("Bearer sy_not_a_key"), Some("Basic abc")] {
        let mut request = host.http.get(host.url("/v1/me"));
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let (status, body) = into_parts(response).await;
        assert_eq!(status, 401, "{auth:?}");
        let error = assert_error_shape(&body);
        assert_eq!(error["type"], "authentication_error");
    }
}

#[tokio::test]
async fn a_key_is_shown_once_works_and_stops_working_when_revoked() {
    let host = Host::start();
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
    let names: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bootstrap", "ci"]);
    assert!(
        !list.to_string().contains(&key),
        "a listing must never show a key"
    );

    let id = created["id"].as_str().unwrap();
    assert_eq!(host.delete(&format!("/v1/me/api-keys/{id}")).await.0, 204);
    let (status, _) = into_parts(as_new("/v1/me").await.unwrap()).await;
    assert_eq!(status, 401);

    let (status, body) = host.delete(&format!("/v1/me/api-keys/{id}")).await;
    assert_eq!(status, 404);
    assert_error_shape(&body);
}

#[tokio::test]
async fn keys_are_not_stored_in_plain_text() {
    let mut host = Host::start();
    let (_, created) = host.post("/v1/me/api-keys", &json!({"name": "ci"})).await;
    let key = created["key"].as_str().unwrap().to_string();
    let data_dir = host.data_dir.clone();
    let status = host.terminate();
    assert!(status.success(), "{status}\n{}", host.log());

    let db = sled::open(data_dir.join("db")).unwrap();
    assert_eq!(
        db.open_tree("api_keys").unwrap().len(),
        2,
        "both keys' records are in the store"
    );
    for name in db.tree_names() {
        for item in db.open_tree(&name).unwrap().iter() {
            let (k, v) = item.unwrap();
            for secret in [key.as_bytes(), OPERATOR_KEY.as_bytes()] {
                let found = |bytes: &[u8]| bytes.windows(secret.len()).any(|w| w == secret);
                assert!(
                    !found(&k) && !found(&v),
                    "a key is stored in plain text in tree {name:?}"
                );
            }
        }
    }
}
