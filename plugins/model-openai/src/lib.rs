//! `model-openai`: forwards chat requests to an OpenAI-compatible upstream
//! through `wasi:http`, streaming the reply back through `output`.
//!
//! Built against `switchyard:plugin@0.4.0`: the request fields the host
//! passes through (tools, response formats, log probabilities, `n`) and the
//! messages' tool fields go upstream as they came, and the upstream's tool
//! calls, log probabilities and other choices come back as they are. Plain
//! text of the first choice takes the fast path through `output.emit`.
//! Embeddings, text completions and responses go upstream whole
//! (`forward`), their streams relayed event by event, with usage read on
//! the way. Errors carry the upstream's status, so the host can tell one
//! worth another deployment from the client's own mistake. Answers say how
//! many prompt tokens the upstream read from its cache. When the client
//! leaves a stream, the upstream is hung up on, and what was streamed
//! until then is counted (a chunk a token) for the host to bill.
//!
//! The host tells it the upstream's base URL (`UPSTREAM_URL`) and the models
//! it serves (`MODELS`: `id` or `id=upstream-id`, comma-separated). The host
//! enforces the egress allow-list and adds the upstream's credential to each
//! request itself, so this component never sees the key.

wit_bindgen::generate!({ path: "../../wit/v0.4.0", world: "model-backend" });

use exports::switchyard::plugin::backend::{
    ChatRequest, ChatResult, Endpoint, FinishReason, ForwardRequest, ForwardResult, Guest,
    ModelInfo,
};
use std::borrow::Cow;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use switchyard::plugin::output;
use switchyard::plugin::types::PluginError;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme};

fn err(code: &str, message: impl Into<String>) -> PluginError {
    PluginError {
        code: code.into(),
        message: message.into(),
        position: None,
        status: None,
    }
}

/// What the host configured, read from the environment once per instance:
/// a warm instance serves many calls, and each read copies the whole
/// environment in from the host.
struct Config {
    /// `UPSTREAM_URL` without a trailing slash.
    url: Option<String>,
    /// (id served, id upstream) pairs from `MODELS`.
    models: Vec<(String, String)>,
}

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| Config {
        url: std::env::var("UPSTREAM_URL")
            .ok()
            .map(|u| u.trim_end_matches('/').to_string()),
        models: std::env::var("MODELS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| match m.split_once('=') {
                Some((id, upstream)) => (id.to_string(), upstream.to_string()),
                None => (m.to_string(), m.to_string()),
            })
            .collect(),
    })
}

struct Proxy;

impl Guest for Proxy {
    fn list_models() -> Vec<ModelInfo> {
        config()
            .models
            .iter()
            .map(|(id, _)| ModelInfo {
                id: id.clone(),
                owned_by: "upstream".into(),
                created: 0,
            })
            .collect()
    }

    fn health() -> Result<(), PluginError> {
        url().map(|_| ())
    }

    fn chat(request: ChatRequest) -> Result<ChatResult, PluginError> {
        let upstream = upstream_model(&request.model)?;
        let body = UpstreamRequest {
            model: upstream,
            messages: request
                .messages
                .iter()
                .map(|m| UpstreamMessage {
                    role: &m.role,
                    // An assistant message that only calls tools has no text.
                    content: (!m.content.is_empty() || m.extra.is_none()).then_some(&m.content),
                    extra: json_object(m.extra.as_deref()),
                })
                .collect(),
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            top_p: request.top_p,
            seed: request.seed,
            stop: (!request.stop.is_empty()).then_some(&request.stop),
            // A reply that is not streamed but may hold tool calls or several
            // choices is asked for whole, so they come back unchanged.
            stream: request.streamed || request.extra.is_none(),
            stream_options: None,
            extra: json_object(request.extra.as_deref()),
        };
        let body = UpstreamRequest {
            stream_options: body.stream.then_some(StreamOptions {
                include_usage: true,
            }),
            ..body
        };
        let streamed = body.stream;
        let body = serde_json::to_string(&body).map_err(|e| {
            err(
                "invalid-request",
                format!("encoding the request failed: {e}"),
            )
        })?;
        let response = post(&format!("{}/chat/completions", url()?), &body)?;
        if streamed {
            relay(response)
        } else {
            whole(response)
        }
    }

    fn forward(request: ForwardRequest) -> Result<ForwardResult, PluginError> {
        let upstream = upstream_model(&request.model)?;
        let mut body: serde_json::Map<String, Value> = serde_json::from_str(&request.body)
            .map_err(|e| {
                err(
                    "invalid-request",
                    format!("the body is not a JSON object: {e}"),
                )
            })?;
        body.insert("model".into(), upstream.clone().into());
        // Usage comes in a stream's last chunk only when asked for; a client
        // that did not ask does not get that chunk.
        let asked_usage = body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true);
        let add_usage =
            request.streamed && request.endpoint == Endpoint::Completions && !asked_usage;
        if add_usage {
            body.insert(
                "stream_options".into(),
                serde_json::json!({"include_usage": true}),
            );
        }
        let path = match request.endpoint {
            Endpoint::Embeddings => "embeddings",
            Endpoint::Completions => "completions",
            Endpoint::Responses => "responses",
        };
        let body = Value::Object(body).to_string();
        let response = post(&format!("{}/{path}", url()?), &body)?;
        if request.streamed {
            relay_events(response, add_usage)
        } else {
            pass_whole(response)
        }
    }
}

/// The upstream's id for `model`.
fn upstream_model(model: &str) -> Result<&'static String, PluginError> {
    config()
        .models
        .iter()
        .find(|(id, _)| id == model)
        .map(|(_, upstream)| upstream)
        .ok_or_else(|| {
            err(
                "invalid-request",
                format!("this backend does not serve {model}"),
            )
        })
}

/// The whole body of a response.
fn read_all(response: &Response) -> Result<Vec<u8>, PluginError> {
    let stream = response
        .body
        .stream()
        .map_err(|_| err("upstream-failed", "reading the response"))?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(wasip2::io::streams::StreamError::Closed) => return Ok(body),
            Err(e) => {
                return Err(err(
                    "upstream-failed",
                    format!("the upstream's answer broke off: {e:?}"),
                ));
            }
        }
    }
}

/// Tokens as the endpoints count them: `prompt_tokens` and
/// `completion_tokens` (an embedding has only the first), or a response's
/// `input_tokens` and `output_tokens`; with the prompt tokens read from the
/// upstream's cache in their details.
#[derive(Deserialize, Default)]
struct AnyUsage {
    #[serde(default, alias = "input_tokens")]
    prompt_tokens: u32,
    #[serde(default, alias = "output_tokens")]
    completion_tokens: u32,
    #[serde(default, alias = "input_tokens_details")]
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize, Default)]
struct Details {
    #[serde(default)]
    cached_tokens: u32,
}

impl AnyUsage {
    fn cached(&self) -> u32 {
        self.prompt_tokens_details
            .as_ref()
            .map_or(0, |d| d.cached_tokens)
    }
}

/// The usage a body (or a response event's `response`) holds.
#[derive(Deserialize)]
struct WithUsage {
    usage: Option<AnyUsage>,
    response: Option<Box<WithUsage>>,
}

impl WithUsage {
    fn usage(self) -> Option<AnyUsage> {
        self.usage.or_else(|| self.response.and_then(|r| r.usage()))
    }
}

/// A body not streamed: passed back as it is, its usage read.
fn pass_whole(response: Response) -> Result<ForwardResult, PluginError> {
    let body = String::from_utf8_lossy(&read_all(&response)?).into_owned();
    if response.status != 200 {
        return Err(upstream_error(response.status, &body));
    }
    let usage = serde_json::from_str::<WithUsage>(&body)
        .map_err(|e| {
            err(
                "upstream-failed",
                format!("the upstream sent a bad body: {e}"),
            )
        })?
        .usage()
        .unwrap_or_default();
    Ok(ForwardResult {
        cached_tokens: usage.cached(),
        cache_write_tokens: 0,
        body: Some(body),
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
    })
}

/// Relays the upstream's server-sent events as they come, reading usage
/// from the one that has it. `drop_usage_chunk`: the usage-only chunk
/// was asked for here, not by the client.
fn relay_events(response: Response, drop_usage_chunk: bool) -> Result<ForwardResult, PluginError> {
    if response.status != 200 {
        let body = read_all(&response)?;
        return Err(upstream_error(
            response.status,
            &String::from_utf8_lossy(&body),
        ));
    }
    let stream = response
        .body
        .stream()
        .map_err(|_| err("upstream-failed", "reading the response"))?;
    let mut result = ForwardResult {
        body: None,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        cache_write_tokens: 0,
    };
    let (mut buffer, mut name, mut data) = (Vec::new(), None::<String>, String::new());
    loop {
        let chunk = match stream.blocking_read(16 * 1024) {
            Ok(chunk) => chunk,
            Err(wasip2::io::streams::StreamError::Closed) => {
                // An event the upstream did not end with a blank line.
                if !data.is_empty() {
                    pass_event((name, data), drop_usage_chunk, &mut result);
                }
                return Ok(result);
            }
            Err(e) => {
                return Err(err(
                    "upstream-failed",
                    format!("the upstream's stream broke: {e:?}"),
                ));
            }
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(value) = line.strip_prefix("event:") {
                name = Some(value.trim().to_string());
            } else if let Some(value) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            } else if line.is_empty() && !data.is_empty() {
                let event = (name.take(), std::mem::take(&mut data));
                if !pass_event(event, drop_usage_chunk, &mut result) {
                    return Ok(result);
                }
            }
        }
    }
}

/// Sends one event on, reading usage from it; false when the client has
/// gone away. Until usage comes, each event counts as a token generated,
/// so that a stream the client leaves is billed for what it was sent.
fn pass_event(
    (name, data): (Option<String>, String),
    drop_usage_chunk: bool,
    result: &mut ForwardResult,
) -> bool {
    if let Some(usage) = serde_json::from_str::<WithUsage>(&data)
        .ok()
        .and_then(WithUsage::usage)
    {
        result.prompt_tokens = usage.prompt_tokens;
        result.completion_tokens = usage.completion_tokens;
        result.cached_tokens = usage.cached();
        let only_usage = serde_json::from_str::<Value>(&data)
            .ok()
            .is_some_and(|v| v["choices"].as_array().is_some_and(Vec::is_empty));
        if drop_usage_chunk && only_usage {
            return true;
        }
    } else if result.prompt_tokens == 0 {
        result.completion_tokens += 1;
    }
    output::emit_event(name.as_deref(), &data)
}

/// A JSON object the host passed as text; anything else is nothing.
fn json_object(text: Option<&str>) -> serde_json::Map<String, Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

fn url() -> Result<&'static str, PluginError> {
    config()
        .url
        .as_deref()
        .ok_or_else(|| err("invalid-config", "UPSTREAM_URL is not set"))
}

/// The body sent upstream; a stream has usage in its last chunk.
#[derive(Serialize)]
struct UpstreamRequest<'a> {
    model: &'a str,
    messages: Vec<UpstreamMessage<'a>>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    seed: Option<u64>,
    stop: Option<&'a Vec<String>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    /// Tools, response format, log probabilities, `n`: as the client sent them.
    #[serde(flatten)]
    extra: serde_json::Map<String, Value>,
}

#[derive(Serialize)]
struct UpstreamMessage<'a> {
    role: &'a str,
    content: Option<&'a String>,
    /// `tool_calls`, `tool_call_id`, `name`: as the client sent them.
    #[serde(flatten)]
    extra: serde_json::Map<String, Value>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One `chat.completion.chunk`, only the fields read here. Content is
/// borrowed from the line unless it holds escapes.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    choices: Option<Vec<&'a RawValue>>,
    usage: Option<AnyUsage>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    logprobs: Option<&'a RawValue>,
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_calls: Option<&'a RawValue>,
    #[serde(borrow)]
    function_call: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
}

impl Choice<'_> {
    /// Whether it is only text of the first choice (and maybe its plain
    /// end), which the host streams itself.
    fn plain(&self) -> bool {
        let delta_plain = self.delta.as_ref().is_none_or(|d| {
            d.tool_calls.is_none() && d.function_call.is_none() && d.refusal.is_none()
        });
        self.index == 0
            && delta_plain
            && self.logprobs.is_none()
            && matches!(
                self.finish_reason.as_deref(),
                None | Some("stop" | "length")
            )
    }
}

/// A whole `chat.completion`, only the fields read here.
#[derive(Deserialize)]
struct Completion<'a> {
    #[serde(borrow)]
    choices: &'a RawValue,
    usage: Option<AnyUsage>,
}

/// The upstream's answer: its status and its body stream.
struct Response {
    status: u16,
    body: IncomingBody,
}

fn post(url: &str, body: &str) -> Result<Response, PluginError> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        err(
            "invalid-config",
            format!("UPSTREAM_URL '{url}' has no scheme"),
        )
    })?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let headers = Fields::from_list(&[("content-type".into(), b"application/json".to_vec())])
        .map_err(|e| err("upstream-failed", format!("building headers: {e:?}")))?;
    let request = OutgoingRequest::new(headers);
    let failed = |what: &str| {
        err(
            "upstream-failed",
            format!("building the request: bad {what}"),
        )
    };
    request
        .set_method(&Method::Post)
        .map_err(|_| failed("method"))?;
    request
        .set_scheme(Some(&if scheme == "https" {
            Scheme::Https
        } else {
            Scheme::Http
        }))
        .map_err(|_| failed("scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|_| failed("authority"))?;
    request
        .set_path_with_query(Some(if path.is_empty() { "/" } else { path }))
        .map_err(|_| failed("path"))?;
    let outgoing = request.body().map_err(|_| failed("body"))?;
    let sent = outgoing_handler::handle(request, None).map_err(|e| {
        err(
            "upstream-failed",
            format!("the request to {authority} was refused: {e}"),
        )
    })?;
    // A refused request closes the body stream; the response then says why.
    let written = send_body(outgoing, body);
    sent.subscribe().block();
    let response = sent
        .get()
        .ok_or_else(|| err("upstream-failed", "no response"))?
        .map_err(|_| err("upstream-failed", "the response was already taken"))?
        .map_err(|e| {
            err(
                "upstream-failed",
                format!("{authority} did not answer: {e}"),
            )
        })?;
    written?;
    let status = response.status();
    let body = response
        .consume()
        .map_err(|_| err("upstream-failed", "reading the response"))?;
    Ok(Response { status, body })
}

fn send_body(outgoing: OutgoingBody, body: &str) -> Result<(), PluginError> {
    let failed = |e: String| err("upstream-failed", format!("sending the request: {e}"));
    {
        let stream = outgoing
            .write()
            .map_err(|_| failed("no body stream".into()))?;
        for piece in body.as_bytes().chunks(4096) {
            stream
                .blocking_write_and_flush(piece)
                .map_err(|e| failed(format!("{e:?}")))?;
        }
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| failed(e.to_string()))
}

/// Reads the upstream's event stream, emitting content as it arrives.
fn relay(response: Response) -> Result<ChatResult, PluginError> {
    let stream = response
        .body
        .stream()
        .map_err(|_| err("upstream-failed", "reading the response"))?;
    let mut buffer = Vec::new();
    let mut result = ChatResult {
        finish_reason: FinishReason::Stop,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_tokens: 0,
        cache_write_tokens: 0,
        choices: None,
    };
    let mut error_body = Vec::new();
    loop {
        let chunk = match stream.blocking_read(16 * 1024) {
            Ok(chunk) => chunk,
            Err(wasip2::io::streams::StreamError::Closed) => break,
            Err(e) => {
                return Err(err(
                    "upstream-failed",
                    format!("the upstream's stream broke: {e:?}"),
                ));
            }
        };
        if response.status != 200 {
            error_body.extend_from_slice(&chunk);
            continue;
        }
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            if !handle_line(&String::from_utf8_lossy(&line), &mut result)? {
                return Ok(result);
            }
        }
    }
    if response.status != 200 {
        return Err(upstream_error(
            response.status,
            &String::from_utf8_lossy(&error_body),
        ));
    }
    Ok(result)
}

/// Handles one SSE line; false when generation should end.
fn handle_line(line: &str, result: &mut ChatResult) -> Result<bool, PluginError> {
    let Some(data) = line.trim().strip_prefix("data:").map(str::trim) else {
        return Ok(true);
    };
    if data == "[DONE]" {
        return Ok(false);
    }
    let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
        err(
            "upstream-failed",
            format!("the upstream sent a bad chunk: {e}"),
        )
    })?;
    if let Some(usage) = chunk.usage {
        result.prompt_tokens = usage.prompt_tokens;
        result.completion_tokens = usage.completion_tokens;
        result.cached_tokens = usage.cached();
    }
    for raw in chunk.choices.into_iter().flatten() {
        // Until usage comes, a chunk a token: what a stream the client
        // leaves is billed for.
        if result.prompt_tokens == 0 {
            result.completion_tokens += 1;
        }
        let choice: Choice = serde_json::from_str(raw.get()).map_err(|e| {
            err(
                "upstream-failed",
                format!("the upstream sent a bad choice: {e}"),
            )
        })?;
        if let Some(reason) = choice
            .finish_reason
            .as_deref()
            .filter(|_| choice.index == 0)
        {
            result.finish_reason = finish_reason(reason);
        }
        if !choice.plain() {
            if !output::emit_choice(raw.get()) {
                return Ok(false);
            }
            continue;
        }
        if let Some(text) = choice.delta.and_then(|d| d.content)
            && !text.is_empty()
            && !output::emit(&text)
        {
            return Ok(false);
        }
    }
    Ok(true)
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Stop,
    }
}

/// Reads a whole (not streamed) completion: its choices go to the host as
/// they are.
fn whole(response: Response) -> Result<ChatResult, PluginError> {
    let body = read_all(&response)?;
    let text = String::from_utf8_lossy(&body);
    if response.status != 200 {
        return Err(upstream_error(response.status, &text));
    }
    let completion: Completion = serde_json::from_str(&text).map_err(|e| {
        err(
            "upstream-failed",
            format!("the upstream sent a bad completion: {e}"),
        )
    })?;
    let first: Option<Value> = serde_json::from_str::<Vec<Value>>(completion.choices.get())
        .ok()
        .and_then(|c| c.into_iter().next());
    let usage = completion.usage.unwrap_or_default();
    Ok(ChatResult {
        finish_reason: finish_reason(
            first
                .as_ref()
                .and_then(|c| c["finish_reason"].as_str())
                .unwrap_or("stop"),
        ),
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        cached_tokens: usage.cached(),
        cache_write_tokens: 0,
        choices: Some(completion.choices.get().to_string()),
    })
}

/// The upstream's error, with its message when it sent one.
fn upstream_error(status: u16, text: &str) -> PluginError {
    let message = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| text.chars().take(300).collect());
    PluginError {
        status: Some(status),
        ..err(
            "upstream-failed",
            format!("the upstream answered {status}: {message}"),
        )
    }
}

export!(Proxy);
