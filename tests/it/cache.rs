//! The response cache: hits and misses through the stock `openai` client,
//! what is never kept, usage and metrics, teams kept apart, and hosts on
//! one database sharing it.

use serde_json::json;

use crate::gateway::scoped_key;
use crate::harness::Engine;
use crate::upstream::{fake_upstream, upstream_host};

/// The cache, and a route it never serves (fake-1 is priced as in
/// `spend.rs`).
const CACHE: &str = r#"
[inference.cache]
enabled = true
ttl_s = 600
[[inference.routes]]
model = "uncached"
cache = false
deployments = [{ model = "fake-1" }]
"#;

fn cache_config() -> String {
    format!("{CACHE}{}", crate::spend::FAKE_1_PRICE)
}

/// Shared by hosts on one database.
const MASTER: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Posts a chat request; its status, `x-switchyard-cache` and body.
async fn ask(
    host: &crate::harness::Host,
    key: &str,
    body: serde_json::Value,
) -> (u16, String, String) {
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let cache = response
        .headers()
        .get("x-switchyard-cache")
        .map_or("none".into(), |v| v.to_str().unwrap().to_string());
    (status, cache, response.text().await.unwrap())
}

on_each_store!(answers_are_cached_per_team_and_hits_cost_nothing);
async fn answers_are_cached_per_team_and_hits_cost_nothing() {
    let (upstream, seen) = fake_upstream().await;
    let host = upstream_host(&upstream, &cache_config())
        .env("SWITCHYARD_MASTER_KEY", MASTER)
        .start()
        .await;
    let alice = host.create_user("alice").await;
    let key = scoped_key(&host, &alice, json!({"rpm": 1000})).await;
    let python = crate::harness::python_venv("openai-venv", &["openai==2.*"]);
    let base = format!("{}/v1", host.base);
    let args = [base.as_str(), &key, "fake-1", "uncached"];
    crate::harness::run_client_script(python, "cache_client.py", &args).await;
    let upstream_calls = seen.lock().unwrap().len();
    assert_eq!(upstream_calls, 8, "7 misses and the uncached route");

    // Usage counts the hits, at no cost.
    let (_, usage) = call!(host, alice, GET "/v1/me/usage");
    let total = &usage["total"];
    assert_eq!(total["requests"], 13, "{usage}");
    assert_eq!(total["cache_hits"], 5, "{usage}");
    // Six chats and the uncached one at $0.021 each, and the embedding:
    // hits add nothing.
    let cost = total["cost_usd"].as_f64().unwrap();
    let embedding = total["prompt_tokens"].as_u64().unwrap() - 7 * 11;
    let expected = 7.0 * 0.021 + embedding as f64 * 0.001;
    assert!(
        (cost - expected).abs() < 1e-9,
        "{cost} != {expected}: {usage}"
    );

    // Errors are never kept.
    let broken = json!({"model": "fake-broken", "messages": [{"role": "user", "content": "x"}]});
    for _ in 0..2 {
        let (status, cache, body) = ask(&host, &key, broken.clone()).await;
        assert!(status >= 400, "{body}");
        assert_ne!(cache, "hit", "{body}");
    }
    assert_eq!(seen.lock().unwrap().len(), 10, "both went upstream");

    // Another user's team does not see alice's answers.
    let bob = host.create_user("bob").await;
    let same = json!({"model": "fake-1", "max_tokens": 5, "messages": [{"role": "user", "content": "cache me"}]});
    let (status, cache, _) = ask(&host, &bob, same.clone()).await;
    assert_eq!((status, cache.as_str()), (200, "miss"));
    let (_, cache, _) = ask(&host, &bob, same.clone()).await;
    assert_eq!(cache, "hit");

    // The metric.
    let scrape = crate::metrics::scrape(&host).await;
    let count = |result| {
        crate::metrics::sample(
            &scrape,
            "switchyard_inference_cache_total",
            &[("result", result)],
        )
    };
    assert_eq!(
        (count("hit"), count("miss")),
        (Some(6.0), Some(10.0)),
        "{scrape}"
    );

    // Hosts on one database share the cache.
    if Engine::current() == Engine::Postgres {
        let other = upstream_host(&upstream, &cache_config())
            .env("SWITCHYARD_MASTER_KEY", MASTER)
            .same_database(&host)
            .start()
            .await;
        let before = seen.lock().unwrap().len();
        let (status, cache, _) = ask(&other, &bob, same).await;
        assert_eq!((status, cache.as_str()), (200, "hit"));
        assert_eq!(seen.lock().unwrap().len(), before);
    }
}
