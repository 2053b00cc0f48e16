//! The `model-openai` proxy backend against a fake OpenAI-compatible
//! upstream (an outside system, so a test double is fair).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::harness::{Host, INFERENCE, assert_error_shape};

/// What the upstream received: (authorization header, body).
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

async fn completions(State(seen): State<Seen>, headers: HeaderMap, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    seen.lock().unwrap().push((auth.clone(), body.clone()));
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
        "slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK.into_response()
        }
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

/// Waits up to 1 s for [`TOGETHER`] requests to be in flight at once.
async fn all_in_flight_together() -> bool {
    static BARRIER: std::sync::OnceLock<tokio::sync::Barrier> = std::sync::OnceLock::new();
    let barrier = BARRIER.get_or_init(|| tokio::sync::Barrier::new(TOGETHER));
    tokio::time::timeout(Duration::from_secs(1), barrier.wait())
        .await
        .is_ok()
}

/// Requests the `together` model answers only when all are in flight.
const TOGETHER: usize = 4;

async fn fake_upstream() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("127.0.0.1:{}", addr.port()), seen)
}

fn host_with(upstream: &str, extra: &str) -> Host {
    Host::builder()
        .env("FAKE_KEY", "up-key")
        .config(&format!(
            "{INFERENCE}\n[[inference.upstreams]]\nname = \"fake\"\nbase_url = \"http://{upstream}/v1\"\napi_key_env = \"FAKE_KEY\"\nmodels = [\"fake-1=upstream-model\", \"fake-broken=broken\", \"fake-slow=slow\", \"fake-together=together\"]\ntimeout_ms = 1500\n{extra}"
        ))
        .start()
}

async fn chat(host: &Host, key: &str, model: &str, stream: bool) -> (u16, String) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": stream});
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test]
async fn the_proxy_forwards_whole_and_streamed_completions_with_the_host_held_key() {
    let (upstream, seen) = fake_upstream().await;
    let host = host_with(&upstream, "");
    let alice = host.create_user("alice").await;
    let (_, models) = host.call("GET", "/v1/models", &alice, None).await;
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"fake-1") && ids.contains(&"SmolLM2-135M-Instruct"),
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
        let (auth, body) = seen.last().unwrap();
        assert_eq!(auth, "Bearer up-key", "the host adds the upstream key");
        assert_eq!(body["model"], "upstream-model", "the alias is resolved");
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
        assert_eq!(body["max_tokens"], 5);
    }

    let (status, text) = chat(&host, &alice, "fake-1", true).await;
    assert_eq!(status, 200, "{text}");
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(*data.last().unwrap(), "[DONE]");
    let streamed: String = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(streamed, "Hello");
    assert!(
        !host.log().contains("up-key"),
        "the upstream key is never logged"
    );
}

#[tokio::test]
async fn upstream_failures_and_hangs_are_clear_errors() {
    let (upstream, _) = fake_upstream().await;
    let host = host_with(&upstream, "");
    let alice = host.create_user("alice").await;
    let (status, text) = chat(&host, &alice, "fake-broken", false).await;
    assert_eq!(status, 502, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let message = assert_error_shape(&body)["message"]
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
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(
        assert_error_shape(&body)["message"]
            .as_str()
            .unwrap()
            .contains("did not finish within 1500 ms"),
        "{text}"
    );
    // The host still serves.
    let (status, _) = chat(&host, &alice, "fake-1", false).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn proxied_requests_run_side_by_side_not_one_at_a_time() {
    let (upstream, _) = fake_upstream().await;
    let host = host_with(&upstream, "");
    let alice = host.create_user("alice").await;
    // The upstream answers only once all four are in flight at once.
    let one = || chat(&host, &alice, "fake-together", false);
    let replies = tokio::join!(one(), one(), one(), one());
    for (status, text) in [replies.0, replies.1, replies.2, replies.3] {
        assert_eq!(status, 200, "{text}");
    }
}

#[tokio::test]
async fn a_host_outside_the_allow_list_is_denied() {
    let (upstream, seen) = fake_upstream().await;
    let host = host_with(&upstream, "allow_hosts = [\"api.example.com:443\"]");
    let alice = host.create_user("alice").await;
    let (status, text) = chat(&host, &alice, "fake-1", false).await;
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("denied") || text.contains("Denied"), "{text}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
}
