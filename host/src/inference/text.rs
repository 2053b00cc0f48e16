//! Completions and responses for a backend that only chats (the embedded
//! model, backends built before 0.3.0): the request becomes a chat request,
//! checked as chat checks it, and the chat's text comes back in the
//! endpoint's own format, whole or as its stream of events.
//!
//! Field names and meanings are OpenAI's, documented in its API reference.
//! A field such a backend cannot honour is refused by name.

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::backend::{
    CallError, ChatRequest, ChatResult, Endpoint, FinishReason, ForwardRequest, ForwardResult,
    ModelBackend, Piece,
};
use super::wire::{self, CompletionRequest};
use crate::error::{Error, Result};
use crate::ids;

/// OpenAI's default `max_tokens` for a legacy completion.
use super::limits::COMPLETION_DEFAULT as COMPLETION_MAX_TOKENS;

/// Refuses, before anything is spent, what a chat-only backend cannot
/// serve: embeddings, and any field of the request it cannot honour.
pub fn check(request: &ForwardRequest) -> Result<()> {
    to_chat(request).map(|_| ())
}

/// Serves `request` through `backend`'s chat, sending the endpoint's events
/// to `output` when the client streams.
pub async fn through_chat(
    backend: &dyn ModelBackend,
    team: &str,
    request: ForwardRequest,
    output: mpsc::UnboundedSender<Piece>,
) -> std::result::Result<ForwardResult, CallError> {
    let chat = to_chat(&request).map_err(|e| CallError::Reported {
        code: "invalid-request".into(),
        message: e.to_string(),
        status: None,
    })?;
    let mut render = Render::new(&request);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let call = backend.chat(team, chat, tx);
    let relay = async {
        while let Some(piece) = rx.recv().await {
            if let Piece::Text(text) = piece {
                render.text(text, &output);
            }
        }
    };
    let (result, ()) = tokio::join!(call, relay);
    let result = result?;
    Ok(render.finish(&result, &output))
}

/// The chat request `request` stands for.
fn to_chat(request: &ForwardRequest) -> Result<ChatRequest> {
    let model = &request.model;
    let body = Value::Object(request.body.clone());
    let chat = match request.endpoint {
        Endpoint::Embeddings => {
            return Err(Error::invalid(
                "model",
                format!(
                    "the model '{model}' does not embed; embeddings come from models served by an OpenAI-compatible upstream"
                ),
            ));
        }
        Endpoint::Completions => parse::<TextRequest>(body)?.to_chat()?,
        Endpoint::Responses => parse::<ResponsesRequest>(body)?.to_chat()?,
    };
    let mut seed = [0u8; 8];
    ids::fill_random(&mut seed);
    let chat = chat.to_backend(u64::from_le_bytes(seed))?;
    wire::refuse_passthrough(&chat)?;
    Ok(chat)
}

/// `body` as `T`, naming the field that is wrong.
fn parse<T: serde::de::DeserializeOwned>(body: Value) -> Result<T> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            return Error::InvalidJson {
                message: format!("the request body is not valid for this endpoint: {inner}"),
                param: None,
            };
        }
        Error::InvalidJson {
            message: format!("invalid value for field '{path}': {inner}"),
            param: Some(path),
        }
    })
}

/// A field a chat-only model cannot honour.
fn unsupported(model: &str, param: &str, what: &str) -> Error {
    Error::invalid(
        param,
        format!(
            "the model '{model}' does not support {what}; models served by an OpenAI-compatible upstream do"
        ),
    )
}

/// `POST /v1/completions`, the legacy text form. Every parameter OpenAI
/// documents is known, so that one misspelt is refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TextRequest {
    model: String,
    prompt: Prompt,
    #[serde(default)]
    stream: bool,
    stream_options: Option<Value>,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    seed: Option<i64>,
    stop: Option<Value>,
    n: Option<u32>,
    best_of: Option<u32>,
    logprobs: Option<u32>,
    echo: Option<bool>,
    suffix: Option<String>,
    user: Option<String>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    logit_bias: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

impl TextRequest {
    /// The prompt as one user message.
    fn to_chat(&self) -> Result<CompletionRequest> {
        let model = &self.model;
        let prompt = match &self.prompt {
            Prompt::One(p) => p,
            Prompt::Many(p) if p.len() == 1 => &p[0],
            Prompt::Many(_) => {
                return Err(unsupported(
                    model,
                    "prompt",
                    "several prompts in one request",
                ));
            }
        };
        if self.best_of.is_some_and(|b| b > 1) {
            return Err(unsupported(model, "best_of", "'best_of'"));
        }
        if self.logprobs.is_some() {
            return Err(unsupported(model, "logprobs", "'logprobs'"));
        }
        if self.echo == Some(true) {
            return Err(unsupported(model, "echo", "'echo'"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(unsupported(model, "suffix", "'suffix'"));
        }
        parse(json!({
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": self.stream,
            "stream_options": self.stream_options,
            "max_tokens": self.max_tokens.unwrap_or(COMPLETION_MAX_TOKENS),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "stop": self.stop,
            "n": self.n,
            "user": self.user,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            "logit_bias": self.logit_bias,
        }))
    }
}

/// `POST /v1/responses`. Every parameter OpenAI documents is known, so
/// that one misspelt is refused; some are unused.
#[expect(
    dead_code,
    reason = "every documented field is known, so that a misspelt one is refused; some are unused"
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResponsesRequest {
    model: String,
    input: Input,
    instructions: Option<String>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<Value>,
    max_output_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    max_tool_calls: Option<u32>,
    text: Option<TextConfig>,
    metadata: Option<Value>,
    store: Option<bool>,
    user: Option<String>,
    safety_identifier: Option<String>,
    prompt_cache_key: Option<String>,
    service_tier: Option<String>,
    truncation: Option<String>,
    previous_response_id: Option<String>,
    conversation: Option<Value>,
    prompt: Option<Value>,
    reasoning: Option<Value>,
    include: Option<Vec<String>>,
    background: Option<bool>,
    top_logprobs: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Item>),
}

/// An input item; only messages are text a chat model can read.
#[derive(Debug, Deserialize)]
struct Item {
    #[serde(rename = "type")]
    kind: Option<String>,
    role: Option<String>,
    content: Option<ItemContent>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ItemContent {
    Text(String),
    Parts(Vec<Value>),
}

#[expect(dead_code, reason = "known so that it parses; not used yet")]
#[derive(Debug, Deserialize)]
struct TextConfig {
    format: Option<Value>,
    verbosity: Option<String>,
}

impl ResponsesRequest {
    /// The instructions as a system message, then the input's messages.
    fn to_chat(&self) -> Result<CompletionRequest> {
        self.refuse_unsupported()?;
        let mut messages = Vec::new();
        if let Some(instructions) = &self.instructions {
            messages.push(json!({"role": "system", "content": instructions}));
        }
        match &self.input {
            Input::Text(text) => messages.push(json!({"role": "user", "content": text})),
            Input::Items(items) => {
                for (i, item) in items.iter().enumerate() {
                    messages.push(self.message(i, item)?);
                }
            }
        }
        if self.max_output_tokens == Some(0) {
            return Err(Error::invalid(
                "max_output_tokens",
                "max_output_tokens must be at least 1",
            ));
        }
        parse(json!({
            "model": self.model,
            "messages": messages,
            "stream": self.stream,
            "max_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "user": self.user,
        }))
    }

    fn refuse_unsupported(&self) -> Result<()> {
        let model = &self.model;
        if self.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(unsupported(model, "tools", "'tools'"));
        }
        let format = self.text.as_ref().and_then(|t| t.format.as_ref());
        if format.is_some_and(|f| f.get("type").and_then(Value::as_str) != Some("text")) {
            return Err(unsupported(model, "text.format", "structured output"));
        }
        if self.previous_response_id.is_some() || self.conversation.is_some() {
            let param = if self.previous_response_id.is_some() {
                "previous_response_id"
            } else {
                "conversation"
            };
            return Err(Error::invalid(
                param,
                "responses are not stored by this server; send the whole conversation in 'input'",
            ));
        }
        for (param, used) in [
            ("prompt", self.prompt.is_some()),
            ("reasoning", self.reasoning.is_some()),
            ("background", self.background == Some(true)),
            ("top_logprobs", self.top_logprobs.is_some_and(|n| n > 0)),
            (
                "include",
                self.include.as_ref().is_some_and(|i| !i.is_empty()),
            ),
        ] {
            if used {
                return Err(unsupported(model, param, &format!("'{param}'")));
            }
        }
        Ok(())
    }

    /// Input item `i` as a chat message.
    fn message(&self, i: usize, item: &Item) -> Result<Value> {
        let model = &self.model;
        let kind = item.kind.as_deref().unwrap_or("message");
        if kind != "message" {
            let what = format!("input items of type '{kind}'");
            return Err(unsupported(model, &format!("input[{i}].type"), &what));
        }
        let role = item.role.as_deref().unwrap_or_default();
        let text = match &item.content {
            None => String::new(),
            Some(ItemContent::Text(text)) => text.clone(),
            Some(ItemContent::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                    match (kind, part.get("text").and_then(Value::as_str)) {
                        ("input_text" | "output_text", Some(t)) => text.push_str(t),
                        _ => {
                            let what = format!("content parts of type '{kind}'");
                            let param = format!("input[{i}].content");
                            return Err(unsupported(model, &param, &what));
                        }
                    }
                }
                text
            }
        };
        Ok(json!({"role": role, "content": text}))
    }
}

/// The endpoint's answer to a chat's text, built as the text comes.
struct Render {
    endpoint: Endpoint,
    streamed: bool,
    /// `stream_options.include_usage` (completions).
    include_usage: bool,
    id: String,
    /// A response's message item's id.
    item_id: String,
    created: u64,
    model: String,
    /// The request body, for the fields a response echoes.
    body: serde_json::Map<String, Value>,
    text: String,
    /// Events sent, for a response's `sequence_number`.
    sequence: u64,
    started: bool,
}

impl Render {
    fn new(request: &ForwardRequest) -> Render {
        let prefix = match request.endpoint {
            Endpoint::Responses => "resp_",
            _ => "cmpl-",
        };
        let include_usage = request
            .body
            .get("stream_options")
            .is_some_and(|o| o.get("include_usage").and_then(Value::as_bool) == Some(true));
        Render {
            endpoint: request.endpoint,
            streamed: request.streamed,
            include_usage,
            id: format!("{prefix}{}", ids::random_hex(12)),
            item_id: format!("msg_{}", ids::random_hex(12)),
            created: ids::now(),
            model: request.model.clone(),
            body: request.body.clone(),
            text: String::new(),
            sequence: 0,
            started: false,
        }
    }

    /// A piece of generated text.
    fn text(&mut self, text: String, output: &mpsc::UnboundedSender<Piece>) {
        if self.streamed {
            self.start(output);
            match self.endpoint {
                Endpoint::Responses => {
                    let delta = json!({
                        "item_id": self.item_id, "output_index": 0, "content_index": 0,
                        "delta": text, "logprobs": [],
                    });
                    self.event(output, "response.output_text.delta", delta);
                }
                _ => {
                    let chunk = self.text_chunk(&text, None);
                    let _ = output.send(Piece::Event(None, chunk.to_string()));
                }
            }
        }
        self.text.push_str(&text);
    }

    /// The end: the whole body, or the stream's last events.
    fn finish(
        mut self,
        result: &ChatResult,
        output: &mpsc::UnboundedSender<Piece>,
    ) -> ForwardResult {
        let body = match (self.endpoint, self.streamed) {
            (Endpoint::Responses, false) => Some(self.response(Some(result)).to_string()),
            (Endpoint::Responses, true) => {
                self.end_response(result, output);
                None
            }
            (_, false) => Some(self.completion(result).to_string()),
            (_, true) => {
                self.end_completion(result, output);
                None
            }
        };
        ForwardResult {
            body,
            prompt_tokens: result.prompt_tokens,
            completion_tokens: result.completion_tokens,
            cached_tokens: result.cached_tokens,
            cache_write_tokens: result.cache_write_tokens,
        }
    }

    /// A text completion, whole.
    fn completion(&self, result: &ChatResult) -> Value {
        let mut body = self.text_chunk(&self.text, Some(result.finish_reason));
        body["usage"] = wire::usage(result);
        body
    }

    /// A text-completion chunk (or the whole completion's shape).
    fn text_chunk(&self, text: &str, finish: Option<FinishReason>) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "text": text,
                "index": 0,
                "logprobs": null,
                "finish_reason": finish.map(wire::finish_reason),
            }],
        })
    }

    fn end_completion(&self, result: &ChatResult, output: &mpsc::UnboundedSender<Piece>) {
        let mut chunks = vec![self.text_chunk("", Some(result.finish_reason))];
        if self.include_usage {
            let mut last = self.text_chunk("", None);
            last["choices"] = json!([]);
            last["usage"] = wire::usage(result);
            chunks.push(last);
        }
        for chunk in chunks {
            let _ = output.send(Piece::Event(None, chunk.to_string()));
        }
        let _ = output.send(Piece::Event(None, "[DONE]".into()));
    }

    /// A response object: in progress (no result yet) or ended.
    fn response(&self, result: Option<&ChatResult>) -> Value {
        let ended = result.is_some();
        let cut = result.is_some_and(|r| r.finish_reason == FinishReason::Length);
        let status = match (ended, cut) {
            (false, _) => "in_progress",
            (true, false) => "completed",
            (true, true) => "incomplete",
        };
        let echo = |name: &str| self.body.get(name).cloned().unwrap_or(Value::Null);
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": if cut { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "instructions": echo("instructions"),
            "max_output_tokens": echo("max_output_tokens"),
            "model": self.model,
            "output": if ended { json!([self.message(status)]) } else { json!([]) },
            "parallel_tool_calls": true,
            "previous_response_id": null,
            "reasoning": {"effort": null, "summary": null},
            "store": false,
            "temperature": echo("temperature"),
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": echo("top_p"),
            "truncation": "disabled",
            "usage": result.map(|r| json!({
                "input_tokens": r.prompt_tokens,
                "input_tokens_details": {"cached_tokens": r.cached_tokens},
                "output_tokens": r.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": r.prompt_tokens + r.completion_tokens,
            })),
            "user": echo("user"),
            "metadata": self.body.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })
    }

    /// The response's one message item.
    fn message(&self, status: &str) -> Value {
        json!({
            "type": "message",
            "id": self.item_id,
            "status": status,
            "role": "assistant",
            "content": [self.part()],
        })
    }

    fn part(&self) -> Value {
        json!({"type": "output_text", "text": self.text, "annotations": [], "logprobs": []})
    }

    /// A response stream's opening events, once.
    fn start(&mut self, output: &mpsc::UnboundedSender<Piece>) {
        if std::mem::replace(&mut self.started, true) || self.endpoint != Endpoint::Responses {
            return;
        }
        let response = self.response(None);
        self.event(output, "response.created", json!({"response": response}));
        self.event(
            output,
            "response.in_progress",
            json!({"response": response}),
        );
        let item = json!({
            "type": "message", "id": self.item_id, "status": "in_progress",
            "role": "assistant", "content": [],
        });
        self.event(
            output,
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
        let at =
            json!({"item_id": self.item_id, "output_index": 0, "content_index": 0, "part": part});
        self.event(output, "response.content_part.added", at);
    }

    fn end_response(&mut self, result: &ChatResult, output: &mpsc::UnboundedSender<Piece>) {
        self.start(output);
        let at = |extra: Value| {
            let mut at = json!({"item_id": self.item_id, "output_index": 0, "content_index": 0});
            if let (Some(at), Value::Object(extra)) = (at.as_object_mut(), extra) {
                at.extend(extra);
            }
            at
        };
        let text_done = at(json!({"text": self.text, "logprobs": []}));
        let part_done = at(json!({"part": self.part()}));
        let response = self.response(Some(result));
        let item = response["output"][0].clone();
        let last = if response["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.event(output, "response.output_text.done", text_done);
        self.event(output, "response.content_part.done", part_done);
        let item_done = json!({"output_index": 0, "item": item});
        self.event(output, "response.output_item.done", item_done);
        self.event(output, last, json!({"response": response}));
    }

    /// One Responses event: `type` and `sequence_number` added to `fields`.
    fn event(&mut self, output: &mpsc::UnboundedSender<Piece>, kind: &str, mut fields: Value) {
        fields["type"] = json!(kind);
        fields["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        let _ = output.send(Piece::Event(Some(kind.to_string()), fields.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(endpoint: Endpoint, body: Value) -> ForwardRequest {
        let Value::Object(body) = body else {
            panic!("a body is an object")
        };
        ForwardRequest {
            endpoint,
            model: "m".into(),
            body,
            streamed: false,
        }
    }

    fn refused(endpoint: Endpoint, body: Value) -> (String, Option<String>) {
        match check(&request(endpoint, body)).unwrap_err() {
            Error::InvalidRequest { message, param } | Error::InvalidJson { message, param } => {
                (message, param)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_prompt_becomes_one_user_message_with_openais_default_length() {
        let chat = to_chat(&request(
            Endpoint::Completions,
            json!({"model": "m", "prompt": ["Once"], "stop": "\n", "temperature": 0.5}),
        ))
        .unwrap();
        assert_eq!(chat.messages.len(), 1);
        assert_eq!(
            (
                chat.messages[0].role.as_str(),
                chat.messages[0].content.as_str()
            ),
            ("user", "Once")
        );
        assert_eq!(chat.max_tokens, Some(COMPLETION_MAX_TOKENS));
        assert_eq!(chat.stop, ["\n"]);
    }

    #[test]
    fn instructions_and_input_items_become_messages() {
        let chat = to_chat(&request(
            Endpoint::Responses,
            json!({"model": "m", "instructions": "Be brief", "max_output_tokens": 20, "input": [
                {"role": "user", "content": "Hi"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello"}]},
                {"role": "developer", "content": [{"type": "input_text", "text": "Go on"}]},
            ]}),
        ))
        .unwrap();
        let got: Vec<(&str, &str)> = chat
            .messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("system", "Be brief"),
                ("user", "Hi"),
                ("assistant", "Hello"),
                ("system", "Go on")
            ]
        );
        assert_eq!(chat.max_tokens, Some(20));
    }

    #[test]
    fn what_a_chat_model_cannot_honour_is_refused_by_name() {
        let cases = [
            (
                Endpoint::Embeddings,
                json!({"model": "m", "input": "x"}),
                "model",
                "does not embed",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": ["a", "b"]}),
                "prompt",
                "several prompts",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": "a", "echo": true}),
                "echo",
                "'echo'",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": "a", "n": 2}),
                "n",
                "'n'",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m", "prompt": "a", "colour": 1}),
                "colour",
                "unknown field `colour`",
            ),
            (
                Endpoint::Completions,
                json!({"model": "m"}),
                ".",
                "not valid for this endpoint: missing field `prompt`",
            ),
            (
                Endpoint::Responses,
                json!({"model": "m", "input": "a", "tools": [{"type": "web_search"}]}),
                "tools",
                "'tools'",
            ),
            (
                Endpoint::Responses,
                json!({"model": "m", "input": "a", "previous_response_id": "resp_1"}),
                "previous_response_id",
                "not stored",
            ),
            (
                Endpoint::Responses,
                json!({"model": "m", "input": "a", "text": {"format": {"type": "json_object"}}}),
                "text.format",
                "structured output",
            ),
            (
                Endpoint::Responses,
                json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}),
                "input[0].type",
                "function_call_output",
            ),
            (
                Endpoint::Responses,
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
                "input[0].content",
                "input_image",
            ),
            (
                Endpoint::Responses,
                json!({"model": "m", "input": "a", "temperature": 3}),
                "temperature",
                "between 0 and 2",
            ),
        ];
        for (endpoint, body, param, says) in cases {
            let (message, got) = refused(endpoint, body.clone());
            assert!(message.contains(says), "{body}: {message}");
            let want = (param != ".").then_some(param);
            assert_eq!(got.as_deref(), want, "{body}: {message}");
        }
    }

    fn result(finish_reason: FinishReason) -> ChatResult {
        ChatResult {
            finish_reason,
            prompt_tokens: 7,
            completion_tokens: 3,
            cached_tokens: 0,
            cache_write_tokens: 0,
            choices: None,
        }
    }

    /// The events `render` sent, as (event name, data).
    fn events(rx: &mut mpsc::UnboundedReceiver<Piece>) -> Vec<(Option<String>, Value)> {
        let mut events = Vec::new();
        while let Ok(Piece::Event(name, data)) = rx.try_recv() {
            events.push((name, serde_json::from_str(&data).unwrap_or(json!(data))));
        }
        events
    }

    #[test]
    fn a_streamed_response_opens_deltas_and_completes_in_order() {
        let mut stream = request(Endpoint::Responses, json!({"model": "m", "input": "a"}));
        stream.streamed = true;
        let mut render = Render::new(&stream);
        let (tx, mut rx) = mpsc::unbounded_channel();
        render.text("Hel".into(), &tx);
        render.text("lo".into(), &tx);
        let done = render.finish(&result(FinishReason::Stop), &tx);
        assert_eq!(done.body, None);
        let events = events(&mut rx);
        let kinds: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (name, data)) in events.iter().enumerate() {
            assert_eq!(data["type"], json!(name), "the type repeats the event name");
            assert_eq!(data["sequence_number"], i);
        }
        let completed = &events[9].1["response"];
        assert_eq!(completed["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(completed["usage"]["total_tokens"], 10);
    }

    #[test]
    fn a_response_cut_at_max_output_tokens_is_incomplete() {
        let render = Render::new(&request(
            Endpoint::Responses,
            json!({"model": "m", "input": "a"}),
        ));
        let (tx, _rx) = mpsc::unbounded_channel();
        let body = render
            .finish(&result(FinishReason::Length), &tx)
            .body
            .unwrap();
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["status"], "incomplete");
        assert_eq!(body["incomplete_details"]["reason"], "max_output_tokens");
    }

    #[test]
    fn a_streamed_completion_ends_with_its_reason_usage_and_done() {
        let mut stream = request(
            Endpoint::Completions,
            json!({"model": "m", "prompt": "a", "stream": true, "stream_options": {"include_usage": true}}),
        );
        stream.streamed = true;
        let mut render = Render::new(&stream);
        let (tx, mut rx) = mpsc::unbounded_channel();
        render.text("Hi".into(), &tx);
        render.finish(&result(FinishReason::Length), &tx);
        let events = events(&mut rx);
        assert_eq!(events.len(), 4, "{events:?}");
        assert_eq!(events[0].1["choices"][0]["text"], "Hi");
        assert_eq!(events[1].1["choices"][0]["finish_reason"], "length");
        assert_eq!(events[2].1["usage"]["completion_tokens"], 3);
        assert_eq!(events[3].1, json!("[DONE]"));
    }
}
