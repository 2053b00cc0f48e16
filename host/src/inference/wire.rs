//! The OpenAI chat-completions wire format: the request as clients send it,
//! checked field by field, and the response and chunk bodies.
//!
//! Field names and meanings are OpenAI's, documented in its API reference.
#![expect(
    missing_docs,
    reason = "the fields are OpenAI's, documented in its API reference"
)]

use serde::Deserialize;
use serde_json::{Value, json};

use super::backend::{ChatRequest, ChatResult, FinishReason, Message};
use crate::error::{Error, Result};

/// Most stop sequences OpenAI accepts.
const MAX_STOPS: usize = 4;

/// `POST /v1/chat/completions`. Every parameter OpenAI documents is known;
/// one we cannot honour is refused by name rather than ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    pub model: String,
    pub messages: Vec<InputMessage>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<u32>,
    pub user: Option<String>,
    pub metadata: Option<Value>,
    pub store: Option<bool>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub logit_bias: Option<Value>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
    pub response_format: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub functions: Option<Vec<Value>>,
    pub function_call: Option<Value>,
    pub service_tier: Option<String>,
    pub reasoning_effort: Option<String>,
    pub modalities: Option<Vec<String>>,
    pub audio: Option<Value>,
    pub prediction: Option<Value>,
    pub web_search_options: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct InputMessage {
    pub role: String,
    pub content: Option<Content>,
    /// An assistant message's tool calls, sent back with the results.
    pub tool_calls: Option<Value>,
    /// A tool message: the call it answers.
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
    pub function_call: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

impl CompletionRequest {
    /// Checks every parameter and builds the backend's request. `seed` is
    /// used when the client gave none.
    pub fn to_backend(&self, seed: u64) -> Result<ChatRequest> {
        self.refuse_unsupported()?;
        if self.messages.is_empty() {
            return Err(Error::invalid(
                "messages",
                "messages must hold at least one message",
            ));
        }
        let messages = self
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| m.to_backend(i))
            .collect::<Result<Vec<_>>>()?;
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(Error::invalid(
                "temperature",
                "temperature must be between 0 and 2",
            ));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(Error::invalid(
                "top_p",
                "top_p must be greater than 0 and at most 1",
            ));
        }
        let max_tokens = match (self.max_completion_tokens, self.max_tokens) {
            (Some(0), _) => {
                return Err(Error::invalid(
                    "max_completion_tokens",
                    "max_completion_tokens must be at least 1",
                ));
            }
            (None, Some(0)) => {
                return Err(Error::invalid(
                    "max_tokens",
                    "max_tokens must be at least 1",
                ));
            }
            (Some(m), _) | (None, Some(m)) => Some(m),
            (None, None) => None,
        };
        Ok(ChatRequest {
            model: self.model.clone(),
            messages,
            max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            seed: Some(self.seed.map_or(seed, |s| s as u64)),
            stop: self.stops()?,
            streamed: self.stream,
            extra: self.passed_through(),
        })
    }

    /// The fields a backend built for them honours and the host passes on
    /// unread (a JSON object), or `None` when the request uses none of them
    /// beyond their defaults.
    fn passed_through(&self) -> Option<String> {
        let mut extra = serde_json::Map::new();
        let mut put = |name: &str, value: Option<Value>| {
            if let Some(value) = value {
                extra.insert(name.to_string(), value);
            }
        };
        put(
            "tools",
            self.tools
                .clone()
                .filter(|t| !t.is_empty())
                .map(Value::from),
        );
        put("tool_choice", self.tool_choice.clone());
        put(
            "parallel_tool_calls",
            self.parallel_tool_calls.map(Value::from),
        );
        put("functions", self.functions.clone().map(Value::from));
        put("function_call", self.function_call.clone());
        let text = |f: &Value| f.get("type").and_then(Value::as_str) == Some("text");
        put(
            "response_format",
            self.response_format.clone().filter(|f| !text(f)),
        );
        put("logprobs", self.logprobs.filter(|l| *l).map(Value::from));
        put("top_logprobs", self.top_logprobs.map(Value::from));
        put("n", self.n.filter(|n| *n != 1).map(Value::from));
        (!extra.is_empty()).then(|| Value::Object(extra).to_string())
    }

    fn stops(&self) -> Result<Vec<String>> {
        let stops = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stops.len() > MAX_STOPS {
            return Err(Error::invalid(
                "stop",
                format!("at most {MAX_STOPS} stop sequences are allowed"),
            ));
        }
        if stops.iter().any(String::is_empty) {
            return Err(Error::invalid("stop", "stop sequences must not be empty"));
        }
        Ok(stops)
    }

    fn refuse_unsupported(&self) -> Result<()> {
        let unsupported = |param: &str, why: &str| {
            Err(Error::invalid(
                param,
                format!("{param} {why} is not supported by this server"),
            ))
        };
        if self.n == Some(0) {
            return Err(Error::invalid("n", "n must be at least 1"));
        }
        if self
            .modalities
            .as_ref()
            .is_some_and(|m| m.iter().any(|m| m != "text"))
            || self.audio.is_some()
        {
            return unsupported("modalities", "other than [\"text\"]");
        }
        if self.stream_options.is_some() && !self.stream {
            return Err(Error::invalid(
                "stream_options",
                "stream_options is only allowed with stream: true",
            ));
        }
        Ok(())
    }
}

impl InputMessage {
    fn to_backend(&self, index: usize) -> Result<Message> {
        let field = |name: &str| format!("messages[{index}].{name}");
        let role = match self.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            "tool" => "tool",
            "function" => "function",
            other => {
                return Err(Error::invalid(
                    field("role"),
                    format!(
                        "role '{other}' is not supported; use system, developer, user, assistant or tool"
                    ),
                ));
            }
        };
        let content = match &self.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(Error::invalid(
                                field("content"),
                                format!(
                                    "content parts of type '{kind}' are not supported; send text"
                                ),
                            ));
                        }
                    }
                }
                text
            }
        };
        let mut extra = serde_json::Map::new();
        for (name, value) in [
            ("tool_calls", self.tool_calls.clone()),
            ("tool_call_id", self.tool_call_id.clone().map(Value::from)),
            ("name", self.name.clone().map(Value::from)),
            ("function_call", self.function_call.clone()),
        ] {
            if let Some(value) = value.filter(|v| !v.is_null()) {
                extra.insert(name.to_string(), value);
            }
        }
        Ok(Message {
            role: role.into(),
            content,
            extra: (!extra.is_empty()).then(|| Value::Object(extra).to_string()),
        })
    }
}

/// Refuses what a backend built against 0.1.0 cannot be given (tools,
/// structured output, log probabilities, several choices, tool messages),
/// naming the field the way OpenAI SDKs report it.
pub fn refuse_passthrough(request: &ChatRequest) -> Result<()> {
    let model = &request.model;
    let unsupported = |param: String, what: &str| {
        Error::invalid(
            param,
            format!(
                "the model '{model}' does not support {what}; models served by an OpenAI-compatible upstream do"
            ),
        )
    };
    if let Some(extra) = &request.extra {
        let fields: serde_json::Map<String, Value> =
            serde_json::from_str(extra).unwrap_or_default();
        if let Some(name) = fields.keys().next() {
            return Err(unsupported(name.clone(), &format!("'{name}'")));
        }
    }
    for (i, message) in request.messages.iter().enumerate() {
        if matches!(message.role.as_str(), "tool" | "function") {
            return Err(unsupported(
                format!("messages[{i}].role"),
                &format!("messages with role '{}'", message.role),
            ));
        }
        if let Some(extra) = &message.extra {
            let fields: serde_json::Map<String, Value> =
                serde_json::from_str(extra).unwrap_or_default();
            let name = fields.keys().next().map_or("tool_calls", String::as_str);
            return Err(unsupported(
                format!("messages[{i}].{name}"),
                &format!("'{name}' in messages"),
            ));
        }
    }
    Ok(())
}

/// `finish_reason` as OpenAI spells it.
pub fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
    }
}

/// The `usage` object, with the prompt tokens read from the upstream's
/// cache when it reported any.
pub fn usage(result: &ChatResult) -> Value {
    let mut usage = json!({
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    });
    if result.cached_tokens > 0 {
        usage["prompt_tokens_details"] = json!({"cached_tokens": result.cached_tokens});
    }
    usage
}

/// Identifies one completion across its chunks.
pub struct Header {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Header {
    /// A whole (non-streamed) completion: the backend's own choices when it
    /// gave them (0.2.0), or one made of the text it emitted.
    pub fn completion(&self, text: String, result: &ChatResult) -> Value {
        let choices = result
            .choices
            .as_deref()
            .and_then(|c| serde_json::from_str::<Value>(c).ok())
            .filter(Value::is_array)
            .unwrap_or_else(|| {
                json!([{
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": null},
                    "logprobs": null,
                    "finish_reason": finish_reason(result.finish_reason),
                }])
            });
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
            "usage": usage(result),
        })
    }

    /// A streamed chunk carrying one choice (as a backend may make it whole).
    pub fn raw_chunk(&self, choice: Value, with_usage: bool) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [choice],
        });
        if with_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// One streamed chunk with the first choice's `delta`.
    pub fn chunk(&self, delta: Value, finish: Option<&str>, with_usage: bool) -> Value {
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        self.raw_chunk(choice, with_usage)
    }

    /// The final usage chunk: no choices.
    pub fn usage_chunk(&self, result: &ChatResult) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [],
            "usage": usage(result),
        })
    }
}
