//! Anthropic's Messages API: `POST /v1/messages` and
//! `POST /v1/messages/count_tokens`, for the Anthropic SDKs and the agent
//! tools built on them.
//!
//! A request is translated into a chat request and served as chat is:
//! the same keys, scopes, limits, budgets, routes, cache, usage and
//! metrics, by any backend. The answer is translated back, whole or as
//! Anthropic's stream (`message_start` … `message_stop`); errors take
//! Anthropic's shape ([`anthropic_errors`]).

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::inference::{Out, account, add_headers, chunks, completion};
use super::json::JsonAsSent;
use super::{Json, KeyedCaller};
use crate::app::App;
use crate::error::{Error, Result};
use crate::ids;
use crate::inference::cache;
use crate::inference::wire::{CompletionRequest, Header};

/// A Messages request. Every field Anthropic documents is known; one we
/// cannot honour is refused by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagesRequest {
    model: String,
    /// Required by `/v1/messages`, absent from `count_tokens`.
    max_tokens: Option<u32>,
    messages: Vec<InMessage>,
    system: Option<Content>,
    #[serde(default)]
    stream: bool,
    stop_sequences: Option<Vec<String>>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<u32>,
    tools: Option<Vec<Map<String, Value>>>,
    tool_choice: Option<Map<String, Value>>,
    /// Accepted and not passed on: who asks, and which tier serves.
    #[serde(default, rename = "metadata")]
    _metadata: Option<Value>,
    thinking: Option<Value>,
    #[serde(default, rename = "service_tier")]
    _service_tier: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InMessage {
    role: String,
    content: Content,
}

/// A string, or content blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Map<String, Value>>),
}

impl Content {
    /// The blocks, a string being one text block.
    fn blocks(&self) -> Vec<Map<String, Value>> {
        match self {
            Content::Text(text) => {
                let mut block = Map::new();
                block.insert("type".into(), "text".into());
                block.insert("text".into(), text.clone().into());
                vec![block]
            }
            Content::Blocks(blocks) => blocks.clone(),
        }
    }

    /// The text of its text blocks.
    fn text(&self, param: &str) -> Result<String> {
        let mut text = String::new();
        for block in self.blocks() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    text.push_str(block.get("text").and_then(Value::as_str).unwrap_or(""))
                }
                other => return Err(unsupported_block(param, other)),
            }
        }
        Ok(text)
    }
}

fn unsupported_block(param: &str, kind: Option<&str>) -> Error {
    Error::invalid(
        param,
        format!(
            "{param} holds a '{}' block, which this gateway cannot pass on; send text, image, tool_use and tool_result blocks",
            kind.unwrap_or("untyped")
        ),
    )
}

impl MessagesRequest {
    /// The same request as an OpenAI chat request.
    fn to_chat(&self) -> Result<CompletionRequest> {
        if self.top_k.is_some() {
            return Err(Error::invalid(
                "top_k",
                "top_k is not supported by this gateway's backends; leave it out (temperature and top_p are)",
            ));
        }
        if self
            .thinking
            .as_ref()
            .is_some_and(|t| t["type"] != "disabled")
        {
            return Err(Error::invalid(
                "thinking",
                "extended thinking is not supported by this gateway's backends; leave 'thinking' out",
            ));
        }
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(json!({"role": "system", "content": system.text("system")?}));
        }
        for (i, message) in self.messages.iter().enumerate() {
            messages.extend(chat_messages(message, i)?);
        }
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "stream": self.stream,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stop": self.stop_sequences,
        });
        if self.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        if let Some(tools) = &self.tools {
            body["tools"] = tools
                .iter()
                .map(chat_tool)
                .collect::<Result<Vec<_>>>()?
                .into();
        }
        if let Some(choice) = &self.tool_choice {
            let (choice, parallel) = chat_tool_choice(choice)?;
            body["tool_choice"] = choice;
            if let Some(parallel) = parallel {
                body["parallel_tool_calls"] = parallel.into();
            }
        }
        serde_json::from_value(body).map_err(|e| Error::invalid("messages", e.to_string()))
    }
}

/// One Messages message as chat messages: tool results become `tool`
/// messages (first, as Anthropic puts them first), the rest one message.
fn chat_messages(message: &InMessage, i: usize) -> Result<Vec<Value>> {
    let param = format!("messages[{i}].content");
    let role = message.role.as_str();
    if role != "user" && role != "assistant" {
        return Err(Error::invalid(
            format!("messages[{i}].role"),
            format!(
                "role '{role}' is not one of user, assistant (the system prompt goes in 'system')"
            ),
        ));
    }
    let mut out = Vec::new();
    let (mut parts, mut calls) = (Vec::new(), Vec::new());
    for block in message.content.blocks() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(json!({"type": "text", "text": block.get("text").cloned().unwrap_or_default()})),
            Some("image") if role == "user" => {
                let source = block.get("source").cloned().unwrap_or_default();
                let url = match source["type"].as_str() {
                    Some("base64") => format!(
                        "data:{};base64,{}",
                        source["media_type"].as_str().unwrap_or("image/png"),
                        source["data"].as_str().unwrap_or("")
                    ),
                    _ => source["url"].as_str().unwrap_or("").to_string(),
                };
                parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            Some("tool_use") if role == "assistant" => calls.push(json!({
                "id": block.get("id"),
                "type": "function",
                "function": {
                    "name": block.get("name"),
                    "arguments": block.get("input").cloned().unwrap_or_else(|| json!({})).to_string(),
                },
            })),
            Some("tool_result") if role == "user" => {
                let content = match block.get("content") {
                    None => String::new(),
                    Some(content) => serde_json::from_value::<Content>(content.clone())
                        .map_err(|_| Error::invalid(&param, "a tool_result's content is a string or text blocks"))?
                        .text(&param)?,
                };
                out.push(json!({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": content}));
            }
            other => return Err(unsupported_block(&param, other)),
        }
    }
    let only_text = parts.iter().all(|p| p["type"] == "text");
    let content = if parts.is_empty() {
        Value::Null
    } else if only_text {
        parts
            .iter()
            .map(|p| p["text"].as_str().unwrap_or(""))
            .collect::<String>()
            .into()
    } else {
        parts.into()
    };
    if !content.is_null() || !calls.is_empty() {
        let mut chat = json!({"role": role, "content": content});
        if !calls.is_empty() {
            chat["tool_calls"] = calls.into();
        }
        out.push(chat);
    }
    Ok(out)
}

/// A Messages tool as a chat tool.
fn chat_tool(tool: &Map<String, Value>) -> Result<Value> {
    if let Some(kind) = tool
        .get("type")
        .and_then(Value::as_str)
        .filter(|k| *k != "custom")
    {
        return Err(Error::invalid(
            "tools",
            format!(
                "the server tool '{kind}' is not supported by this gateway; define tools with name, description and input_schema"
            ),
        ));
    }
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid("tools", "each tool needs a name"))?;
    Ok(json!({"type": "function", "function": {
        "name": name,
        "description": tool.get("description").cloned().unwrap_or_default(),
        "parameters": tool.get("input_schema").cloned().unwrap_or_else(|| json!({"type": "object"})),
    }}))
}

/// A Messages `tool_choice` as chat's, and `parallel_tool_calls`.
fn chat_tool_choice(choice: &Map<String, Value>) -> Result<(Value, Option<bool>)> {
    let parallel = choice
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        .map(|off| !off);
    let chat = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => json!({"type": "function", "function": {"name": choice.get("name")}}),
        _ => {
            return Err(Error::invalid(
                "tool_choice",
                "tool_choice.type is one of auto, any, tool, none",
            ));
        }
    };
    Ok((chat, parallel))
}

/// Anthropic's `stop_reason` for a chat `finish_reason`.
fn stop_reason(finish: &Value) -> &'static str {
    match finish.as_str() {
        Some("length") => "max_tokens",
        Some("tool_calls") | Some("function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// `POST /v1/messages`.
pub async fn create(
    State(app): State<App>,
    KeyedCaller { user, key }: KeyedCaller,
    headers: HeaderMap,
    JsonAsSent(body, sent): JsonAsSent<MessagesRequest>,
) -> Result<Response> {
    let started = std::time::Instant::now();
    let model = body.model.clone();
    let answer = async {
        if body.max_tokens.is_none() {
            return Err(Error::invalid(
                "max_tokens",
                "max_tokens is required: the most tokens to generate, e.g. 1024",
            ));
        }
        let chat = body.to_chat()?;
        let account = account(&app, &user, &key, &headers, &model).await?;
        let mut seed = [0u8; 8];
        ids::fill_random(&mut seed);
        let request = chat.to_backend(u64::from_le_bytes(seed))?;
        let header = Header {
            id: format!("msg_{}", ids::random_hex(12)),
            created: ids::now(),
            model: request.model.clone(),
        };
        let asked = (app.inference.caches())
            .then(|| cache::Asked::of_bytes("messages", &sent, &headers))
            .flatten();
        let mut running = app.inference.chat(account, request, asked).await?;
        let limits = std::mem::take(&mut running.headers);
        let deployment = running.deployment.clone();
        let mut response = if body.stream {
            stream(chunks(header, running, true, started).await?, model.clone())
        } else {
            axum::Json(message(&completion(header, running, started).await?)).into_response()
        };
        add_headers(&mut response, limits, &deployment);
        Ok(response)
    }
    .await;
    let status = match &answer {
        Ok(response) => response.status().as_u16(),
        Err(e) => e.status().as_u16(),
    };
    crate::telemetry::inference_request("messages", &model, status);
    answer
}

/// `POST /v1/messages/count_tokens`: about how many tokens the prompt
/// holds (four bytes a token; limits reserve more, see `limits::estimate`).
pub async fn count_tokens(
    State(app): State<App>,
    KeyedCaller { user, key }: KeyedCaller,
    headers: HeaderMap,
    Json(body): Json<MessagesRequest>,
) -> Result<axum::Json<Value>> {
    account(&app, &user, &key, &headers, &body.model).await?;
    let request = body.to_chat()?.to_backend(0)?;
    let tokens = crate::inference::limits::likely_prompt_tokens(&request);
    Ok(axum::Json(json!({"input_tokens": tokens})))
}

/// A whole chat completion as a Messages message.
fn message(chat: &Value) -> Value {
    let choice = &chat["choices"][0];
    let said = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = said["content"].as_str().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in said["tool_calls"].as_array().into_iter().flatten() {
        content.push(tool_use(call, input(&call["function"]["arguments"])));
    }
    json!({
        "id": chat["id"],
        "type": "message",
        "role": "assistant",
        "model": chat["model"],
        "content": content,
        "stop_reason": stop_reason(&choice["finish_reason"]),
        "stop_sequence": null,
        "usage": anthropic_usage(&chat["usage"]),
    })
}

/// Chat's usage as Anthropic counts it: `input_tokens` leaves out the
/// prompt tokens read from the cache, which it reports apart.
fn anthropic_usage(usage: &Value) -> Value {
    let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    json!({
        "input_tokens": prompt.saturating_sub(cached),
        "cache_read_input_tokens": cached,
        "output_tokens": usage["completion_tokens"].as_u64().unwrap_or(0),
    })
}

fn tool_use(call: &Value, input: Value) -> Value {
    json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": input})
}

/// Tool arguments (JSON text) as the tool's input object.
fn input(arguments: &Value) -> Value {
    arguments
        .as_str()
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or_else(|| json!({}))
}

/// A chat stream as Anthropic's: each chat chunk read becomes the events
/// it stands for, in order.
fn stream(rx: mpsc::Receiver<Out>, model: String) -> Response {
    let events = Events {
        model,
        queue: VecDeque::new(),
        open: None,
        blocks: 0,
        started: false,
        finish: Value::Null,
        usage: Value::Null,
        ended: false,
    };
    let events = futures_util::stream::unfold((rx, events), |(mut rx, mut events)| async move {
        loop {
            if let Some(event) = events.queue.pop_front() {
                return Some((Ok::<Event, Infallible>(event), (rx, events)));
            }
            if events.ended {
                return None;
            }
            match rx.recv().await {
                Some(out) => events.read(out),
                None => return None,
            }
        }
    });
    Sse::new(events).into_response()
}

/// The state of one Messages stream.
struct Events {
    model: String,
    /// Made and not yet sent.
    queue: VecDeque<Event>,
    /// The index of the open content block, and whether it is text.
    open: Option<(usize, bool)>,
    blocks: usize,
    started: bool,
    /// The chat's `finish_reason` and `usage`, once seen.
    finish: Value,
    usage: Value,
    ended: bool,
}

impl Events {
    fn send(&mut self, name: &str, data: Value) {
        let event = Event::default().event(name).data(data.to_string());
        self.queue.push_back(event);
    }

    fn close(&mut self) {
        if let Some((index, _)) = self.open.take() {
            self.send(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    /// Opens a block (closing the one open), unless a text block is open
    /// and this is text.
    fn open(&mut self, text: bool, block: Value) {
        if matches!(self.open, Some((_, t)) if t && text) {
            return;
        }
        self.close();
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some((index, text));
        self.send(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
    }

    fn delta(&mut self, delta: Value) {
        let index = self.open.map_or(0, |(i, _)| i);
        self.send(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
    }

    /// What one item of the chat stream stands for.
    fn read(&mut self, out: Out) {
        match out {
            Out::Chunk(chunk) => self.chunk(&chunk),
            Out::Failed(error) => {
                let kind = error_type(error["error"]["type"].as_str());
                self.send("error", anthropic_error(kind, &error["error"]["message"]));
                self.ended = true;
            }
            Out::Done => {
                self.close();
                let delta = json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason(&self.finish), "stop_sequence": null},
                    "usage": anthropic_usage(&self.usage)});
                self.send("message_delta", delta);
                self.send("message_stop", json!({"type": "message_stop"}));
                self.ended = true;
            }
        }
    }

    /// One chat chunk: the message's start, its text and tool calls, and
    /// how it ended.
    fn chunk(&mut self, chunk: &Value) {
        if !std::mem::replace(&mut self.started, true) {
            let message = json!({"id": chunk["id"], "type": "message", "role": "assistant",
                "content": [], "model": self.model, "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}});
            self.send(
                "message_start",
                json!({"type": "message_start", "message": message}),
            );
        }
        let choice = &chunk["choices"][0];
        if !choice["finish_reason"].is_null() {
            self.finish = choice["finish_reason"].clone();
        }
        if !chunk["usage"].is_null() {
            self.usage = chunk["usage"].clone();
        }
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.open(true, json!({"type": "text", "text": ""}));
            self.delta(json!({"type": "text_delta", "text": text}));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            if call["id"].is_string() {
                self.open(false, tool_use(call, json!({})));
            }
            if let Some(args) = call["function"]["arguments"]
                .as_str()
                .filter(|a| !a.is_empty())
            {
                self.delta(json!({"type": "input_json_delta", "partial_json": args}));
            }
        }
    }
}

/// Anthropic's error body.
fn anthropic_error(kind: &str, message: &Value) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// Anthropic's error type for one of ours (OpenAI's `type`).
fn error_type(openai: Option<&str>) -> &'static str {
    match openai {
        Some("authentication_error") => "authentication_error",
        Some("permission_error") => "permission_error",
        Some("rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota") => {
            "rate_limit_error"
        }
        Some("invalid_request_error") => "invalid_request_error",
        _ => "api_error",
    }
}

/// Anthropic's error type for a status.
fn type_of_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 405 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// Rewrites the Messages routes' errors (ours, in OpenAI's shape) into
/// Anthropic's: `{"type": "error", "error": {"type", "message"}}`, the
/// status and headers kept.
pub async fn anthropic_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let ours: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let message = match &ours["error"]["message"] {
        Value::Null => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        message => message.clone(),
    };
    let body = anthropic_error(type_of_status(status), &message).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
}
