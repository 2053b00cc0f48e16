//! OAuth2 client credentials: deliveries and tests carry a token from the
//! receiver's authorization server (a small one here), and the receiver
//! takes only the tokens it issued.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use serde_json::{Value, json};

use crate::delivery::CONFIG;
use crate::harness::{Host, expect_invalid};
use crate::world::{PROJECT, World};

/// An authorization server with the receiver it guards.
struct AuthServer {
    base: String,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Tokens the receiver takes.
    valid: Mutex<HashSet<String>>,
    issued: AtomicU64,
    /// Seconds each new token lasts.
    lifetime_s: AtomicU64,
    /// The token endpoint answers 503.
    down: AtomicBool,
    /// What the receiver was sent: the token, and how it answered.
    hooks: Mutex<Vec<(String, u16)>>,
}

impl AuthServer {
    async fn start() -> AuthServer {
        let state = Arc::new(State::default());
        state.lifetime_s.store(3600, Ordering::SeqCst);
        let (token_state, hook_state) = (state.clone(), state.clone());
        let app = axum::Router::new()
            .route(
                "/token",
                axum::routing::post(async move |headers: HeaderMap, body: String| {
                    token(&token_state, &headers, &body)
                }),
            )
            .route(
                "/hook",
                axum::routing::post(async move |headers: HeaderMap| {
                    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
                    let token = bearer.and_then(|b| b.strip_prefix("Bearer ")).unwrap_or("");
                    let taken = hook_state.valid.lock().unwrap().contains(token);
                    let status = if taken { 200 } else { 401 };
                    hook_state
                        .hooks
                        .lock()
                        .unwrap()
                        .push((token.to_string(), status));
                    StatusCode::from_u16(status).unwrap()
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        AuthServer { base, state }
    }

    fn issued(&self) -> u64 {
        self.state.issued.load(Ordering::SeqCst)
    }

    fn hooks(&self) -> Vec<(String, u16)> {
        self.state.hooks.lock().unwrap().clone()
    }

    /// Waits for `n` requests at the receiver.
    async fn wait_for_hooks(&self, n: usize) -> Vec<(String, u16)> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let hooks = self.hooks();
            if hooks.len() >= n {
                return hooks;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {n}: {hooks:?}",
                hooks.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The receiver takes none of the tokens issued so far.
    fn revoke(&self) {
        self.state.valid.lock().unwrap().clear();
    }
}

/// The token endpoint: client `switchyard` with secret `s3cret`, scope
/// `hooks`, client credentials only.
fn token(state: &State, headers: &HeaderMap, body: &str) -> (StatusCode, axum::Json<Value>) {
    let error = |status: u16, code: &str| {
        (
            StatusCode::from_u16(status).unwrap(),
            axum::Json(json!({"error": code})),
        )
    };
    if state.down.load(Ordering::SeqCst) {
        return error(503, "temporarily_unavailable");
    }
    let basic = base64::engine::general_purpose::STANDARD.encode("switchyard:s3cret");
    let credentials = headers.get("authorization").and_then(|v| v.to_str().ok());
    if credentials != Some(&format!("Basic {basic}")) {
        return error(401, "invalid_client");
    }
    let form: HashSet<&str> = body.split('&').collect();
    if !form.contains("grant_type=client_credentials") || !form.contains("scope=hooks") {
        return error(400, "invalid_request");
    }
    let n = state.issued.fetch_add(1, Ordering::SeqCst);
    let token = format!("tok-{n}");
    state.valid.lock().unwrap().insert(token.clone());
    let lifetime = state.lifetime_s.load(Ordering::SeqCst);
    let granted = json!({"access_token": token, "token_type": "Bearer", "expires_in": lifetime});
    (StatusCode::OK, axum::Json(granted))
}

const WEBHOOK: &str = "/v1/teams/ml/webhooks/ci";

/// Webhook `ci` on the auth server's receiver, with its client credentials;
/// an automation on every tag.
async fn authorised(host: &Host, server: &AuthServer) -> World {
    let world = World::build(host, Some(&format!("{}/hook", server.base))).await;
    ok!(host, world.alice, PUT "/v1/teams/ml/secrets/CLIENT_SECRET", {"value": "s3cret"});
    let auth = json!({"type": "oauth2_client_credentials", "token_url": format!("{}/token", server.base),
        "client_id": "switchyard", "client_secret_secret": "CLIENT_SECRET", "scope": "hooks"});
    let url = format!("{}/hook", server.base);
    for (wrong, param) in [
        (
            json!({"access_token_secret": "TOKEN", "auth": auth}),
            "auth",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": "http://10.0.0.1/token",
            "client_id": "switchyard", "client_secret_secret": "CLIENT_SECRET"}}),
            "auth.token_url",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": format!("{}/token", server.base),
            "client_id": "switchyard", "client_secret_secret": "NOPE"}}),
            "auth.client_secret_secret",
        ),
        (
            json!({"auth": {"type": "oauth2_client_credentials", "token_url": format!("{}/token", server.base),
            "client_id": "", "client_secret_secret": "CLIENT_SECRET"}}),
            "auth.client_id",
        ),
    ] {
        let mut settings = wrong;
        settings["url"] = json!(url);
        let got = call!(host, world.alice, PUT "{WEBHOOK}", settings);
        expect_invalid(&got, param);
    }
    let settings = json!({"url": url, "signing_secret": "SIGN", "auth": auth});
    let saved = ok!(host, world.alice, PUT "{WEBHOOK}", settings);
    assert_eq!(saved["auth"], auth, "{saved}");
    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    ok!(host, world.alice, POST "{PROJECT}/automations", automation);
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});
    world
}

async fn tag(host: &Host, world: &World, tag: &str) {
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tag": tag});
}

on_each_store!(deliveries_carry_a_token_from_the_receivers_authorization_server);
async fn deliveries_carry_a_token_from_the_receivers_authorization_server() {
    let server = AuthServer::start().await;
    let host = Host::with_config(CONFIG).await;
    let world = authorised(&host, &server).await;
    let tags: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tags": tags});
    let hooks = server.wait_for_hooks(5).await;
    assert!(
        hooks
            .iter()
            .all(|(t, status)| t == "tok-0" && *status == 200),
        "{hooks:?}"
    );
    assert_eq!(server.issued(), 1, "one token, shared by the host's sends");
    let test = ok!(host, world.alice, POST "{WEBHOOK}/test", {});
    assert_eq!(test["success"], true, "{test}");
    assert_eq!(server.issued(), 1, "the test uses it too");
    assert_eq!(server.hooks().len(), 6);

    // The secret is never shown, and protected while the webhook uses it.
    let shown = ok!(host, world.bob, GET "{WEBHOOK}");
    assert!(!shown.to_string().contains("s3cret"), "{shown}");
    let (status, body) = call!(host, world.alice, DELETE "/v1/teams/ml/secrets/CLIENT_SECRET");
    assert_eq!(status, 409, "{body}");
    let console = crate::console::Visitor::signed_in(&host, &world.alice).await;
    let page = console.get("/teams/ml/webhooks/ci").await.body;
    let token_url = format!("{}/token", server.base);
    for shown in [
        format!("a token from <code>{token_url}</code> as client <code>switchyard</code>"),
        format!(r#"name="oauth_token_url" value="{token_url}""#),
        r#"<option value="CLIENT_SECRET" selected>"#.to_string(),
    ] {
        assert!(page.contains(&shown), "{shown} on the page: {page}");
    }
    assert!(!page.contains("s3cret"));

    // Revoked early: the 401 gets one more try, with a fresh token, within
    // the same attempt.
    server.revoke();
    tag(&host, &world, "after-revoke").await;
    let hooks = server.wait_for_hooks(8).await;
    assert_eq!(
        hooks[6..],
        [("tok-0".to_string(), 401), ("tok-1".to_string(), 200)]
    );
    let executions = format!("{PROJECT}/automations/tags/executions");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let newest = loop {
        let list = ok!(host, world.bob, GET "{executions}");
        let newest = list["data"][0].clone();
        if newest["status"] == "Finished" {
            break newest;
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(newest["attempts"].as_array().unwrap().len(), 1, "{newest}");

    // A token that expires is replaced before it does, without a 401.
    server.state.lifetime_s.store(1, Ordering::SeqCst);
    server.revoke();
    tag(&host, &world, "short-1").await;
    server.wait_for_hooks(10).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    tag(&host, &world, "short-2").await;
    let hooks = server.wait_for_hooks(11).await;
    assert_eq!(hooks[10], ("tok-3".to_string(), 200), "{hooks:?}");
    assert_eq!(server.issued(), 4);
}

on_each_store!(a_token_endpoint_that_fails_is_an_attempts_error_that_says_so);
async fn a_token_endpoint_that_fails_is_an_attempts_error_that_says_so() {
    let server = AuthServer::start().await;
    let host = Host::with_config(CONFIG).await;
    let world = authorised(&host, &server).await;
    server.state.down.store(true, Ordering::SeqCst);
    tag(&host, &world, "while-down").await;
    let executions = format!("{PROJECT}/automations/tags/executions");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let error = loop {
        let list = ok!(host, world.bob, GET "{executions}");
        let attempts = list["data"][0]["attempts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(first) = attempts.first() {
            break first["error"].as_str().unwrap_or_default().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "{list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let says = format!(
        "could not get an OAuth2 token from {}/token: the token endpoint answered 503 (temporarily_unavailable)",
        server.base
    );
    assert!(error.starts_with(&says), "{error}");
    assert!(server.hooks().is_empty(), "nothing sent without a token");
    // Retried like any failed attempt: once the server is back, it goes.
    server.state.down.store(false, Ordering::SeqCst);
    let hooks = server.wait_for_hooks(1).await;
    assert_eq!(hooks[0], ("tok-0".to_string(), 200));
}
