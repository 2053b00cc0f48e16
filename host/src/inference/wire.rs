//! The OpenAI chat-completions wire format: the request as clients send it,
//! checked field by field, and the response and chunk bodies.
//!
//! Field names and meanings are OpenAI's, documented in its API reference.
#![allow(missing_docs)]

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
        })
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
        if self.n.is_some_and(|n| n != 1) {
            return unsupported("n", "other than 1");
        }
        if self.logprobs == Some(true) || self.top_logprobs.is_some() {
            return unsupported("logprobs", "");
        }
        if self.tools.as_ref().is_some_and(|t| !t.is_empty()) || self.functions.is_some() {
            return unsupported("tools", "(function calling)");
        }
        if let Some(format) = &self.response_format
            && format.get("type").and_then(Value::as_str) != Some("text")
        {
            return unsupported("response_format", "other than {\"type\": \"text\"}");
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
            other => {
                return Err(Error::invalid(
                    field("role"),
                    format!(
                        "role '{other}' is not supported; use system, developer, user or assistant"
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
        Ok(Message {
            role: role.into(),
            content,
        })
    }
}

/// `finish_reason` as OpenAI spells it.
pub fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

/// The `usage` object.
pub fn usage(result: &ChatResult) -> Value {
    json!({
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    })
}

/// Identifies one completion across its chunks.
pub struct Header {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Header {
    /// A whole (non-streamed) completion.
    pub fn completion(&self, text: String, result: &ChatResult) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null},
                "logprobs": null,
                "finish_reason": finish_reason(result.finish_reason),
            }],
            "usage": usage(result),
        })
    }

    /// One streamed chunk with one choice.
    pub fn chunk(&self, delta: Value, finish: Option<&str>, with_usage: bool) -> Value {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if with_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
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
