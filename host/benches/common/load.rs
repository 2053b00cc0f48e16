//! The world the load benches drive: a team with a signed webhook to a
//! local receiver that counts arrivals, a project with `VERSIONS` versions
//! and a tag automation with a payload template; tags added through the
//! event API, one or many per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde_json::{Value, json};

use super::KEY;

/// Versions the tags are spread over.
pub const VERSIONS: usize = 500;

/// Arrival time of each tag at the receiver, and how often each delivery
/// id came.
#[derive(Clone, Default)]
pub struct Arrivals {
    pub at: Arc<Mutex<HashMap<String, Instant>>>,
    pub ids: Arc<Mutex<HashMap<String, usize>>>,
    pub count: Arc<AtomicUsize>,
}

/// A receiver on loopback that counts into `arrivals`; its base URL.
pub async fn receiver(arrivals: Arrivals) -> String {
    gated_receiver(arrivals, Arc::new(AtomicBool::new(true))).await
}

/// [`receiver`], which answers 410 Gone (counting nothing) while `up` is
/// false: a receiver that is down, whose webhook the first answer disables.
pub async fn gated_receiver(arrivals: Arrivals, up: Arc<AtomicBool>) -> String {
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap, body: Bytes| {
        let (arrivals, up) = (arrivals.clone(), up.clone());
        async move {
            if !up.load(Ordering::SeqCst) {
                return axum::http::StatusCode::GONE;
            }
            let now = Instant::now();
            let tag = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["tag"].as_str().map(str::to_string));
            let id = headers
                .get("x-service-delivery")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            *arrivals.ids.lock().unwrap().entry(id).or_insert(0) += 1;
            if let Some(tag) = tag {
                arrivals.at.lock().unwrap().insert(tag, now);
                arrivals.count.fetch_add(1, Ordering::SeqCst);
            }
            axum::http::StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// A request as the operator that must succeed.
pub async fn call(http: &reqwest::Client, base: &str, method: &str, path: &str, body: Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let response = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    assert!(
        status.is_success(),
        "{path}: {status} {}",
        response.text().await.unwrap()
    );
}

/// The project the tags go to.
pub const PROJECT: &str = "/v1/teams/bench/projects/load";

/// The webhook's settings, calling `receiver`; FIFO if `fifo` (else no
/// `ordering` at all, so that builds from before it can be measured).
pub fn webhook(receiver: &str, fifo: bool) -> Value {
    let mut settings = json!({"url": format!("{receiver}/hook"),
        "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    if fifo {
        settings["ordering"] = json!("fifo");
    }
    settings
}

/// The team, secrets, webhook, project, versions and automation.
pub async fn setup(http: &reqwest::Client, base: &str, receiver: &str) {
    let mut sink = webhook(receiver, false);
    sink["name"] = json!("sink");
    let steps = [
        ("POST", "/v1/teams".to_string(), json!({"name": "bench"})),
        (
            "PUT",
            "/v1/teams/bench/secrets/TOKEN".into(),
            json!({"value": "t0ken"}),
        ),
        (
            "PUT",
            "/v1/teams/bench/secrets/SIGN".into(),
            json!({"value": "s1gn"}),
        ),
        ("POST", "/v1/teams/bench/webhooks".into(), sink),
        (
            "POST",
            "/v1/teams/bench/projects".into(),
            json!({"name": "load"}),
        ),
        (
            "POST",
            format!("{PROJECT}/collections"),
            json!({"name": "model"}),
        ),
        (
            "POST",
            format!("{PROJECT}/automations"),
            json!({"name": "on-tag",
            "event": {"type": "ADD_ARTIFACT_TAG"}, "webhook": {"team": "bench", "name": "sink"},
            "action": "Webhooks",
            "payload": r#"{"event_type": "${event_type}", "tag": "${tag}", "version": "${artifact_version_string}", "author": "${event_author}", "accuracy": ${artifact_metadata.accuracy}}"#}),
        ),
    ];
    for (method, path, body) in steps {
        call(http, base, method, &path, body).await;
    }
    for _ in 0..VERSIONS {
        let path = format!("{PROJECT}/collections/model/versions");
        call(
            http,
            base,
            "POST",
            &path,
            json!({"metadata": {"accuracy": 0.9}}),
        )
        .await;
    }
}

/// The backlog's project: one version, and a tag automation calling
/// webhook `down` (at `receiver`), made beside [`setup`]'s.
pub const BACKLOG_PROJECT: &str = "/v1/teams/bench/projects/backlog";

/// Webhook `down`, project `backlog` with one version, and its automation.
pub async fn setup_backlog(http: &reqwest::Client, base: &str, receiver: &str) {
    let mut down = webhook(receiver, false);
    down["name"] = json!("down");
    let steps = [
        ("POST", "/v1/teams/bench/webhooks".to_string(), down),
        (
            "POST",
            "/v1/teams/bench/projects".into(),
            json!({"name": "backlog"}),
        ),
        (
            "POST",
            format!("{BACKLOG_PROJECT}/collections"),
            json!({"name": "model"}),
        ),
        (
            "POST",
            format!("{BACKLOG_PROJECT}/collections/model/versions"),
            json!({"metadata": {"accuracy": 0.5}}),
        ),
        (
            "POST",
            format!("{BACKLOG_PROJECT}/automations"),
            json!({"name": "on-tag",
            "event": {"type": "ADD_ARTIFACT_TAG"}, "webhook": {"team": "bench", "name": "down"},
            "action": "Webhooks",
            "payload": r#"{"tag": "${tag}", "version": "${artifact_version_string}"}"#}),
        ),
    ];
    for (method, path, body) in steps {
        call(http, base, method, &path, body).await;
    }
}

/// Adds tags `b{first}..b{first + n}` to the backlog's version in one request.
pub async fn tag_backlog(http: &reqwest::Client, base: &str, first: usize, n: usize) {
    let path = format!("{BACKLOG_PROJECT}/collections/model/versions/v0/tags");
    let tags: Vec<String> = (first..first + n).map(|i| format!("b{i}")).collect();
    call(http, base, "POST", &path, json!({ "tags": tags })).await;
}

/// Which versions the tags go to.
#[derive(Clone, Copy, PartialEq)]
pub enum Labels {
    /// Version `i % VERSIONS` for tag `i`.
    Spread,
    /// All on v0.
    OneVersion,
}

/// Adds tags `first..first + n` in one request.
pub async fn tag(http: &reqwest::Client, base: &str, labels: Labels, first: usize, n: usize) {
    let version = match labels {
        Labels::Spread => first % VERSIONS,
        Labels::OneVersion => 0,
    };
    let path = format!("{PROJECT}/collections/model/versions/v{version}/tags");
    let body = if n == 1 {
        json!({"tag": format!("e{first}")})
    } else {
        json!({"tags": (first..first + n).map(|i| format!("e{i}")).collect::<Vec<_>>()})
    };
    call(http, base, "POST", &path, body).await;
}

/// When `n` tags have arrived, or `None` after `limit`.
pub async fn wait_for(arrivals: &Arrivals, n: usize, limit: Duration) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if arrivals.count.load(Ordering::SeqCst) >= n {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

/// A memory figure of `/proc/PID/status` in MiB: `VmRSS` (resident now)
/// or `VmHWM` (the peak).
pub fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
