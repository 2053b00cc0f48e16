//! The OpenAI-compatible API, served by the real embedded model.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{
    Host, INFERENCE, OPERATOR_KEY, assert_error_shape, expect_error, into_parts, python_venv,
    sse_chunks,
};
use crate::world::World;

pub(crate) const MODEL: &str = "SmolLM2-135M-Instruct";

/// The shared world (see `world.rs`); returns alice's key.
async fn world(host: &Host) -> String {
    World::build(host, None).await.alice
}

fn ask(text: &str, extra: Value) -> Value {
    let mut body = json!({"model": MODEL, "messages": [{"role": "user", "content": text}]});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

async fn chat(host: &Host, key: &str, body: &Value) -> (u16, Value) {
    host.call("POST", "/v1/chat/completions", key, Some(body))
        .await
}

fn content(body: &Value) -> String {
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

on_each_store!(models_are_listed_for_callers_with_a_key);
async fn models_are_listed_for_callers_with_a_key() {
    let host = Host::with_model().await;
    let alice = host.create_user("alice").await;
    let (status, body) = call!(host, alice, GET "/v1/models");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    let model = &body["data"][0];
    assert_eq!(
        (&model["id"], &model["object"], &model["root"]),
        (&json!(MODEL), &json!("model"), &json!(MODEL))
    );
    assert!(
        model["created"].is_u64() && model["owned_by"].is_string(),
        "{model}"
    );
    let (status, body) = call!(host, alice, GET "/v1/models/{MODEL}");
    assert_eq!((status, &body["id"]), (200, &json!(MODEL)));
    let (status, body) = host.get_anon("/v1/models").await;
    expect_error(&(status, body.clone()), 401, "invalid_api_key", None);
    assert_eq!(assert_error_shape(&body)["type"], "authentication_error");
}

on_each_store!(a_completion_has_usage_that_adds_up_and_is_counted_for_its_project);
async fn a_completion_has_usage_that_adds_up_and_is_counted_for_its_project() {
    let host = Host::with_model().await;
    let alice = world(&host).await;
    let body = ask(
        "Name three colours.",
        json!({"max_tokens": 6, "temperature": 0}),
    );
    let mut totals = (0, 0);
    for header in ["Service-Project", "OpenAI-Project"] {
        let response = host
            .http
            .post(host.url("/v1/chat/completions"))
            .bearer_auth(&alice)
            .header(header, "ml/vision")
            .json(&body)
            .send()
            .await
            .unwrap();
        let (status, reply) = into_parts(response).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["object"], "chat.completion");
        assert!(reply["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(reply["choices"][0]["message"]["role"], "assistant");
        assert_eq!(reply["choices"][0]["finish_reason"], "length");
        assert!(!content(&reply).is_empty());
        let usage = &reply["usage"];
        let (prompt, completion) = (
            usage["prompt_tokens"].as_u64().unwrap(),
            usage["completion_tokens"].as_u64().unwrap(),
        );
        assert_eq!(completion, 6, "max_tokens is honoured");
        assert!(
            prompt > 10,
            "the chat template adds a system prompt: {usage}"
        );
        assert_eq!(usage["total_tokens"].as_u64().unwrap(), prompt + completion);
        totals = (totals.0 + prompt, totals.1 + completion);
    }
    let (status, usage) = call!(host, alice, GET "/v1/teams/ml/projects/vision/usage");
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["total"]["requests"], 2);
    assert_eq!(usage["total"]["prompt_tokens"].as_u64().unwrap(), totals.0);
    assert_eq!(
        usage["total"]["completion_tokens"].as_u64().unwrap(),
        totals.1
    );
    assert_eq!(usage["by_model"][MODEL]["requests"], 2);
    assert_eq!(
        usage["rows"].as_array().unwrap().len(),
        1,
        "one key, one model, one day"
    );
    // Without a project header, usage goes to the caller, not the project,
    // and the caller reads it at /v1/me/usage.
    let (_, mine) = call!(host, alice, GET "/v1/me/usage");
    assert_eq!(mine["total"]["requests"], 0, "{mine}");
    let (status, reply) = chat(&host, &alice, &body).await;
    assert_eq!(status, 200);
    let (_, after) = call!(host, alice, GET "/v1/teams/ml/projects/vision/usage");
    assert_eq!(after["total"]["requests"], 2);
    let (status, mine) = call!(host, alice, GET "/v1/me/usage");
    assert_eq!(status, 200, "{mine}");
    assert_eq!(mine["user"], "alice");
    assert_eq!(mine["total"]["requests"], 1);
    for field in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(mine["total"][field], reply["usage"][field], "{field}");
    }
    assert_eq!(mine["by_model"][MODEL]["requests"], 1);
    let answer = host.call("GET", "/v1/me/usage", "sy-not-a-key", None).await;
    expect_error(&answer, 401, "invalid_api_key", None);
}

on_each_store!(a_stream_sends_role_content_finish_reason_usage_and_done);
async fn a_stream_sends_role_content_finish_reason_usage_and_done() {
    let host = Host::with_model().await;
    let alice = world(&host).await;
    let body = ask(
        "Say hello.",
        json!({"max_tokens": 8, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(&alice)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let chunks = sse_chunks(&response.text().await.unwrap());
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["id"], chunks[0]["id"], "one id across the stream");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let (usage_chunk, with_choices) = chunks.split_last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 8);
    let last = with_choices.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(
        with_choices[..with_choices.len() - 1]
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
    assert!(
        with_choices.iter().all(|c| c["usage"].is_null()),
        "usage is null until the last chunk"
    );
    let streamed: String = with_choices
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    // The same request unstreamed gives the same text.
    let (_, whole) = chat(
        &host,
        &alice,
        &ask("Say hello.", json!({"max_tokens": 8, "temperature": 0})),
    )
    .await;
    assert_eq!(streamed, content(&whole));
}

on_each_store!(stop_sequences_end_the_text_before_them);
async fn stop_sequences_end_the_text_before_them() {
    let host = Host::with_model().await;
    let alice = world(&host).await;
    let question = "Write one sentence about the sea.";
    let (_, free) = chat(
        &host,
        &alice,
        &ask(question, json!({"max_tokens": 24, "temperature": 0})),
    )
    .await;
    let text = content(&free);
    let words: Vec<&str> = text.split_whitespace().collect();
    assert!(words.len() >= 4, "{text}");
    let stop = format!(" {}", words[2]);
    let cut = &text[..text.find(&stop).unwrap()];
    for stream in [false, true] {
        let body = ask(
            question,
            json!({"max_tokens": 24, "temperature": 0, "stop": [stop.clone(), "\u{1F600}never"], "stream": stream}),
        );
        let response = host
            .http
            .post(host.url("/v1/chat/completions"))
            .bearer_auth(&alice)
            .json(&body)
            .send()
            .await
            .unwrap();
        let raw = response.text().await.unwrap();
        let (got, finish) = if stream {
            let chunks = sse_chunks(&raw);
            let text: String = chunks
                .iter()
                .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                .collect();
            (
                text,
                chunks.last().unwrap()["choices"][0]["finish_reason"].clone(),
            )
        } else {
            let reply: Value = serde_json::from_str(&raw).unwrap();
            (
                content(&reply),
                reply["choices"][0]["finish_reason"].clone(),
            )
        };
        assert_eq!(got, cut, "stream: {stream}");
        assert_eq!(finish, "stop");
    }
}

on_each_store!(greedy_replies_match_the_reference_implementation);
/// The WASM kernels compute what candle's reference model computes on the
/// same Q4_1 weights: its greedy reply, run natively, begins with this text.
/// So they do with one instance of the model, and with the second instance
/// (waited for until ready), which evaluates the prompt's first half and
/// takes half of the output layer: its log shows it ran tasks.
async fn greedy_replies_match_the_reference_implementation() {
    for second_instance in [false, true] {
        let host = Host::builder()
            .with_model()
            .config(&format!("{INFERENCE}\nsecond_instance = {second_instance}"))
            .env(
                "RUST_LOG",
                "info,switchyard::plugin::backend::parallel=debug",
            )
            .start()
            .await;
        let alice = world(&host).await;
        if second_instance {
            host.wait_for_log(&["the second instance is ready"]).await;
        }
        let body = ask(
            "Name three colours.",
            json!({"max_tokens": 12, "temperature": 0}),
        );
        for attempt in 0..3 {
            let (status, reply) = chat(&host, &alice, &body).await;
            assert_eq!(status, 200, "{reply}");
            assert_eq!(
                content(&reply),
                "1. Red: This is the most obvious colour, but",
                "second instance {second_instance}, request {attempt}"
            );
        }
        assert_eq!(
            host.log().contains("the second instance ran a task"),
            second_instance,
            "the second instance took part exactly when configured"
        );
    }
}

on_each_store!(the_same_seed_gives_the_same_text);
async fn the_same_seed_gives_the_same_text() {
    let host = Host::with_model().await;
    let alice = world(&host).await;
    let mut texts = Vec::new();
    for seed in [7, 7, 8, 9] {
        let body = ask(
            "Tell me a story.",
            json!({"max_tokens": 12, "temperature": 1.0, "seed": seed}),
        );
        let (status, reply) = chat(&host, &alice, &body).await;
        assert_eq!(status, 200, "{reply}");
        texts.push(content(&reply));
    }
    assert_eq!(texts[0], texts[1]);
    assert!(
        texts[2] != texts[0] || texts[3] != texts[0],
        "seeds change the sampling: {texts:?}"
    );
}

on_each_store!(bad_requests_get_openai_error_objects);
async fn bad_requests_get_openai_error_objects() {
    let host = Host::with_model().await;
    let alice = world(&host).await;
    let mallory = host.create_user("mallory").await;
    let cases = [
        (
            json!({"model": "gpt-17", "messages": [{"role": "user", "content": "hi"}]}),
            404,
            Some("model"),
        ),
        (ask("hi", json!({"n": 2})), 400, Some("n")),
        (
            ask("hi", json!({"temperature": 3})),
            400,
            Some("temperature"),
        ),
        (
            ask("hi", json!({"stop": ["a", "b", "c", "d", "e"]})),
            400,
            Some("stop"),
        ),
        (ask("hi", json!({"max_tokens": 0})), 400, Some("max_tokens")),
        (
            ask("hi", json!({"frobnicate": true})),
            400,
            Some("frobnicate"),
        ),
        (
            json!({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}),
            400,
            Some("messages[0].role"),
        ),
        (
            json!({"model": MODEL, "messages": []}),
            400,
            Some("messages"),
        ),
    ];
    for (body, status, param) in cases {
        let (got, reply) = chat(&host, &alice, &body).await;
        assert_eq!(got, status, "{body} → {reply}");
        let error = assert_error_shape(&reply);
        if let Some(param) = param {
            assert_eq!(error["param"], param, "{reply}");
        }
        if status == 404 {
            assert_eq!(error["code"], "model_not_found", "{reply}");
        }
    }
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(&mallory)
        .header("Service-Project", "ml/vision")
        .json(&ask("hi", json!({})))
        .send()
        .await
        .unwrap();
    let (status, reply) = into_parts(response).await;
    expect_error(&(status, reply.clone()), 403, "permission_denied", None);
    assert_eq!(assert_error_shape(&reply)["type"], "permission_error");
    let (status, reply) = host.get_anon("/v1/chat/completions").await;
    expect_error(&(status, reply.clone()), 405, "method_not_allowed", None);
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth("sk-wrong")
        .json(&ask("hi", json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

on_each_store!(a_full_inference_queue_answers_429_at_once);
async fn a_full_inference_queue_answers_429_at_once() {
    // No workers and room for one: whichever request comes first waits
    // forever, and the other is refused at once.
    let host = Host::builder()
        .with_model()
        .config(&format!(
            "{INFERENCE}\n[queues.inference]\nworkers = 0\ncapacity = 1\n"
        ))
        .start()
        .await;
    let request = || async {
        let response = host
            .http
            .post(host.url("/v1/chat/completions"))
            .bearer_auth(OPERATOR_KEY)
            .json(&ask("hi", json!({"max_tokens": 2})))
            .timeout(Duration::from_secs(3))
            .send()
            .await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        Ok::<_, reqwest::Error>((
            status,
            serde_json::from_str::<Value>(&text).unwrap_or_default(),
        ))
    };
    let (first, second) = tokio::join!(request(), request());
    let (status, reply) = match (first, second) {
        (Ok(refused), Err(waited)) | (Err(waited), Ok(refused)) => {
            assert!(waited.is_timeout(), "{waited}");
            refused
        }
        (first, second) => panic!("one request must wait and one be refused: {first:?} {second:?}"),
    };
    expect_error(&(status, reply.clone()), 429, "rate_limit_exceeded", None);
    let error = assert_error_shape(&reply);
    assert_eq!(error["type"], "rate_limit_error", "{reply}");
    assert!(
        error["message"].as_str().unwrap().contains("queue is full"),
        "{reply}"
    );
}

on_each_store!(a_project_over_its_concurrency_limit_gets_429_and_a_dropped_stream_frees_its_slot);
async fn a_project_over_its_concurrency_limit_gets_429_and_a_dropped_stream_frees_its_slot() {
    let host = Host::builder()
        .with_model()
        .config(&format!("{INFERENCE}per_project_concurrency = 1"))
        .start()
        .await;
    let alice = world(&host).await;
    let long = ask(
        "Write a long essay about rivers.",
        json!({"max_tokens": 2000, "stream": true}),
    );
    let mut first = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(&alice)
        .header("Service-Project", "ml/vision")
        .json(&long)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    first.chunk().await.unwrap().expect("a first chunk");
    let short = ask("hi", json!({"max_tokens": 2}));
    let request = || {
        host.http
            .post(host.url("/v1/chat/completions"))
            .bearer_auth(&alice)
            .header("Service-Project", "ml/vision")
            .json(&short)
    };
    let (status, reply) = into_parts(request().send().await.unwrap()).await;
    expect_error(&(status, reply.clone()), 429, "rate_limit_exceeded", None);
    assert!(
        assert_error_shape(&reply)["message"]
            .as_str()
            .unwrap()
            .contains("Concurrency limit reached")
    );
    // Hanging up stops generation (2,000 tokens would take a minute).
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (status, reply) = into_parts(request().send().await.unwrap()).await;
        if status == 200 {
            break;
        }
        expect_error(&(status, reply.clone()), 429, "rate_limit_exceeded", None);
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned stream kept generating"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_each_store!(the_stock_openai_python_client_works);
async fn the_stock_openai_python_client_works() {
    let host = Host::with_model().await;
    let alice = world(&host).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/openai_client.py");
    let output = tokio::process::Command::new(openai_python())
        .arg(script)
        .arg(host.url("/v1"))
        .arg(&alice)
        .output()
        .await
        .expect("running python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the openai client failed:\n{stdout}\n{stderr}\n(.ci/run installs it: pip install openai)"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

on_each_store!(the_stock_async_openai_client_works);
/// The stock Rust client, `async-openai`, pointed at our base URL.
async fn the_stock_async_openai_client_works() {
    use async_openai::Client;
    use async_openai::config::OpenAIConfig;
    use async_openai::error::OpenAIError;
    use async_openai::types::chat::{
        ChatCompletionRequestUserMessageArgs, ChatCompletionStreamOptions,
        CreateChatCompletionRequestArgs, FinishReason,
    };
    use futures_util::StreamExt;

    let host = Host::with_model().await;
    let alice = world(&host).await;
    let config = OpenAIConfig::new()
        .with_api_base(host.url("/v1"))
        .with_api_key(&alice)
        .with_project_id("ml/vision");
    let client = Client::with_config(config);

    let models = client.models().list().await.expect("listing models");
    assert!(
        models.data.iter().any(|m| m.id == MODEL),
        "{:?}",
        models.data
    );

    let message = ChatCompletionRequestUserMessageArgs::default()
        .content("Name three colours.")
        .build()
        .unwrap();
    let request = || {
        CreateChatCompletionRequestArgs::default()
            .model(MODEL)
            .messages([message.clone().into()])
            .max_completion_tokens(12u32)
            .temperature(0.0)
            .to_owned()
    };
    let reply = client
        .chat()
        .create(request().build().unwrap())
        .await
        .unwrap();
    let text = reply.choices[0].message.content.clone().unwrap();
    assert_eq!(text, "1. Red: This is the most obvious colour, but");
    assert_eq!(reply.choices[0].finish_reason, Some(FinishReason::Length));
    let usage = reply.usage.expect("usage");
    assert_eq!(usage.completion_tokens, 12);
    assert_eq!(usage.total_tokens, usage.prompt_tokens + 12);

    let streamed = request()
        .stream_options(ChatCompletionStreamOptions {
            include_usage: Some(true),
            include_obfuscation: None,
        })
        .build()
        .unwrap();
    let mut stream = client.chat().create_stream(streamed).await.unwrap();
    let (mut pieces, mut last_usage, mut finish) = (String::new(), None, None);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("a stream chunk");
        for choice in &chunk.choices {
            pieces.push_str(choice.delta.content.as_deref().unwrap_or(""));
            finish = finish.or(choice.finish_reason);
        }
        last_usage = chunk.usage.or(last_usage);
    }
    assert_eq!(pieces, text);
    assert_eq!(finish, Some(FinishReason::Length));
    assert_eq!(last_usage.expect("the usage chunk"), usage);

    let unknown = request().model("gpt-17").build().unwrap();
    match client.chat().create(unknown).await {
        Err(OpenAIError::ApiError(e)) => {
            assert_eq!(e.code.as_deref(), Some("model_not_found"), "{e:?}")
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A Python with the stock `openai` package.
fn openai_python() -> String {
    python_venv("openai-venv", &["openai==2.*"])
}

on_each_store!(prompts_are_tokenized_as_llama_cpp_does);
/// Prompt token counts for SmolLM2's chat template around each message, as
/// llama.cpp encodes them (llama-cpp-python 0.3.36, same GGUF): digits one
/// by one, byte-level BPE for any Unicode, whitespace runs kept.
async fn prompts_are_tokenized_as_llama_cpp_does() {
    let host = Host::with_model().await;
    let alice = host.create_user("alice").await;
    let known = [
        ("What is the capital of France?", 37),
        ("Compute 12345 + 678 = ?", 44),
        ("naïve café — 東京 🚀", 42),
        ("  spaces\tand\nlines  ", 36),
    ];
    for (message, tokens) in known {
        let (status, reply) = chat(&host, &alice, &ask(message, json!({"max_tokens": 1}))).await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["usage"]["prompt_tokens"], tokens, "{message:?}");
    }
}
