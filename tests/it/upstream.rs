//! The `model-openai` proxy backend against a fake OpenAI-compatible
//! upstream (an outside system, so a test double is fair).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::harness::{
    Host, assert_error_shape, expect_error, expect_invalid, listed, plugin_wasm, sse_chunks,
};

/// What the upstream received: (authorization header, body, client port);
/// for the endpoints besides chat, (endpoint, body, 0), the key checked.
pub(crate) type Seen = Arc<Mutex<Vec<(String, Value, u16)>>>;

/// `/v1/embeddings`, `/v1/completions` and `/v1/responses` (see
/// `endpoints.rs`), for the key the host adds only.
async fn other_endpoints(
    State(seen): State<Seen>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let authorized = headers
        .get("authorization")
        .is_some_and(|v| v.as_bytes() == b"Bearer up-key");
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "bad key"}})),
        )
            .into_response();
    }
    let body: Value = serde_json::from_str(&body).unwrap();
    match uri.path() {
        "/v1/embeddings" => crate::endpoints::embeddings(&seen, body),
        "/v1/completions" => crate::endpoints::completions(&seen, body),
        _ => crate::endpoints::responses(&seen, body),
    }
}

async fn completions(
    State(seen): State<Seen>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    seen.lock()
        .unwrap()
        .push((auth.clone(), body.clone(), peer.port()));
    if auth != "Bearer up-key" {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "bad key"}})),
        )
            .into_response();
    }
    if body["model"] == "together" && !all_in_flight_together().await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": {"message": "requests arrived one at a time"}})),
        )
            .into_response();
    }
    match body["model"].as_str().unwrap() {
        "broken" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"message": "upstream exploded"}})),
        )
            .into_response(),
        "redirect" => (
            StatusCode::TEMPORARY_REDIRECT,
            [("location", "http://198.51.100.7/v1/chat/completions")],
        )
            .into_response(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK.into_response()
        }
        "tools" => tools_reply(&body),
        "drip" => drip(seen.clone()),
        _ => {
            let chunk = |delta: Value, finish: Value| json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "upstream-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            let usage = json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "upstream-model", "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}});
            let events = [
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"content": "Hel"}), Value::Null),
                chunk(json!({"content": "lo"}), json!("stop")),
                usage,
            ];
            let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
            text.push_str("data: [DONE]\n\n");
            ([("content-type", "text/event-stream")], text).into_response()
        }
    }
}

/// The `drip` model: streams "Hel", then nothing for 30 s. When the host
/// hangs up first, `seen` gets an entry whose authorization is
/// [`HUNG_UP`].
fn drip(seen: Seen) -> Response {
    struct Watch(Seen, bool);
    impl Watch {
        fn finished(&mut self) {
            self.1 = true;
        }
    }
    impl Drop for Watch {
        fn drop(&mut self) {
            if !self.1 {
                let entry = (HUNG_UP.to_string(), Value::Null, 0);
                self.0.lock().unwrap().push(entry);
            }
        }
    }
    let first = json!({"id": "up-3", "object": "chat.completion.chunk", "created": 1, "model": "drip",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": null}]});
    let head = futures_util::stream::once(async move { format!("data: {first}\n\n") });
    let mut watch = Watch(seen, false);
    let tail = futures_util::stream::once(async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        watch.finished();
        "data: [DONE]\n\n".to_string()
    });
    let body = futures_util::StreamExt::map(futures_util::StreamExt::chain(head, tail), |text| {
        Ok::<_, std::convert::Infallible>(text)
    });
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

/// What [`drip`] records when the host hangs up on it.
pub(crate) const HUNG_UP: &str = "(hung up)";

/// The tool call the `tools` model makes.
fn tool_call() -> Value {
    json!({"id": "call_1", "type": "function",
           "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}})
}

/// The `tools` model, as OpenAI answers: with `response_format`, JSON
/// content (and log probabilities when asked); with tools, a call to the
/// first tool (in two argument pieces when streamed) until a tool's result
/// comes back, then text; `n` choices.
fn tools_reply(body: &Value) -> Response {
    let after_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    let calls = body["tools"].is_array() && !after_tool;
    let content = if body["response_format"].is_object() {
        r#"{"name": "Ada", "age": 36}"#
    } else {
        "It is sunny in Paris."
    };
    let logprobs = (body["logprobs"] == true)
        .then(|| json!({"content": [{"token": "{", "logprob": -0.25, "bytes": [123], "top_logprobs": []}]}));
    let usage = json!({"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27});
    if body["stream"] == true {
        let chunk = |delta: Value, finish: Value| json!({"id": "up-2", "object": "chat.completion.chunk", "created": 1, "model": "tools", "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": null}),
            Value::Null,
        )];
        if calls {
            let first = json!([{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": "}}]);
            let rest = json!([{"index": 0, "function": {"arguments": "\"Paris\"}"}}]);
            events.push(chunk(json!({"tool_calls": first}), Value::Null));
            events.push(chunk(json!({"tool_calls": rest}), Value::Null));
            events.push(chunk(json!({}), json!("tool_calls")));
        } else {
            events.push(chunk(json!({"content": content}), json!("stop")));
        }
        events.push(json!({"id": "up-2", "object": "chat.completion.chunk", "created": 1, "model": "tools", "choices": [], "usage": usage}));
        let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        text.push_str("data: [DONE]\n\n");
        return ([("content-type", "text/event-stream")], text).into_response();
    }
    let n = body["n"].as_u64().unwrap_or(1);
    let choices: Vec<Value> = (0..n)
        .map(|index| {
            let message = if calls {
                json!({"role": "assistant", "content": null, "tool_calls": [tool_call()], "refusal": null})
            } else {
                json!({"role": "assistant", "content": content, "refusal": null})
            };
            let finish = if calls { "tool_calls" } else { "stop" };
            json!({"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish})
        })
        .collect();
    axum::Json(
        json!({"id": "up-2", "object": "chat.completion", "created": 1, "model": "tools",
        "choices": choices, "usage": usage}),
    )
    .into_response()
}

/// Waits up to 1 s for [`TOGETHER`] requests to be in flight at once.
async fn all_in_flight_together() -> bool {
    static BARRIER: std::sync::OnceLock<tokio::sync::Barrier> = std::sync::OnceLock::new();
    let barrier = BARRIER.get_or_init(|| tokio::sync::Barrier::new(TOGETHER));
    tokio::time::timeout(Duration::from_secs(1), barrier.wait())
        .await
        .is_ok()
}

/// Requests the `together` model answers only when all are in flight: more
/// than the embedded model's per-project limit (4), which upstream models
/// do not share.
const TOGETHER: usize = 8;

pub(crate) async fn fake_upstream() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/v1/embeddings", post(other_endpoints))
        .route("/v1/completions", post(other_endpoints))
        .route("/v1/responses", post(other_endpoints))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("127.0.0.1:{}", addr.port()), seen)
}

async fn host_with(upstream: &str, extra: &str) -> Host {
    upstream_host(upstream, extra).start().await
}

/// A host serving the fake upstream's models (and not the embedded one).
pub(crate) fn upstream_host(upstream: &str, extra: &str) -> crate::harness::HostBuilder {
    Host::builder()
        .env("FAKE_KEY", "up-key")
        .config(&format!(
            "[inference]\nembedded = false\n[[inference.upstreams]]\nname = \"fake\"\nbase_url = \"http://{upstream}/v1\"\napi_key_env = \"FAKE_KEY\"\nmodels = [\"fake-1=upstream-model\", \"fake-broken=broken\", \"fake-slow=slow\", \"fake-together=together\", \"fake-redirect=redirect\", \"fake-tools=tools\", \"fake-drip=drip\"]\ntimeout_ms = 1500\n{extra}"
        ))
}

pub(crate) async fn chat(host: &Host, key: &str, model: &str, stream: bool) -> (u16, String) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
        "temperature": 0.7, "top_p": 0.9, "seed": 7, "stop": ["\n\n"], "stream": stream});
    send(host, key, &body).await
}

/// Posts a chat request; returns the status and the body's text.
async fn send(host: &Host, key: &str, body: &Value) -> (u16, String) {
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

on_each_store!(the_proxy_forwards_whole_and_streamed_completions_with_the_host_held_key);
async fn the_proxy_forwards_whole_and_streamed_completions_with_the_host_held_key() {
    let (upstream, seen) = fake_upstream().await;
    // Every level, so that "never logged" covers debug and trace lines too.
    let host = upstream_host(&upstream, "")
        .env("RUST_LOG", "trace")
        .start()
        .await;
    let alice = host.create_user("alice").await;
    let (_, models) = call!(host, alice, GET "/v1/models");
    let ids = listed(&models, "id");
    assert!(
        ids.contains(&"fake-1") && ids.contains(&"fake-tools"),
        "{ids:?}"
    );

    let (status, text) = chat(&host, &alice, "fake-1", false).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["model"], "fake-1");
    assert_eq!(reply["choices"][0]["message"]["content"], "Hello");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        reply["usage"],
        json!({"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13})
    );
    {
        let seen = seen.lock().unwrap();
        let (auth, body, _) = seen.last().unwrap();
        assert_eq!(auth, "Bearer up-key", "the host adds the upstream key");
        assert_eq!(body["model"], "upstream-model", "the alias is resolved");
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(body["max_tokens"], 5);
        // Sampling values arrive as the client wrote them, not widened
        // from f32 (0.699999988079071).
        assert_eq!(body["temperature"], json!(0.7));
        assert_eq!(body["top_p"], json!(0.9));
        assert_eq!(body["seed"], 7);
        assert_eq!(body["stop"], json!(["\n\n"]));
    }

    let (status, text) = chat(&host, &alice, "fake-1", true).await;
    assert_eq!(status, 200, "{text}");
    let streamed = crate::harness::streamed_text(&text);
    assert_eq!(streamed, "Hello");
    assert!(
        !host.log().contains("up-key"),
        "the upstream key is never logged"
    );
}

on_each_store!(upstream_failures_and_hangs_are_clear_errors);
async fn upstream_failures_and_hangs_are_clear_errors() {
    let (upstream, _) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let alice = host.create_user("alice").await;
    let (status, text) = chat(&host, &alice, "fake-broken", false).await;
    let answer = (status, serde_json::from_str(&text).unwrap_or_default());
    let message = expect_error(&answer, 502, "upstream_error", None)["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("500") && message.contains("upstream exploded"),
        "{message}"
    );

    let started = Instant::now();
    let (status, text) = chat(&host, &alice, "fake-slow", false).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the hang was cut off"
    );
    // A gateway whose upstream hangs answers 504.
    let answer = (status, serde_json::from_str(&text).unwrap_or_default());
    assert!(
        expect_error(&answer, 504, "timeout", None)["message"]
            .as_str()
            .unwrap()
            .contains("did not finish within 1500 ms"),
        "{text}"
    );
    // The host still serves.
    let (status, _) = chat(&host, &alice, "fake-1", false).await;
    assert_eq!(status, 200);
}

on_each_store!(upstream_connections_are_reused_and_redirects_not_followed);
async fn upstream_connections_are_reused_and_redirects_not_followed() {
    let (upstream, seen) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let alice = host.create_user("alice").await;
    for _ in 0..3 {
        let (status, text) = chat(&host, &alice, "fake-1", false).await;
        assert_eq!(status, 200, "{text}");
    }
    let ports: Vec<u16> = seen.lock().unwrap().iter().map(|s| s.2).collect();
    assert_eq!(
        ports, [ports[0]; 3],
        "one upstream connection serves one request after another"
    );

    // A redirect could lead off the allow-list, so it goes back to the
    // backend as it came, and the proxy reports it.
    let (status, text) = chat(&host, &alice, "fake-redirect", false).await;
    let answer = (status, serde_json::from_str(&text).unwrap_or_default());
    let error = expect_error(&answer, 502, "upstream_error", None);
    assert!(error["message"].as_str().unwrap().contains("307"), "{text}");
    assert_eq!(
        seen.lock().unwrap().len(),
        4,
        "nothing followed the redirect"
    );
}

on_each_store!(proxied_requests_run_side_by_side_not_one_at_a_time);
async fn proxied_requests_run_side_by_side_not_one_at_a_time() {
    let (upstream, _) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let alice = host.create_user("alice").await;
    // The upstream answers only once all eight are in flight at once.
    let replies = (0..TOGETHER).map(|_| chat(&host, &alice, "fake-together", false));
    for (status, text) in futures_util::future::join_all(replies).await {
        assert_eq!(status, 200, "{text}");
    }
}

on_each_store!(a_host_outside_the_allow_list_is_denied);
async fn a_host_outside_the_allow_list_is_denied() {
    let (upstream, seen) = fake_upstream().await;
    let host = host_with(&upstream, "allow_hosts = [\"api.example.com:443\"]").await;
    let alice = host.create_user("alice").await;
    let (status, text) = chat(&host, &alice, "fake-1", false).await;
    let answer = (status, serde_json::from_str(&text).unwrap_or_default());
    let message = expect_error(&answer, 502, "upstream_error", None)["message"]
        .as_str()
        .unwrap()
        .to_lowercase();
    assert!(message.contains("denied"), "{text}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
}

/// The upload query granting `model_openai.wasm` the fake upstream, serving
/// `models` (`id=upstream-id`, comma-separated).
fn backend_query(upstream: &str, version: &str, models: &str) -> String {
    let env_models: String = url::form_urlencoded::byte_serialize(models.as_bytes()).collect();
    format!(
        "kind=model-backend&version={version}&allow_hosts={upstream}&api_key_env=FAKE_KEY&per_call=true\
         &env.UPSTREAM_URL=http://{upstream}/v1&env.MODELS={env_models}"
    )
}

async fn model_ids(host: &Host, key: &str) -> Vec<String> {
    let (_, models) = call!(host, key, GET "/v1/models");
    listed(&models, "id")
        .into_iter()
        .map(String::from)
        .collect()
}

on_each_store!(operators_load_replace_and_remove_model_backends_at_runtime);
async fn operators_load_replace_and_remove_model_backends_at_runtime() {
    let (upstream, seen) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let alice = host.create_user("alice").await;
    let wasm = plugin_wasm("model_openai");

    let query = backend_query(&upstream, "1.0.0", "team-llm=upstream-model");
    let (status, body) = host.upload_plugin("team-llm", &query, wasm.clone()).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["kind"], "model-backend");
    assert_eq!(body["models"], json!(["team-llm"]));
    assert!(model_ids(&host, &alice).await.contains(&"team-llm".into()));

    let (status, text) = chat(&host, &alice, "team-llm", false).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["model"], "team-llm");
    assert_eq!(reply["choices"][0]["message"]["content"], "Hello");
    let (auth, sent, _) = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        auth, "Bearer up-key",
        "the host adds the credential it holds"
    );
    assert_eq!(sent["model"], "upstream-model");
    let (_, usage) = call!(host, alice, GET "/v1/me/usage");
    assert_eq!(usage["by_model"]["team-llm"]["total_tokens"], 13, "{usage}");
    let (_, info) = host.get("/v1/admin/plugins/team-llm").await;
    assert_eq!(info["calls"], 1, "{info}");

    // A replacement swaps the models served; the old id is gone.
    let query = backend_query(&upstream, "2.0.0", "team-llm-2=upstream-model");
    let (status, body) = host.upload_plugin("team-llm", &query, wasm.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replaced"]["version"], "1.0.0");
    let ids = model_ids(&host, &alice).await;
    assert!(
        ids.contains(&"team-llm-2".into()) && !ids.contains(&"team-llm".into()),
        "{ids:?}"
    );
    let (status, text) = chat(&host, &alice, "team-llm", false).await;
    let answer = (status, serde_json::from_str(&text).unwrap_or_default());
    expect_error(&answer, 404, "model_not_found", Some("model"));
    assert_eq!(chat(&host, &alice, "team-llm-2", true).await.0, 200);

    // Model ids belong to one backend: a built-in's or another plugin's are refused.
    for taken in ["fake-1=upstream-model", "team-llm-2=upstream-model"] {
        let query = backend_query(&upstream, "1", taken);
        let (status, body) = host.upload_plugin("other-llm", &query, wasm.clone()).await;
        expect_error(&(status, body.clone()), 409, "conflict", None);
        let message = assert_error_shape(&body)["message"].as_str().unwrap();
        assert!(message.contains("already served by"), "{message}");
    }

    // Removing it stops serving its models.
    let (status, _) = host.delete("/v1/admin/plugins/team-llm").await;
    assert_eq!(status, 204);
    let (status, text) = chat(&host, &alice, "team-llm-2", false).await;

    expect_error(
        &(status, serde_json::from_str(&text).unwrap_or_default()),
        404,
        "model_not_found",
        Some("model"),
    );
}

on_each_store!(backend_uploads_are_checked_before_anything_is_served);
async fn backend_uploads_are_checked_before_anything_is_served() {
    let (upstream, seen) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let wasm = plugin_wasm("model_openai");
    let grantless =
        format!("kind=model-backend&version=1&env.UPSTREAM_URL=http://{upstream}/v1&env.MODELS=x");
    let unset_key = backend_query(&upstream, "1", "x").replace("FAKE_KEY", "NO_SUCH_KEY");
    let cases = [
        // HTTP without an allow-list to use it with.
        (grantless.as_str(), wasm.clone(), 400, "allow_hosts"),
        // A credential the host does not have.
        (unset_key.as_str(), wasm.clone(), 400, "NO_SUCH_KEY"),
        // A payload template is not a model backend.
        (
            "kind=model-backend&version=1",
            plugin_wasm("template_default"),
            400,
            "model-backend world",
        ),
        // Grants are for backends only.
        (
            "kind=payload-template&version=1&allow_hosts=a.example:443",
            plugin_wasm("template_default"),
            400,
            "model-backend",
        ),
        (
            "kind=model-backend&version=1&allow_hosts=a.example",
            wasm.clone(),
            400,
            "host:port",
        ),
        // The host's own keys cannot be handed to a backend's upstream.
        (
            "kind=model-backend&version=1&allow_hosts=a.example:443&api_key_env=SWITCHYARD_MASTER_KEY",
            wasm.clone(),
            400,
            "host's own",
        ),
    ];
    for (query, wasm, want, says) in cases {
        let (status, body) = host.upload_plugin("bad-llm", query, wasm).await;
        assert_eq!(status, want, "{query}: {body}");
        let message = assert_error_shape(&body)["message"].as_str().unwrap();
        assert!(message.contains(says), "{query}: {message}");
    }
    expect_error(
        &host.get("/v1/admin/plugins/bad-llm").await,
        404,
        "not_found",
        None,
    );
    assert!(seen.lock().unwrap().is_empty());
}

on_each_store!(a_backend_in_the_plugins_directory_is_served_from_start);
async fn a_backend_in_the_plugins_directory_is_served_from_start() {
    let (upstream, _) = fake_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dir-llm.wasm"), plugin_wasm("model_openai")).unwrap();
    std::fs::write(
        dir.path().join("dir-llm.toml"),
        format!(
            "kind = \"model-backend\"\nversion = \"3.1.0\"\n[limits]\ntimeout_ms = 5000\n\
             [backend]\nallow_hosts = [\"{upstream}\"]\napi_key_env = \"FAKE_KEY\"\nper_call = true\n\
             env = {{ UPSTREAM_URL = \"http://{upstream}/v1\", MODELS = \"dir-llm=upstream-model\" }}\n"
        ),
    )
    .unwrap();
    let host = Host::builder()
        .env("FAKE_KEY", "up-key")
        .env("SWITCHYARD_PLUGINS_DIR", dir.path().to_str().unwrap())
        .start()
        .await;
    let alice = host.create_user("alice").await;
    let (status, info) = host.get("/v1/admin/plugins/dir-llm").await;
    assert_eq!(status, 200, "{info}");
    assert_eq!(info["source"], "directory");
    assert_eq!(info["limits"]["timeout_ms"], 5000);
    let (status, text) = chat(&host, &alice, "dir-llm", false).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("Hello"), "{text}");
}

/// The body the upstream got last.
fn last_body(seen: &Seen) -> Value {
    seen.lock().unwrap().last().unwrap().1.clone()
}

on_each_store!(tool_calls_structured_output_logprobs_and_choices_pass_through_an_upstream);
async fn tool_calls_structured_output_logprobs_and_choices_pass_through_an_upstream() {
    let (upstream, seen) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let alice = host.create_user("alice").await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let ask = json!({"role": "user", "content": "Weather in Paris?"});

    // A whole reply: the upstream's tool calls, unchanged, and two choices.
    let request = json!({"model": "fake-tools", "messages": [ask], "tools": tools,
        "tool_choice": "auto", "parallel_tool_calls": false, "n": 2});
    let (status, text) = send(&host, &alice, &request).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    let choices = reply["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2, "{reply}");
    for (i, choice) in choices.iter().enumerate() {
        assert_eq!(choice["index"], i);
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["tool_calls"], json!([tool_call()]));
    }
    assert_eq!(reply["usage"]["total_tokens"], 27);
    let sent = last_body(&seen);
    assert_eq!(
        (&sent["tools"], &sent["tool_choice"], &sent["n"]),
        (&tools, &json!("auto"), &json!(2))
    );
    assert_eq!(sent["parallel_tool_calls"], false);

    // The tool's result goes back with the call that asked for it.
    let call = json!({"role": "assistant", "content": null, "tool_calls": [tool_call()]});
    let result = json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"});
    let request = json!({"model": "fake-tools", "messages": [ask, call, result], "tools": tools});
    let (status, text) = send(&host, &alice, &request).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        "It is sunny in Paris."
    );
    let sent = last_body(&seen);
    assert_eq!(sent["messages"][1], call, "the assistant's call, as sent");
    assert_eq!(sent["messages"][2], result, "the tool message, as sent");

    // Streamed: the tool-call deltas as the upstream sent them, then the end.
    let request = json!({"model": "fake-tools", "messages": [ask], "tools": tools, "stream": true,
        "stream_options": {"include_usage": true}});
    let (status, text) = send(&host, &alice, &request).await;
    assert_eq!(status, 200, "{text}");
    let chunks = sse_chunks(&text);
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(deltas.len(), 2, "{text}");
    assert_eq!(deltas[0][0]["function"]["arguments"], "{\"city\": ");
    assert_eq!(deltas[1][0]["function"]["arguments"], "\"Paris\"}");
    let finishes: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| {
            c["choices"][0]
                .get("finish_reason")
                .filter(|f| !f.is_null())
        })
        .collect();
    assert_eq!(
        finishes,
        [&json!("tool_calls")],
        "one finish_reason: {text}"
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["id"] == chunks[0]["id"] && c["object"] == "chat.completion.chunk")
    );
    let usage = chunks.last().unwrap();
    assert_eq!(
        (
            usage["choices"].as_array().map(Vec::len),
            &usage["usage"]["total_tokens"]
        ),
        (Some(0), &json!(27))
    );

    // Structured output and log probabilities.
    let format = json!({"type": "json_schema", "json_schema": {"name": "person", "schema": {"type": "object"}}});
    let request = json!({"model": "fake-tools", "messages": [ask], "response_format": format,
        "logprobs": true, "top_logprobs": 2});
    let (status, text) = send(&host, &alice, &request).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        reply["choices"][0]["message"]["content"],
        r#"{"name": "Ada", "age": 36}"#
    );
    assert_eq!(
        reply["choices"][0]["logprobs"]["content"][0]["logprob"],
        -0.25
    );
    let sent = last_body(&seen);
    assert_eq!(
        (&sent["response_format"], &sent["top_logprobs"]),
        (&format, &json!(2))
    );
}

on_each_store!(the_stock_openai_and_langchain_clients_call_tools_and_get_structured_output);
async fn the_stock_openai_and_langchain_clients_call_tools_and_get_structured_output() {
    let (upstream, _) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let alice = host.create_user("alice").await;
    let python = crate::harness::python_venv(
        "langchain-venv",
        &["openai==2.*", "langchain-openai==1.7.4"],
    );
    let base = format!("{}/v1", host.base);
    let args = [base.as_str(), &alice, "fake-tools"];
    crate::harness::run_client_script(python, "tools_client.py", &args).await;
}

on_each_store!(the_embedded_model_refuses_what_it_cannot_honour_naming_the_field);
async fn the_embedded_model_refuses_what_it_cannot_honour_naming_the_field() {
    let host = Host::with_model().await;
    let alice = host.create_user("alice").await;
    let ask = json!({"role": "user", "content": "hi"});
    let model = "SmolLM2-135M-Instruct";
    let tools =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
    for (extra, param) in [
        (json!({"tools": tools}), "tools"),
        (
            json!({"response_format": {"type": "json_object"}}),
            "response_format",
        ),
        (json!({"logprobs": true}), "logprobs"),
        (json!({"n": 2}), "n"),
        (
            json!({"messages": [ask, {"role": "tool", "tool_call_id": "c", "content": "x"}]}),
            "messages[1].role",
        ),
        (
            json!({"messages": [ask, {"role": "assistant", "content": null, "tool_calls": [tool_call()]}]}),
            "messages[1].tool_calls",
        ),
    ] {
        let mut request = json!({"model": model, "messages": [ask], "max_tokens": 2});
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        let (status, text) = send(&host, &alice, &request).await;
        let answer = (status, serde_json::from_str(&text).unwrap_or_default());
        let error = expect_invalid(&answer, param);
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("does not support"),
            "{text}"
        );
    }
    // What it can honour still works: n = 1, text format, empty tools.
    let request = json!({"model": model, "messages": [ask], "max_tokens": 2, "n": 1,
        "response_format": {"type": "text"}, "tools": [], "logprobs": false});
    let (status, text) = send(&host, &alice, &request).await;
    assert_eq!(status, 200, "{text}");
}

/// Usage counted by several hosts at once adds up exactly in the shared
/// store.
#[tokio::test]
async fn usage_from_concurrent_requests_on_two_hosts_adds_up_exactly() {
    crate::harness::Engine::Postgres
        .run(async {
            let key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
            let (upstream, _) = fake_upstream().await;
            let first = upstream_host(&upstream, "")
                .env("SWITCHYARD_MASTER_KEY", key)
                .start()
                .await;
            let second = upstream_host(&upstream, "")
                .env("SWITCHYARD_MASTER_KEY", key)
                .same_database(&first)
                .start()
                .await;
            let alice = first.create_user("alice").await;
            let (rounds, per_host) = (5, 4);
            for _ in 0..rounds {
                let mut calls = Vec::new();
                for host in [&first, &second] {
                    for _ in 0..per_host {
                        calls.push(chat(host, &alice, "fake-1", false));
                    }
                }
                for (status, text) in futures_util::future::join_all(calls).await {
                    assert_eq!(status, 200, "{text}");
                }
            }
            let n = rounds * per_host * 2;
            for host in [&first, &second] {
                let (_, usage) = call!(host, alice, GET "/v1/me/usage");
                assert_eq!(usage["by_model"]["fake-1"]["requests"], n, "{usage}");
                assert_eq!(
                    usage["by_model"]["fake-1"]["total_tokens"],
                    13 * n,
                    "{usage}"
                );
            }
        })
        .await;
}

on_each_store!(inference_metrics_count_requests_tokens_and_first_tokens);
async fn inference_metrics_count_requests_tokens_and_first_tokens() {
    use crate::metrics::sample;
    let (upstream, _) = fake_upstream().await;
    let host = host_with(&upstream, "").await;
    let alice = host.create_user("alice").await;
    for stream in [false, true] {
        let (status, text) = chat(&host, &alice, "fake-1", stream).await;
        assert_eq!(status, 200, "{text}");
    }
    let (status, _) = chat(&host, &alice, "no-such-model", false).await;
    assert_eq!(status, 404);
    let text = crate::metrics::scrape(&host).await;
    let model = [("model", "fake-1")];
    assert_eq!(
        sample(
            &text,
            "switchyard_inference_requests_total",
            &[("model", "fake-1"), ("status", "200")]
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "switchyard_inference_requests_total",
            &[("model", "no-such-model"), ("status", "404")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "switchyard_inference_tokens_total",
            &[("model", "fake-1"), ("kind", "prompt")]
        ),
        Some(22.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "switchyard_inference_tokens_total",
            &[("model", "fake-1"), ("kind", "completion")]
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "switchyard_inference_time_to_first_token_seconds_count",
            &model
        ),
        Some(2.0),
        "{text}"
    );
}
