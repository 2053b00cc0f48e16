//! Anthropic's Messages API through the stock `anthropic` SDK: whole and
//! streamed, tools, count_tokens and its error classes; and the same keys,
//! usage and `x-api-key` as chat.

use serde_json::json;

use crate::gateway::scoped_key;
use crate::upstream::{fake_upstream, upstream_host};

on_each_store!(the_stock_anthropic_sdk_speaks_messages_through_any_backend);
async fn the_stock_anthropic_sdk_speaks_messages_through_any_backend() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let alice = host.create_user("alice").await;
    let limited = scoped_key(&host, &alice, json!({"rpm": 1})).await;
    let other = scoped_key(&host, &alice, json!({"models": ["fake-1"]})).await;
    let python = crate::harness::python_venv("anthropic-venv", &["anthropic==0.*"]);
    let base = host.base.clone();
    let args = [
        base.as_str(),
        &alice,
        &limited,
        &other,
        "fake-1",
        "fake-tools",
    ];
    crate::harness::run_client_script(python, "anthropic_client.py", &args).await;

    // The same usage as chat, under the key that asked.
    let (_, usage) = call!(host, alice, GET "/v1/me/usage");
    assert!(
        usage["by_model"]["fake-1"]["requests"].as_u64().unwrap() >= 3,
        "{usage}"
    );
    assert!(
        usage["by_model"]["fake-tools"]["requests"]
            .as_u64()
            .unwrap()
            >= 3,
        "{usage}"
    );

    // x-api-key and Bearer both sign in; errors are Anthropic's shape.
    let response = host
        .http
        .post(host.url("/v1/messages"))
        .header("x-api-key", &alice)
        .json(&json!({"model": "fake-1", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens"),
        "{body}"
    );
    let (status, body) = host
        .call(
            "POST",
            "/v1/messages",
            &alice,
            Some(&json!({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["type"], "not_found_error", "{body}");
}
