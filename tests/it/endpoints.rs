//! `POST /v1/embeddings`, `/v1/completions` and `/v1/responses`: passed
//! through to an upstream (the fake one in `upstream.rs`, which answers
//! them here as OpenAI does), and served by the embedded model through
//! chat; under the same keys, limits, usage, metrics and routes as chat.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::harness::{Host, expect_error, expect_invalid, sse_chunks};
use crate::upstream::{Seen, fake_upstream, upstream_host};

/// The vector the fake upstream gives every input.
pub(crate) const VECTOR: [f32; 3] = [0.25, -0.5, 1.0];

/// The fake upstream's `/v1/embeddings`: one [`VECTOR`] per input, as
/// floats or (as the `openai` SDK asks by default) base64; model `broken`
/// fails, and an input of `"too long"` is the client's mistake.
pub(crate) fn embeddings(seen: &Seen, body: Value) -> Response {
    seen.lock()
        .unwrap()
        .push(("embeddings".into(), body.clone(), 0));
    if let Some(failed) = failure(&body) {
        return failed;
    }
    if body["input"] == "too long" {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"message": "input is too long", "type": "invalid_request_error", "param": "input"}})),
        )
            .into_response();
    }
    let inputs = match &body["input"] {
        Value::Array(items) => items.len(),
        _ => 1,
    };
    let vector = if body["encoding_format"] == "base64" {
        let bytes: Vec<u8> = VECTOR.iter().flat_map(|f| f.to_le_bytes()).collect();
        json!(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        json!(VECTOR)
    };
    let data: Vec<Value> = (0..inputs)
        .map(|i| json!({"object": "embedding", "index": i, "embedding": vector}))
        .collect();
    axum::Json(
        json!({"object": "list", "data": data, "model": body["model"],
        "usage": {"prompt_tokens": 4 * inputs, "total_tokens": 4 * inputs}}),
    )
    .into_response()
}

/// The fake upstream's `/v1/completions`: " world", whole or in two chunks
/// (and a usage chunk when asked).
pub(crate) fn completions(seen: &Seen, body: Value) -> Response {
    seen.lock()
        .unwrap()
        .push(("completions".into(), body.clone(), 0));
    if let Some(failed) = failure(&body) {
        return failed;
    }
    let usage = json!({"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7});
    let chunk = |text: &str, finish: Value| {
        json!({"id": "cmpl-up", "object": "text_completion", "created": 1, "model": body["model"],
        "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}]})
    };
    if body["stream"] != true {
        let mut whole = chunk(" world", json!("stop"));
        whole["usage"] = usage;
        return axum::Json(whole).into_response();
    }
    let mut events = vec![chunk(" wor", Value::Null), chunk("ld", json!("stop"))];
    if body["stream_options"]["include_usage"] == true {
        let mut last = chunk("", Value::Null);
        last["choices"] = json!([]);
        last["usage"] = usage;
        events.push(last);
    }
    let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    ([("content-type", "text/event-stream")], text).into_response()
}

/// The fake upstream's `/v1/responses`: "Hi there", whole or as OpenAI's
/// event stream (named events, usage in `response.completed`).
pub(crate) fn responses(seen: &Seen, body: Value) -> Response {
    seen.lock()
        .unwrap()
        .push(("responses".into(), body.clone(), 0));
    if let Some(failed) = failure(&body) {
        return failed;
    }
    let part = json!({"type": "output_text", "text": "Hi there", "annotations": []});
    let item = json!({"type": "message", "id": "msg_up", "status": "completed", "role": "assistant", "content": [part]});
    let response = json!({"id": "resp_up", "object": "response", "created_at": 1, "status": "completed",
        "model": body["model"], "output": [item], "error": null, "incomplete_details": null,
        "instructions": null, "metadata": {}, "parallel_tool_calls": true, "temperature": null,
        "tool_choice": "auto", "tools": [], "top_p": null,
        "usage": {"input_tokens": 9, "output_tokens": 4, "total_tokens": 13,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}});
    if body["stream"] != true {
        return axum::Json(response).into_response();
    }
    let mut started = response.clone();
    started["status"] = json!("in_progress");
    started["output"] = json!([]);
    started["usage"] = Value::Null;
    let at = json!({"item_id": "msg_up", "output_index": 0, "content_index": 0});
    let with = |extra: Value| {
        let mut v = at.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let events = [
        ("response.created", json!({"response": started})),
        (
            "response.output_item.added",
            json!({"output_index": 0, "item": {"type": "message", "id": "msg_up", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        (
            "response.content_part.added",
            with(json!({"part": {"type": "output_text", "text": "", "annotations": []}})),
        ),
        ("response.output_text.delta", with(json!({"delta": "Hi "}))),
        (
            "response.output_text.delta",
            with(json!({"delta": "there"})),
        ),
        (
            "response.output_text.done",
            with(json!({"text": "Hi there"})),
        ),
        ("response.content_part.done", with(json!({"part": part}))),
        (
            "response.output_item.done",
            json!({"output_index": 0, "item": item}),
        ),
        ("response.completed", json!({"response": response})),
    ];
    let text: String = events
        .iter()
        .enumerate()
        .map(|(i, (name, data))| {
            let mut data = data.clone();
            data["type"] = json!(name);
            data["sequence_number"] = json!(i);
            format!("event: {name}\ndata: {data}\n\n")
        })
        .collect();
    ([("content-type", "text/event-stream")], text).into_response()
}

/// The fake upstream's failing models, on every endpoint.
fn failure(body: &Value) -> Option<Response> {
    match body["model"].as_str() {
        Some("broken") => Some(
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"error": {"message": "upstream exploded"}})),
            )
                .into_response(),
        ),
        _ => None,
    }
}

/// What the upstream got at `endpoint`, last first.
fn bodies(seen: &Seen, endpoint: &str) -> Vec<Value> {
    let seen = seen.lock().unwrap();
    seen.iter()
        .rev()
        .filter(|(what, _, _)| what == endpoint)
        .map(|(_, body, _)| body.clone())
        .collect()
}

/// Posts `body` to `path`: status, headers and the body's text.
async fn post(
    host: &Host,
    key: &str,
    path: &str,
    body: &Value,
) -> (u16, axum::http::HeaderMap, String) {
    let response = host
        .http
        .post(host.url(path))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

/// Posts `body` to `path`, which must answer 200; the body's text.
async fn ok_text(host: &Host, key: &str, path: &str, body: &Value) -> String {
    let (status, _, text) = post(host, key, path, body).await;
    assert_eq!(status, 200, "{path}: {text}");
    text
}

/// The same, the body parsed.
async fn ok(host: &Host, key: &str, path: &str, body: &Value) -> Value {
    let text = ok_text(host, key, path, body).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// Posts `body` to `path` expecting a refusal: the status and the parsed
/// error body.
async fn refusal(host: &Host, key: &str, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, text) = post(host, key, path, body).await;
    parsed(status, &text)
}

fn parsed(status: u16, text: &str) -> (u16, Value) {
    (status, serde_json::from_str(text).unwrap_or(json!(text)))
}

/// The `data:` of a Responses event stream (which has no `[DONE]`).
fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap_or_else(|e| panic!("bad event {d}: {e}")))
        .collect()
}

/// The `event:` names of a server-sent event stream, in order.
fn event_names(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("event:"))
        .map(str::trim)
        .collect()
}

on_each_store!(the_three_endpoints_pass_through_to_an_upstream_with_usage_counted);
async fn the_three_endpoints_pass_through_to_an_upstream_with_usage_counted() {
    let (upstream, seen) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let alice = host.create_user("alice").await;

    let body = ok(
        &host,
        &alice,
        "/v1/embeddings",
        &json!({"model": "fake-1", "input": ["a", "b"], "dimensions": 3}),
    )
    .await;
    assert_eq!(body["data"][1]["embedding"], json!(VECTOR));
    assert_eq!(body["usage"]["prompt_tokens"], 8);
    let sent = &bodies(&seen, "embeddings")[0];
    assert_eq!(sent["model"], "upstream-model", "the upstream's id");
    assert_eq!(sent["dimensions"], 3, "unread fields pass as they came");

    let body = ok(
        &host,
        &alice,
        "/v1/completions",
        &json!({"model": "fake-1", "prompt": "Hello", "max_tokens": 3}),
    )
    .await;
    assert_eq!(body["choices"][0]["text"], " world");

    // Streamed without asking for usage: the host asks the upstream for it
    // (to count it) and keeps the usage chunk from the client.
    let text = ok_text(
        &host,
        &alice,
        "/v1/completions",
        &json!({"model": "fake-1", "prompt": "Hello", "stream": true}),
    )
    .await;
    let chunks = sse_chunks(&text);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, " world");
    assert!(chunks.iter().all(|c| c["usage"].is_null()), "{text}");
    assert_eq!(
        bodies(&seen, "completions")[0]["stream_options"]["include_usage"],
        true
    );

    let body = ok(
        &host,
        &alice,
        "/v1/responses",
        &json!({"model": "fake-1", "input": "Hi", "tools": [{"type": "web_search"}]}),
    )
    .await;
    assert_eq!(body["output"][0]["content"][0]["text"], "Hi there");
    assert_eq!(
        bodies(&seen, "responses")[0]["tools"][0]["type"],
        "web_search",
        "an upstream gets the tools"
    );

    let (status, headers, text) = post(
        &host,
        &alice,
        "/v1/responses",
        &json!({"model": "fake-1", "input": "Hi", "stream": true}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let names = event_names(&text);
    assert_eq!(names.first(), Some(&"response.created"), "{text}");
    assert_eq!(names.last(), Some(&"response.completed"), "{text}");
    let deltas: String = events(&text)
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(deltas, "Hi there");

    // Usage: 8 (embeddings) + 7 + 7 (completions) + 13 + 13 (responses).
    let (_, usage) = call!(host, alice, GET "/v1/me/usage");
    assert_eq!(usage["total"]["requests"], 5, "{usage}");
    assert_eq!(usage["total"]["total_tokens"], 48, "{usage}");
    assert_eq!(usage["total"]["prompt_tokens"], 8 + 10 + 18, "{usage}");

    let metrics = crate::metrics::scrape(&host).await;
    for (endpoint, count) in [
        ("embeddings", 1.0),
        ("completions", 2.0),
        ("responses", 2.0),
    ] {
        let labels = [
            ("endpoint", endpoint),
            ("model", "fake-1"),
            ("status", "200"),
        ];
        assert_eq!(
            crate::metrics::sample(&metrics, "switchyard_inference_requests_total", &labels),
            Some(count),
            "{endpoint}"
        );
    }
    let first_tokens = crate::metrics::sample(
        &metrics,
        "switchyard_inference_time_to_first_token_seconds_count",
        &[("model", "fake-1")],
    );
    assert_eq!(first_tokens, Some(2.0), "the two streams");
}

on_each_store!(upstream_errors_keep_their_meaning_and_bad_requests_are_refused);
async fn upstream_errors_keep_their_meaning_and_bad_requests_are_refused() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let alice = host.create_user("alice").await;

    // The upstream's 400 is the client's to fix: a 400, not a 502 that
    // SDKs would retry.
    let answer = refusal(
        &host,
        &alice,
        "/v1/embeddings",
        &json!({"model": "fake-1", "input": "too long"}),
    )
    .await;
    let message = expect_error(&answer, 400, "invalid_request", None)["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("input is too long"), "{message}");

    let answer = refusal(
        &host,
        &alice,
        "/v1/responses",
        &json!({"model": "fake-broken", "input": "Hi", "stream": true}),
    )
    .await;
    let message = expect_error(&answer, 502, "upstream_error", None)["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("upstream exploded"), "{message}");

    for (path, body, param) in [
        ("/v1/embeddings", json!({"input": "x"}), "model"),
        (
            "/v1/embeddings",
            json!({"model": "fake-1", "input": "x", "stream": true}),
            "stream",
        ),
        (
            "/v1/completions",
            json!({"model": "fake-1", "prompt": "x", "stream": "yes"}),
            "stream",
        ),
    ] {
        expect_invalid(&refusal(&host, &alice, path, &body).await, param);
    }
    let answer = refusal(
        &host,
        &alice,
        "/v1/completions",
        &json!({"model": "nope", "prompt": "x"}),
    )
    .await;
    expect_error(&answer, 404, "model_not_found", Some("model"));
    let response = host
        .http
        .post(host.url("/v1/responses"))
        .json(&json!({"model": "fake-1", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401, "a key is needed");
}

on_each_store!(keys_limits_and_routes_hold_for_the_other_endpoints);
async fn keys_limits_and_routes_hold_for_the_other_endpoints() {
    let (good, _) = fake_upstream().await;
    let routes = r#"[[inference.upstreams]]
name = "also"
base_url = "http://GOOD/v1"
api_key_env = "FAKE_KEY"
models = ["also-broken=broken"]
[[inference.routes]]
model = "embed"
deployments = [{ model = "also-broken", name = "east" }, { model = "fake-1", name = "west" }]
"#
    .replace("GOOD", &good);
    let host = upstream_host(&good, &routes).start().await;
    let alice = host.create_user("alice").await;

    let (status, headers, text) = post(
        &host,
        &alice,
        "/v1/embeddings",
        &json!({"model": "embed", "input": "x"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        headers["x-switchyard-deployment"], "west",
        "east answered 500"
    );

    let (status, created) = host
        .call(
            "POST",
            "/v1/me/api-keys",
            &alice,
            Some(&json!({"name": "narrow", "models": ["embed"], "rpm": 2})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let key = created["key"].as_str().unwrap();
    let answer = refusal(
        &host,
        key,
        "/v1/completions",
        &json!({"model": "fake-1", "prompt": "x"}),
    )
    .await;
    expect_error(&answer, 403, "permission_denied", Some("model"));
    let (status, headers, text) = post(
        &host,
        key,
        "/v1/embeddings",
        &json!({"model": "embed", "input": "x"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["x-ratelimit-limit-requests"], "2");
    assert_eq!(headers["x-ratelimit-remaining-requests"], "1");
    post(
        &host,
        key,
        "/v1/embeddings",
        &json!({"model": "embed", "input": "x"}),
    )
    .await;
    let (status, headers, text) = post(
        &host,
        key,
        "/v1/embeddings",
        &json!({"model": "embed", "input": "x"}),
    )
    .await;
    let (status, body) = parsed(status, &text);
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "rate_limit_exceeded", "{body}");
    assert!(headers.contains_key("retry-after"));
}

on_each_store!(the_embedded_model_completes_and_responds_but_does_not_embed);
async fn the_embedded_model_completes_and_responds_but_does_not_embed() {
    let host = Host::with_model().await;
    let alice = host.create_user("alice").await;
    let model = crate::inference::MODEL;

    let answer = refusal(
        &host,
        &alice,
        "/v1/embeddings",
        &json!({"model": model, "input": "x"}),
    )
    .await;
    let message = expect_invalid(&answer, "model")["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("does not embed"), "{message}");

    let body = ok(
        &host,
        &alice,
        "/v1/completions",
        &json!({"model": model, "prompt": "Name a colour.", "max_tokens": 4, "temperature": 0}),
    )
    .await;
    assert_eq!(body["object"], "text_completion");
    assert!(
        !body["choices"][0]["text"].as_str().unwrap().is_empty(),
        "{body}"
    );
    assert_eq!(
        body["choices"][0]["finish_reason"], "length",
        "4 tokens is short"
    );
    assert_eq!(body["usage"]["completion_tokens"], 4);

    let text = ok_text(
        &host,
        &alice,
        "/v1/responses",
        &json!({"model": model, "input": "Name a colour.", "instructions": "Answer in one word.",
                "max_output_tokens": 3, "temperature": 0, "stream": true}),
    )
    .await;
    let events = events(&text);
    let names = event_names(&text);
    assert_eq!(names.first(), Some(&"response.created"), "{text}");
    assert_eq!(
        names.last(),
        Some(&"response.incomplete"),
        "cut at 3: {text}"
    );
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["response"]["output"][0]["content"][0]["text"], deltas);
    assert_eq!(last["response"]["usage"]["output_tokens"], 3);
    assert_eq!(last["response"]["instructions"], "Answer in one word.");

    let answer = refusal(&host, &alice, "/v1/responses", &json!({"model": model, "input": "Hi", "tools": [{"type": "function", "name": "f", "parameters": {}}]})).await;
    let message = expect_invalid(&answer, "tools")["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("does not support 'tools'"), "{message}");

    let (_, usage) = call!(host, alice, GET "/v1/me/usage");
    assert_eq!(
        usage["total"]["requests"], 2,
        "refusals are not counted: {usage}"
    );

    let python = crate::harness::python_venv("openai-venv", &["openai==2.*"]);
    let base = format!("{}/v1", host.base);
    let args = [base.as_str(), &alice, model, "embedded"];
    crate::harness::run_client_script(python, "endpoints_client.py", &args).await;
    // It runs here and costs nothing: it needs no price, and the start,
    // long logged by now, warned of none.
    assert!(
        !host.log().contains("no [[inference.prices]] entry"),
        "the embedded model needs no price:\n{}",
        host.log()
    );
}

on_each_store!(the_stock_openai_client_uses_each_endpoint);
async fn the_stock_openai_client_uses_each_endpoint() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let alice = host.create_user("alice").await;
    let python = crate::harness::python_venv("openai-venv", &["openai==2.*"]);
    let base = format!("{}/v1", host.base);
    let args = [base.as_str(), &alice, "fake-1"];
    crate::harness::run_client_script(python, "endpoints_client.py", &args).await;
}

on_each_store!(a_backend_built_before_forward_completes_and_responds_through_chat);
async fn a_backend_built_before_forward_completes_and_responds_through_chat() {
    let host = Host::start().await;
    let alice = host.create_user("alice").await;
    let wasm = crate::harness::plugin_wasm("older");
    let query = "kind=model-backend&version=0.2.0";
    let (status, body) = host.upload_plugin("older", query, wasm).await;
    assert_eq!(status, 201, "a 0.2.0 backend loads: {body}");

    let body = ok(
        &host,
        &alice,
        "/v1/completions",
        &json!({"model": "older", "prompt": "Hello"}),
    )
    .await;
    assert_eq!(body["choices"][0]["text"], "older: Hello");

    let body = ok(&host, &alice, "/v1/responses", &json!({"model": "older", "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]})).await;
    assert_eq!(body["status"], "completed");
    assert_eq!(body["output"][0]["content"][0]["text"], "older: Hi");
    assert_eq!(body["usage"]["input_tokens"], 1);

    let answer = refusal(
        &host,
        &alice,
        "/v1/embeddings",
        &json!({"model": "older", "input": "x"}),
    )
    .await;
    expect_invalid(&answer, "model");
}
