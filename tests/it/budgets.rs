//! USD budgets hold for every request shape: no `max_tokens`, several
//! choices, prompts that tokenize densely, streams the client leaves, and
//! prompts the upstream serves from its cache. Sixty requests at once
//! against a budget worth ten, on one host (sled) or two on one database,
//! against an upstream that bills as a real one does (an outside system,
//! so a fake is fair).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::gateway::scoped_key;
use crate::harness::{Engine, Host};

/// USD per million tokens, as the upstream bills and the host is told.
const INPUT: f64 = 1000.0;
const CACHED: f64 = 100.0;
const OUTPUT: f64 = 2000.0;

/// What the upstream generates for a choice when nothing stops it sooner.
const NATURAL: u64 = 1000;

/// The budget: ten requests of 1,000 prompt and 1,000 output tokens.
const BUDGET: f64 = 30.0;

/// What the upstream billed, by its model id, in USD.
type Ledger = Arc<Mutex<HashMap<String, f64>>>;

fn bill(ledger: &Ledger, model: &str, prompt: u64, cached: u64, completion: u64) {
    let usd =
        ((prompt - cached) as f64 * INPUT + cached as f64 * CACHED + completion as f64 * OUTPUT)
            / 1e6;
    *ledger.lock().unwrap().entry(model.into()).or_default() += usd;
}

/// The prompt's tokens as the upstream's tokenizer counts them: four bytes
/// a token, but one a byte for CJK (the most a byte-level tokenizer makes).
fn prompt_tokens(body: &Value) -> u64 {
    let bytes: usize = (body["messages"].as_array().unwrap().iter())
        .map(|m| m["content"].as_str().unwrap_or_default().len())
        .sum();
    match body["model"].as_str() {
        Some("dense" | "uncapped") => bytes as u64,
        _ => (bytes as u64).div_ceil(4),
    }
}

async fn completions(State(ledger): State<Ledger>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap();
    let model = body["model"].as_str().unwrap().to_string();
    let prompt = prompt_tokens(&body);
    let cached = if model == "cached" {
        prompt * 8 / 10
    } else {
        0
    };
    let most = body["max_tokens"]
        .as_u64()
        .map_or(NATURAL, |m| m.min(NATURAL));
    let usage = |completion: u64| {
        json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
               "prompt_tokens_details": {"cached_tokens": cached}})
    };
    if body["stream"] == true {
        let meter = Meter {
            ledger,
            model,
            prompt: (prompt, cached),
            sent: 0,
        };
        // The stream a client leaves comes slowly, as a model generates.
        let pace = Duration::from_millis(if meter.model == "left" { 20 } else { 0 });
        return stream(meter, most, usage(most), pace);
    }
    let n = body["n"].as_u64().unwrap_or(1);
    bill(&ledger, &model, prompt, cached, most * n);
    let choices: Vec<Value> = (0..n)
        .map(|i| json!({"index": i, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}))
        .collect();
    axum::Json(
        json!({"id": "b-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": choices, "usage": usage(most * n)}),
    )
    .into_response()
}

/// Bills a stream when it ends or the host hangs up on it: its prompt
/// (and the tokens of it read from the cache) and the tokens sent.
struct Meter {
    ledger: Ledger,
    model: String,
    prompt: (u64, u64),
    sent: u64,
}

impl Drop for Meter {
    fn drop(&mut self) {
        let (prompt, cached) = self.prompt;
        bill(&self.ledger, &self.model, prompt, cached, self.sent);
    }
}

/// A token a chunk, `pace` apart, then `usage`.
fn stream(meter: Meter, most: u64, usage: Value, pace: Duration) -> Response {
    let body = futures_util::stream::unfold(Some(meter), move |meter| {
        let usage = usage.clone();
        async move {
            let mut meter = meter?;
            if meter.sent == most {
                let last = json!({"id": "b-2", "object": "chat.completion.chunk", "created": 1, "choices": [], "usage": usage});
                drop(meter);
                let text = format!("data: {last}\n\ndata: [DONE]\n\n");
                return Some((Ok::<_, std::convert::Infallible>(text), None));
            }
            if meter.sent > 0 && !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
            let chunk = json!({"id": "b-2", "object": "chat.completion.chunk", "created": 1,
                "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]});
            meter.sent += 1;
            Some((Ok(format!("data: {chunk}\n\n")), Some(meter)))
        }
    });
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

async fn billing_upstream() -> (String, Ledger) {
    let ledger = Ledger::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(ledger.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr.to_string(), ledger)
}

/// The shapes, by the model each is sent to.
const SHAPES: [&str; 5] = ["uncapped", "n4", "dense", "left", "cached"];

fn config(upstream: &str) -> String {
    let models: Vec<String> = SHAPES.iter().map(|m| format!("\"b-{m}={m}\"")).collect();
    let mut config = format!(
        "[inference]\nembedded = false\n[[inference.upstreams]]\nname = \"billing\"\nbase_url = \"http://{upstream}/v1\"\napi_key_env = \"FAKE_KEY\"\nmodels = [{}]\ntimeout_ms = 60000\n",
        models.join(", ")
    );
    for m in SHAPES {
        config.push_str(&format!(
            "[[inference.prices]]\nmodel = \"b-{m}\"\ninput_per_mtok = {INPUT:.1}\noutput_per_mtok = {OUTPUT:.1}\ncached_input_per_mtok = {CACHED:.1}\n"
        ));
    }
    config
}

/// The request of each shape: a prompt of 4,000 bytes of English (1,000
/// tokens to the upstream), or of 1,000 bytes of CJK (1,000 tokens too, at
/// one a byte), which the prompt's bound counts exactly, so that the
/// request without `max_tokens` is held by its output cap alone.
fn request(shape: &str) -> Value {
    let english = "word ".repeat(800);
    let cjk = format!("{}a", "漢".repeat(333));
    let dense = matches!(shape, "dense" | "uncapped");
    let prompt = if dense { cjk } else { english };
    let mut body =
        json!({"model": format!("b-{shape}"), "messages": [{"role": "user", "content": prompt}]});
    match shape {
        "uncapped" => {}
        "n4" => {
            body["max_tokens"] = json!(1000);
            body["n"] = json!(4);
        }
        "left" => {
            body["max_tokens"] = json!(1000);
            body["stream"] = json!(true);
        }
        _ => body["max_tokens"] = json!(1000),
    }
    body
}

/// Sends `body`; a stream is left after its first chunk. The answer if it
/// was let in (`null` for a stream).
async fn send(host: &Host, key: &str, body: &Value) -> Option<Value> {
    let mut response = (host.http.post(host.url("/v1/chat/completions")))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    if status == 429 {
        let refusal: Value = response.json().await.unwrap();
        assert_eq!(refusal["error"]["type"], "insufficient_quota", "{refusal}");
        return None;
    }
    assert_eq!(status, 200, "{}", response.text().await.unwrap());
    if body["stream"] == true {
        let first = tokio::time::timeout(Duration::from_secs(10), response.chunk()).await;
        let first = first.expect("no first chunk within 10 s").unwrap();
        assert!(first.is_some(), "the stream ended before its first chunk");
        drop(response);
        return Some(Value::Null);
    }
    Some(response.json().await.unwrap())
}

/// Waits until `user`'s usage counts `requests` and its cost stops moving;
/// the cost.
async fn recorded(host: &Host, user: &str, requests: usize) -> f64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, usage) = host.call("GET", "/v1/me/usage", user, None).await;
        assert_eq!(status, 200, "{usage}");
        if usage["total"]["requests"] == requests {
            return usage["total"]["cost_usd"].as_f64().unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "usage counted {} of {requests} requests after 30 s: {usage}",
            usage["total"]["requests"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_each_store!(usd_budgets_hold_for_every_request_shape);
async fn usd_budgets_hold_for_every_request_shape() {
    let (upstream, ledger) = billing_upstream().await;
    let master = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let first = Host::builder()
        .env("FAKE_KEY", "up-key")
        .env("SWITCHYARD_MASTER_KEY", master)
        .config(&config(&upstream))
        .start()
        .await;
    let mut hosts = vec![first];
    if Engine::current() == Engine::Postgres {
        let second = Host::builder()
            .env("FAKE_KEY", "up-key")
            .env("SWITCHYARD_MASTER_KEY", master)
            .config(&config(&upstream))
            .same_database(&hosts[0])
            .start()
            .await;
        hosts.push(second);
    }
    for shape in SHAPES {
        let user = hosts[0].create_user(&format!("user-{shape}")).await;
        let key = scoped_key(&hosts[0], &user, json!({"usd_per_day": BUDGET})).await;
        let body = request(shape);
        let calls = (0..60).map(|i| send(&hosts[i % hosts.len()], &key, &body));
        let answers: Vec<Value> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .flatten()
            .collect();
        let admitted = answers.len();
        assert!(admitted >= 1, "{shape}: none of 60 let in");
        if shape == "cached" {
            let usage = &answers[0]["usage"];
            assert_eq!(usage["prompt_tokens"], 1000, "{usage}");
            assert_eq!(
                usage["prompt_tokens_details"]["cached_tokens"], 800,
                "{usage}"
            );
        }
        let mut spent = recorded(&hosts[0], &user, admitted).await;
        if shape == "cached" {
            // Messages reports the cache as Anthropic does, and is priced
            // alike, once the burst's reservations are settled (each second).
            tokio::time::sleep(Duration::from_millis(1_300)).await;
            let mut messages = body.clone();
            messages["max_tokens"] = json!(1000);
            let response = (hosts[0].http.post(hosts[0].url("/v1/messages")))
                .header("x-api-key", &key)
                .json(&messages)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let reply: Value = response.json().await.unwrap();
            assert_eq!(status, 200, "{reply}");
            let usage = &reply["usage"];
            assert_eq!(
                (&usage["input_tokens"], &usage["cache_read_input_tokens"]),
                (&json!(200), &json!(800)),
                "{reply}"
            );
            spent = recorded(&hosts[0], &user, admitted + 1).await;
            let (_, usage) = hosts[0].call("GET", "/v1/me/usage", &user, None).await;
            let cached = 800 * (admitted + 1);
            assert_eq!(usage["total"]["cached_tokens"], cached, "{usage}");
        }
        // The upstream bills a stream it was hung up on when it notices.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let billed = ledger.lock().unwrap().get(shape).copied().unwrap_or(0.0);
        eprintln!("{shape}: {admitted} of 60 let in, ${spent} recorded, ${billed} billed");
        assert!(
            spent <= BUDGET * 1.05,
            "{shape}: ${spent} spent of a ${BUDGET} budget ({admitted} let in)"
        );
        if shape == "left" {
            // Its prompt counted as admission bounds it, its output a token
            // a chunk streamed: never less than the upstream billed.
            assert!(
                spent >= billed,
                "{shape}: ${spent} recorded, ${billed} billed"
            );
        } else {
            assert!(
                (spent - billed).abs() < 1e-6,
                "{shape}: ${spent} recorded, ${billed} billed"
            );
        }
    }
}
