//! The gateway: keys scoped to models and projects with an expiry, rate
//! limits and budgets of keys and projects (across hosts on PostgreSQL),
//! against the fake upstream of `upstream.rs`.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::harness::{Engine, Host, assert_error_shape, expect_invalid, listed};
use crate::upstream::{fake_upstream, upstream_host};

/// Posts a small chat request to `model`, with `project` in the project
/// header when given; the status, headers and body.
pub(crate) async fn ask(
    host: &Host,
    key: &str,
    model: &str,
    project: Option<&str>,
) -> (u16, HeaderMap, Value) {
    let body =
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5});
    let mut request = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body);
    if let Some(project) = project {
        request = request.header("service-project", project);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    (
        status,
        headers,
        response.json().await.unwrap_or(Value::Null),
    )
}

pub(crate) fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header in {headers:?}"))
        .to_str()
        .unwrap()
}

/// Creates a key for `owner` with `spec` (its name added); the key.
pub(crate) async fn scoped_key(host: &Host, owner: &str, spec: Value) -> String {
    let mut spec = spec;
    spec["name"] = json!("scoped");
    let (status, created) = host
        .call("POST", "/v1/me/api-keys", owner, Some(&spec))
        .await;
    assert_eq!(status, 201, "{created}");
    created["key"].as_str().unwrap().to_string()
}

/// A team `ml` with project `vision` and `audio`, alice its admin and bob a
/// member.
pub(crate) async fn team(host: &Host) -> (String, String) {
    let alice = host.create_user("alice").await;
    let bob = host.create_user("bob").await;
    ok!(host, alice, POST "/v1/teams", {"name": "ml"});
    ok!(host, alice, PUT "/v1/teams/ml/members/bob", {"role": "member"});
    ok!(host, alice, POST "/v1/teams/ml/projects", {"name": "vision"});
    ok!(host, alice, POST "/v1/teams/ml/projects", {"name": "audio"});
    (alice, bob)
}

on_each_store!(keys_are_scoped_to_models_and_projects_and_expire);
async fn keys_are_scoped_to_models_and_projects_and_expire() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let (alice, _) = team(&host).await;

    // What a key may do is checked when it is made, naming the field.
    for (spec, param) in [
        (json!({"models": []}), "models"),
        (json!({"projects": ["no-slash"]}), "projects"),
        (json!({"expires_at": 1}), "expires_at"),
        (json!({"rpm": 0}), "rpm"),
        (json!({"tokens_per_day": 0}), "tokens_per_day"),
    ] {
        let mut body = spec.clone();
        body["name"] = json!("bad");
        let got = host
            .call("POST", "/v1/me/api-keys", &alice, Some(&body))
            .await;
        expect_invalid(&got, param);
    }
    let unknown = json!({"name": "x", "budget": 5});
    let got = host
        .call("POST", "/v1/me/api-keys", &alice, Some(&unknown))
        .await;
    assert_eq!(got.0, 400, "{}", got.1);
    assert!(
        got.1["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget"),
        "{}",
        got.1
    );

    let expires_at = now() + 3600;
    let key = scoped_key(
        &host,
        &alice,
        json!({"models": ["fake-1"], "projects": ["ml/vision"], "expires_at": expires_at, "rpm": 100, "tpm": 100000, "tokens_per_day": 1000000}),
    )
    .await;
    let (_, keys) = call!(host, alice, GET "/v1/me/api-keys");
    let listed_key = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "scoped")
        .unwrap();
    assert_eq!(listed_key["models"], json!(["fake-1"]));
    assert_eq!(listed_key["projects"], json!(["ml/vision"]));
    assert_eq!(listed_key["expires_at"], json!(expires_at));
    assert_eq!(
        (
            &listed_key["rpm"],
            &listed_key["tpm"],
            &listed_key["tokens_per_day"]
        ),
        (&json!(100), &json!(100000), &json!(1000000))
    );

    // The models listing shows only what the key may use.
    let (_, models) = call!(host, key, GET "/v1/models");
    assert_eq!(listed(&models, "id"), ["fake-1"]);
    let (status, _) = call!(host, key, GET "/v1/models/fake-tools");
    assert_eq!(status, 404);
    let (_, all) = call!(host, alice, GET "/v1/models");
    assert!(listed(&all, "id").len() > 1, "{all}");

    let (status, _, body) = ask(&host, &key, "fake-1", Some("ml/vision")).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = ask(&host, &key, "fake-tools", Some("ml/vision")).await;
    assert_eq!(status, 403, "{body}");
    let error = assert_error_shape(&body);
    assert_eq!(
        (&error["type"], &error["param"]),
        (&json!("permission_error"), &json!("model"))
    );
    assert!(
        error["message"].as_str().unwrap().contains("fake-1"),
        "{body}"
    );
    let (status, _, body) = ask(&host, &key, "fake-1", Some("ml/audio")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["param"], "service-project", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ml/vision"),
        "{body}"
    );
    let (status, _, body) = ask(&host, &key, "fake-1", None).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["param"], "service-project", "{body}");
    // The same requests with an unscoped key pass.
    let (status, _, body) = ask(&host, &alice, "fake-tools", Some("ml/audio")).await;
    assert_ne!(status, 403, "{body}");

    // A key past its expiry lets no one in.
    let short = scoped_key(&host, &alice, json!({"expires_at": now() + 2})).await;
    let (status, _, _) = ask(&host, &short, "fake-1", None).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (status, _, body) = ask(&host, &short, "fake-1", None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{body}"
    );
    let (status, body) = call!(host, short, GET "/v1/me");
    assert_eq!(status, 401, "{body}");
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

on_each_store!(key_limits_answer_openai_headers_and_429s);
async fn key_limits_answer_openai_headers_and_429s() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let alice = host.create_user("alice").await;

    // Without limits, no rate-limit headers.
    let (status, headers, _) = ask(&host, &alice, "fake-1", None).await;
    assert_eq!(status, 200);
    assert!(
        headers.get("x-ratelimit-limit-requests").is_none(),
        "{headers:?}"
    );

    let key = scoped_key(&host, &alice, json!({"rpm": 3, "tpm": 100000})).await;
    for remaining in ["2", "1", "0"] {
        let (status, headers, body) = ask(&host, &key, "fake-1", None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(header(&headers, "x-ratelimit-limit-requests"), "3");
        assert_eq!(
            header(&headers, "x-ratelimit-remaining-requests"),
            remaining
        );
        assert!(header(&headers, "x-ratelimit-reset-requests").ends_with('s'));
        assert_eq!(header(&headers, "x-ratelimit-limit-tokens"), "100000");
        let left: u64 = header(&headers, "x-ratelimit-remaining-tokens")
            .parse()
            .unwrap();
        assert!(left < 100000 && left > 99000, "{left}");
    }
    let (status, headers, body) = ask(&host, &key, "fake-1", None).await;
    assert_eq!(status, 429, "{body}");
    let error = assert_error_shape(&body);
    assert_eq!(error["type"], "rate_limit_exceeded");
    assert_eq!(error["code"], "rate_limit_exceeded");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("3 requests per minute") && message.contains("API key 'scoped'"),
        "{message}"
    );
    let retry: u64 = header(&headers, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Another key of the same user is not held back.
    let (status, _, _) = ask(&host, &alice, "fake-1", None).await;
    assert_eq!(status, 200);

    // A daily budget: each answer uses 13 tokens (the upstream's usage),
    // admitted against 23 (the prompt at one token a byte, 18, and
    // max_tokens) and settled with the real count: after two, 26 of 40 are
    // used, too few left for a third.
    let budget = scoped_key(&host, &alice, json!({"tokens_per_day": 40})).await;
    for _ in 0..2 {
        let (status, headers, body) = ask(&host, &budget, "fake-1", None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(header(&headers, "x-ratelimit-limit-tokens"), "40");
        // Settled corrections are written each second.
        tokio::time::sleep(Duration::from_millis(1_300)).await;
    }
    let (status, headers, body) = ask(&host, &budget, "fake-1", None).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "insufficient_quota", "{body}");
    assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("40 tokens per day (UTC)"),
        "{body}"
    );
    let retry: u64 = header(&headers, "retry-after").parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");

    // A request that could never fit is told so.
    let small = scoped_key(&host, &alice, json!({"tpm": 5})).await;
    let (status, _, body) = ask(&host, &small, "fake-1", None).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("lower max_tokens"),
        "{body}"
    );
}

on_each_store!(project_limits_are_set_by_team_admins_and_hold);
async fn project_limits_are_set_by_team_admins_and_hold() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let (alice, bob) = team(&host).await;

    let (status, body) = call!(host, bob, PUT "/v1/teams/ml/projects/vision/limits", {"rpm": 2});
    assert_eq!(status, 403, "{body}");
    let got = call!(host, alice, PUT "/v1/teams/ml/projects/vision/limits", {"rpm": 0});
    expect_invalid(&got, "rpm");
    let (status, body) =
        call!(host, alice, PUT "/v1/teams/ml/projects/vision/limits", {"rpm": 2, "burst": 1});
    assert_eq!(status, 400, "{body}");
    let (status, body) = call!(host, alice, PUT "/v1/teams/ml/projects/nope/limits", {"rpm": 2});
    assert_eq!(status, 404, "{body}");
    let set = ok!(host, alice, PUT "/v1/teams/ml/projects/vision/limits", {"rpm": 2, "tpm": null});
    assert_eq!(
        set,
        json!({"rpm": 2, "tpm": null, "tokens_per_day": null, "usd_per_day": null, "usd_per_month": null})
    );
    let (_, project) = call!(host, bob, GET "/v1/teams/ml/projects/vision");
    assert_eq!(project["limits"]["rpm"], 2, "{project}");

    // Two requests a minute, whoever sends them.
    for (key, remaining) in [(&alice, "1"), (&bob, "0")] {
        let (status, headers, body) = ask(&host, key, "fake-1", Some("ml/vision")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            header(&headers, "x-ratelimit-remaining-requests"),
            remaining
        );
    }
    let (status, _, body) = ask(&host, &bob, "fake-1", Some("ml/vision")).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("project 'ml/vision'"),
        "{body}"
    );
    // Other projects, and requests without one, are not held back.
    let (status, _, _) = ask(&host, &bob, "fake-1", Some("ml/audio")).await;
    assert_eq!(status, 200);
    // Lifting the limit lets requests in at once.
    ok!(host, alice, PUT "/v1/teams/ml/projects/vision/limits", {});
    let (status, headers, body) = ask(&host, &bob, "fake-1", Some("ml/vision")).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.get("x-ratelimit-limit-requests").is_none());
}

/// Three hosts on one database hold one key to 60 requests a minute,
/// whichever hosts its requests reach.
#[tokio::test]
async fn a_key_limit_holds_across_three_hosts() {
    Engine::Postgres
        .run(async {
            let master = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
            let (upstream, _) = fake_upstream().await;
            let first = upstream_host(&upstream, "")
                .env("SWITCHYARD_MASTER_KEY", master)
                .start()
                .await;
            let mut hosts = vec![first];
            for _ in 0..2 {
                let next = upstream_host(&upstream, "")
                    .env("SWITCHYARD_MASTER_KEY", master)
                    .same_database(&hosts[0])
                    .start()
                    .await;
                hosts.push(next);
            }
            let alice = hosts[0].create_user("alice").await;
            let key = scoped_key(&hosts[0], &alice, json!({"rpm": 60})).await;
            // 150 requests, 10 at a time, spread over the hosts.
            let mut ok = 0;
            for round in 0..15 {
                let calls = (0..10).map(|i| ask(&hosts[(round + i) % 3], &key, "fake-1", None));
                for (status, _, body) in futures_util::future::join_all(calls).await {
                    match status {
                        200 => ok += 1,
                        429 => assert_eq!(body["error"]["type"], "rate_limit_exceeded"),
                        other => panic!("{other}: {body}"),
                    }
                }
            }
            eprintln!("{ok} of 150 let in under 60 rpm");
            assert!((57..=63).contains(&ok), "{ok} of 150 let in under 60 rpm");
        })
        .await;
}

/// An upstream that is down: every request is a 503, counted.
async fn failing_upstream() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async {
            (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                axum::Json(json!({"error": {"message": "overloaded"}})),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("127.0.0.1:{}", addr.port()), hits)
}

/// An upstream `down` at `bad`, and the route `chat`: its deployment
/// `east` there first, `west` (the fake upstream's `fake-1`) second.
fn chat_route(bad: &str) -> String {
    format!(
        r#"[[inference.upstreams]]
name = "down"
base_url = "http://{bad}/v1"
models = ["down-1=anything"]
[[inference.routes]]
model = "chat"
deployments = [{{ model = "down-1", name = "east" }}, {{ model = "fake-1", name = "west" }}]
"#
    )
}

on_each_store!(routes_fall_over_to_the_next_deployment_and_say_which_served);
async fn routes_fall_over_to_the_next_deployment_and_say_which_served() {
    use std::sync::atomic::Ordering;
    let (good, _) = fake_upstream().await;
    let (bad, bad_hits) = failing_upstream().await;
    let routes = format!(
        r#"{}
[[inference.routes]]
model = "rescued"
fallbacks = ["fake-1"]
deployments = [{{ model = "down-1", name = "only" }}]
[[inference.routes]]
model = "patient"
timeout_ms = 400
deployments = [{{ model = "fake-slow", name = "slow" }}, {{ model = "fake-1", name = "quick" }}]
"#,
        chat_route(&bad)
    );
    let host = upstream_host(&good, &routes).start().await;
    let alice = host.create_user("alice").await;
    let (_, models) = call!(host, alice, GET "/v1/models");
    assert!(listed(&models, "id").contains(&"chat"), "{models}");

    // The first deployment answers 503: the second serves, and says so.
    let (status, headers, body) = ask(&host, &alice, "chat", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "x-switchyard-deployment"), "west");
    assert_eq!(body["model"], "chat");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello");
    assert_eq!(bad_hits.load(Ordering::SeqCst), 1);
    // It is cooling down now: not asked again.
    let (status, headers, _) = ask(&host, &alice, "chat", None).await;
    assert_eq!(
        (status, header(&headers, "x-switchyard-deployment")),
        (200, "west")
    );
    assert_eq!(
        bad_hits.load(Ordering::SeqCst),
        1,
        "a cooling deployment is passed over"
    );
    // Streams too (the failure came before any byte).
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(&alice)
        .json(&json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(response.headers(), "x-switchyard-deployment"),
        "west"
    );
    let text = response.text().await.unwrap();
    let streamed = crate::harness::streamed_text(&text);
    assert_eq!(streamed, "Hello");

    // Every deployment down: the fallback model answers.
    let (status, headers, body) = ask(&host, &alice, "rescued", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "x-switchyard-deployment"), "fake-1");
    assert_eq!(bad_hits.load(Ordering::SeqCst), 2);
    // A deployment past the route's timeout is left for the next.
    let started = std::time::Instant::now();
    let (status, headers, body) = ask(&host, &alice, "patient", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "x-switchyard-deployment"), "quick");
    assert!(started.elapsed() < Duration::from_secs(5));

    // Usage and the access log say which deployment served.
    let (_, usage) = call!(host, alice, GET "/v1/me/usage");
    let rows = usage["rows"].as_array().unwrap();
    let west = rows
        .iter()
        .find(|r| r["model"] == "chat" && r["deployment"] == "west")
        .unwrap_or_else(|| panic!("{usage}"));
    assert_eq!(west["requests"], 3, "{usage}");
    assert!(
        rows.iter()
            .any(|r| r["model"] == "rescued" && r["deployment"] == "fake-1"),
        "{usage}"
    );
    host.wait_for_log(&["deployment=west"]).await;
}

on_each_store!(the_stock_openai_client_reads_limits_deployments_and_refusals);
async fn the_stock_openai_client_reads_limits_deployments_and_refusals() {
    let (good, _) = fake_upstream().await;
    let (bad, _) = failing_upstream().await;
    let host = upstream_host(&good, &chat_route(&bad)).start().await;
    let alice = host.create_user("alice").await;
    let key = scoped_key(
        &host,
        &alice,
        json!({"models": ["fake-1", "chat"], "rpm": 2}),
    )
    .await;
    let python = crate::harness::python_venv("openai-venv", &["openai==2.*"]);
    let base = format!("{}/v1", host.base);
    let args = [base.as_str(), &key, "fake-1", "chat"];
    crate::harness::run_client_script(python, "gateway_client.py", &args).await;
}

on_each_store!(litellms_sdk_chats_streams_embeds_and_meets_the_limit);
async fn litellms_sdk_chats_streams_embeds_and_meets_the_limit() {
    let (upstream, _) = fake_upstream().await;
    let host = upstream_host(&upstream, "").start().await;
    let alice = host.create_user("alice").await;
    let key = scoped_key(&host, &alice, json!({"rpm": 3})).await;
    let python = crate::harness::python_venv("litellm-venv", &["litellm==1.110.2"]);
    let base = format!("{}/v1", host.base);
    let args = [base.as_str(), &key, "fake-1"];
    crate::harness::run_client_script(python, "litellm_client.py", &args).await;
}
