//! `GET /v1/system-check`.

use serde_json::{Value, json};

use crate::harness::{Host, OPERATOR_KEY, expect_error};

fn assert_check(body: &Value, name: &str, success: bool) {
    let check = &body[name];
    assert_eq!(check["success"], success, "{name}: {body}");
    assert!(
        check["duration_ms"].as_f64().is_some_and(|d| d >= 0.0),
        "{name}: {body}"
    );
    let errors = check["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}.errors: {body}"));
    assert_eq!(errors.is_empty(), success, "{name}: {body}");
}

on_each_store!(system_check_passes_without_auth);
async fn system_check_passes_without_auth() {
    let host = Host::start().await;
    let response = host.raw("GET", "/v1/system-check").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["api"], true);
    for name in ["database", "cpu_queue", "gpu_queue"] {
        assert_check(&body, name, true);
    }
}

on_each_store!(a_stalled_queue_fails_the_check_with_503_and_the_same_body);
async fn a_stalled_queue_fails_the_check_with_503_and_the_same_body() {
    // No workers: probe jobs are queued but never run, so the probe times out.
    let host = Host::with_config(
        "[queues.plugin]\nworkers = 0\ncapacity = 16\n[health]\nprobe_timeout_ms = 300",
    )
    .await;
    let response = host.raw("GET", "/v1/system-check").await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["api"], true);
    assert_check(&body, "database", true);
    assert_check(&body, "gpu_queue", true);
    assert_check(&body, "cpu_queue", false);
    let error = body["cpu_queue"]["errors"][0].as_str().unwrap();
    assert!(error.contains("300 ms"), "{error}");
    assert!(
        body["cpu_queue"]["duration_ms"].as_f64().unwrap() >= 300.0,
        "{body}"
    );
    // Operators see the failure in the log (written just after the answer,
    // so wait for it), and the queue's misconfiguration at start.
    host.wait_for_log(&["system check failed"]).await;
    host.wait_for_log(&["queue has no workers"]).await;
}

on_each_store!(a_full_inference_queue_fails_the_gpu_check);
async fn a_full_inference_queue_fails_the_gpu_check() {
    let host = Host::with_config(
        "[queues.inference]\nworkers = 0\ncapacity = 1\n[health]\nprobe_timeout_ms = 200",
    )
    .await;
    // The first check fills the one slot; the second is refused at once.
    let (first, _) = host.get_anon("/v1/system-check").await;
    assert_eq!(first, 503);
    let (status, body) = host.get_anon("/v1/system-check").await;
    assert_eq!(status, 503, "{body}");
    let error = body["gpu_queue"]["errors"][0].as_str().unwrap();
    assert!(error.contains("queue is full"), "{error}");
}

on_each_store!(a_missing_model_fails_the_gpu_check_and_leaves_the_rest_serving);
async fn a_missing_model_fails_the_gpu_check_and_leaves_the_rest_serving() {
    let host = Host::with_config(
        "[inference]\nauto_pull = false\nmodel_path = \"/nonexistent/model.gguf\"",
    )
    .await;
    let (status, body) = host.get_anon("/v1/system-check").await;
    assert_eq!(status, 503, "{body}");
    assert_check(&body, "database", true);
    assert_check(&body, "cpu_queue", true);
    assert_check(&body, "gpu_queue", false);
    let error = body["gpu_queue"]["errors"][0].as_str().unwrap();
    assert!(error.contains("model pull"), "says what to run: {error}");
    // Chat is unavailable and says why; the rest of the API serves.
    let chat =
        json!({"model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "hi"}]});
    let answer = call!(host, OPERATOR_KEY, POST "/v1/chat/completions", chat);
    expect_error(&answer, 503, "unavailable", None);
    let (status, team) = host.post("/v1/teams", &json!({"name": "ml"})).await;
    assert_eq!(status, 201, "{team}");
}
