//! Console page latency (`just bench-console`): the release host with a
//! team, a project, secrets, webhooks and an automation, signed in through
//! the real form; each page fetched in turn with the API's JSON of the same
//! team (`GET /v1/teams/{team}/webhooks`) alternating, as the reference.
//! Prints p50 and p99 per page and the ratio of each p50 to the reference's.
//! The figure the web-console issue names: every page's p50 under 20 ms.
//! Asserts nothing about time.
//!
//! `BENCH_REQUESTS=N` sets the requests per page (default 400).

use std::time::Instant;

use reqwest::header::{COOKIE, SET_COOKIE};
use serde_json::{Value, json};

mod common;
use common::{KEY, NO_MODEL, percentile, start_host};

fn main() {
    common::block_on(run());
}

async fn run() {
    let requests: usize = std::env::var("BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let host = start_host(&format!(
        "{NO_MODEL}[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n"
    ));
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    populate(&http, &host.base).await;
    let cookie = sign_in(&http, &host.base).await;
    let pages = [
        "/teams",
        "/teams/ml",
        "/teams/ml/webhooks/hook0",
        "/teams/ml/projects/p",
        "/teams/ml/projects/p/automations/new",
        "/teams/ml/projects/p/automations/deploy",
        "/keys",
    ];
    let reference = "/v1/teams/ml/webhooks";
    println!("console pages, {requests} requests each, alternating with GET {reference} (JSON)");
    for page in pages {
        let mut page_ms = Vec::with_capacity(requests);
        let mut api_ms = Vec::with_capacity(requests);
        for _ in 0..requests {
            page_ms.push(timed_get(&http, &host.base, page, Some(&cookie)).await);
            api_ms.push(timed_get(&http, &host.base, reference, None).await);
        }
        page_ms.sort_by(f64::total_cmp);
        api_ms.sort_by(f64::total_cmp);
        let (p50, p99, reference_p50) = (
            percentile(&page_ms, 0.5),
            percentile(&page_ms, 0.99),
            percentile(&api_ms, 0.5),
        );
        println!(
            "{page:<42} p50 {p50:6.2} ms  p99 {p99:6.2} ms  reference p50 {reference_p50:5.2} ms  ratio {:.1}x",
            p50 / reference_p50
        );
    }
}

/// A team with ten secrets and ten webhooks, a project and an automation.
async fn populate(http: &reqwest::Client, base: &str) {
    let api = |method: reqwest::Method, path: &str, body: Value| {
        http.request(method, format!("{base}{path}"))
            .bearer_auth(KEY)
            .json(&body)
            .send()
    };
    use reqwest::Method;
    api(Method::POST, "/v1/teams", json!({"name": "ml"}))
        .await
        .unwrap();
    for i in 0..10 {
        let path = format!("/v1/teams/ml/secrets/S{i}");
        api(Method::PUT, &path, json!({"value": "v"}))
            .await
            .unwrap();
    }
    for i in 0..10 {
        let hook = json!({"name": format!("hook{i}"), "url": "http://127.0.0.1:9/x",
            "access_token_secret": "S0", "signing_secret": "S1"});
        api(Method::POST, "/v1/teams/ml/webhooks", hook)
            .await
            .unwrap();
    }
    api(Method::POST, "/v1/teams/ml/projects", json!({"name": "p"}))
        .await
        .unwrap();
    let automation = json!({"name": "deploy", "event": {"type": "ADD_ARTIFACT_ALIAS", "alias_regex": "^prod"},
        "webhook": {"team": "ml", "name": "hook0"}, "action": "Webhooks",
        "payload": "{\"alias\": \"${alias}\"}"});
    let created = api(
        Method::POST,
        "/v1/teams/ml/projects/p/automations",
        automation,
    )
    .await
    .unwrap();
    assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
}

/// Milliseconds for one GET of `path`: a page with the session `cookie`,
/// or the API with the operator's key.
async fn timed_get(http: &reqwest::Client, base: &str, path: &str, cookie: Option<&str>) -> f64 {
    let started = Instant::now();
    let request = http.get(format!("{base}{path}"));
    let request = match cookie {
        Some(cookie) => request.header(COOKIE, cookie),
        // As the API is called elsewhere in this bench: a JSON body.
        None => request.bearer_auth(KEY).json(&Value::Null),
    };
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.bytes().await.unwrap();
    started.elapsed().as_secs_f64() * 1e3
}

/// Signs in through the form with the operator's key; the session cookie.
async fn sign_in(http: &reqwest::Client, base: &str) -> String {
    let form = http.get(format!("{base}/sign-in")).send().await.unwrap();
    let form_cookie = pair(form.headers().get(SET_COOKIE).unwrap().to_str().unwrap());
    let html = form.text().await.unwrap();
    let token = html
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    let signed = http
        .post(format!("{base}/sign-in"))
        .header(COOKIE, form_cookie)
        .form(&[("csrf", token.as_str()), ("api_key", KEY)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303);
    signed
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| pair(v.to_str().unwrap()))
        .find(|c| c.starts_with("sy_session="))
        .unwrap()
}

fn pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}
