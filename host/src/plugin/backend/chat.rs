//! The host's own types of a backend's calls (chat, and the endpoints
//! passed through whole): all that inference and the HTTP layer see of them. The WIT bindings' types stay inside `plugin::backend`
//! and are converted here, so an interface version changes nothing above.

use crate::plugin::bindings::since_v0_1_0::model::exports::switchyard::plugin::backend as v1;
use crate::plugin::bindings::since_v0_2_0::model::exports::switchyard::plugin::backend as v2;
use crate::plugin::bindings::since_v0_3_0::model::exports::switchyard::plugin::backend as v3;
use crate::plugin::bindings::since_v0_4_0::model::exports::switchyard::plugin::backend as v4;

/// A model a backend serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    /// Its id, as clients name it.
    pub id: String,
    /// Who owns it, as `/v1/models` shows.
    pub owned_by: String,
    /// Unix seconds.
    pub created: u64,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text.
    pub content: String,
    /// Its other OpenAI fields (tool calls, …) as JSON, passed through.
    pub extra: Option<String>,
}

/// A chat request, as a backend gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The model asked for.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Sampling seed.
    pub seed: Option<u64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Whether the client streams the reply.
    pub streamed: bool,
    /// The request's other OpenAI fields (tools, `response_format`, …) as
    /// JSON, passed through.
    pub extra: Option<String>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The model called tools.
    ToolCalls,
    /// Withheld by a content filter.
    ContentFilter,
}

/// How a chat call ended (kept as JSON in the response cache).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatResult {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Of the prompt's tokens, those read from the upstream's prompt cache
    /// (0.4.0 backends say; older ones count none).
    #[serde(default)]
    pub cached_tokens: u32,
    /// Of the prompt's tokens, those written to the upstream's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u32,
    /// Whole choices as JSON, when the backend gave them.
    pub choices: Option<String>,
}

/// OpenAI's endpoints besides chat, which 0.3.0 backends serve whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/responses`.
    Responses,
}

impl Endpoint {
    /// Its path under `/v1`.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Embeddings => "embeddings",
            Endpoint::Completions => "completions",
            Endpoint::Responses => "responses",
        }
    }
}

/// A request to one of those endpoints, passed through.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardRequest {
    /// Which endpoint.
    pub endpoint: Endpoint,
    /// The model asked for.
    pub model: String,
    /// The client's body, a JSON object whose `model` is the one above.
    pub body: serde_json::Map<String, serde_json::Value>,
    /// Whether the client streams the reply.
    pub streamed: bool,
}

/// How a forwarded request ended (kept as JSON in the response cache).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ForwardResult {
    /// A reply not streamed: the body, a JSON object.
    pub body: Option<String>,
    /// Input tokens.
    pub prompt_tokens: u32,
    /// Output tokens.
    pub completion_tokens: u32,
    /// Of the input's tokens, those read from the upstream's prompt cache
    /// (0.4.0 backends say; for older ones the body's usage is read).
    #[serde(default)]
    pub cached_tokens: u32,
    /// Of the input's tokens, those written to the upstream's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u32,
}

/// A forwarded request and its result, alike from 0.3.0 on but for the
/// prompt-cache tokens 0.4.0 adds; `$cache` reads them from a result `$r`.
macro_rules! forward_from {
    ($($v:ident: |$r:ident| $cache:expr),*) => {$(
        /// Taken by value: the body (an embeddings batch may be large) is
        /// moved, not copied.
        impl From<ForwardRequest> for $v::ForwardRequest {
            fn from(r: ForwardRequest) -> Self {
                let mut body = r.body;
                body.insert("model".into(), r.model.clone().into());
                $v::ForwardRequest {
                    endpoint: match r.endpoint {
                        Endpoint::Embeddings => $v::Endpoint::Embeddings,
                        Endpoint::Completions => $v::Endpoint::Completions,
                        Endpoint::Responses => $v::Endpoint::Responses,
                    },
                    model: r.model,
                    body: serde_json::Value::Object(body).to_string(),
                    streamed: r.streamed,
                }
            }
        }

        impl From<$v::ForwardResult> for ForwardResult {
            fn from($r: $v::ForwardResult) -> Self {
                let (cached_tokens, cache_write_tokens) = $cache;
                ForwardResult {
                    body: $r.body,
                    prompt_tokens: $r.prompt_tokens,
                    completion_tokens: $r.completion_tokens,
                    cached_tokens,
                    cache_write_tokens,
                }
            }
        }
    )*};
}
forward_from!(
    v3: |r| (0, 0),
    v4: |r| (r.cached_tokens, r.cache_write_tokens)
);

/// 0.1.0 carries no `extra`: the host refuses requests that use it before
/// they reach such a backend.
impl From<ChatRequest> for v1::ChatRequest {
    fn from(r: ChatRequest) -> Self {
        v1::ChatRequest {
            model: r.model,
            messages: r
                .messages
                .into_iter()
                .map(|m| v1::Message {
                    role: m.role,
                    content: m.content,
                })
                .collect(),
            max_tokens: r.max_tokens,
            temperature: r.temperature,
            top_p: r.top_p,
            seed: r.seed,
            stop: r.stop,
        }
    }
}

impl From<v1::ChatResult> for ChatResult {
    fn from(r: v1::ChatResult) -> Self {
        ChatResult {
            finish_reason: match r.finish_reason {
                v1::FinishReason::Stop => FinishReason::Stop,
                v1::FinishReason::Length => FinishReason::Length,
            },
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            cached_tokens: 0,
            cache_write_tokens: 0,
            choices: None,
        }
    }
}

/// A model's description, alike in every interface version.
macro_rules! model_info_from {
    ($($v:ident),*) => {$(
        impl From<$v::ModelInfo> for ModelInfo {
            fn from(m: $v::ModelInfo) -> Self {
                ModelInfo {
                    id: m.id,
                    owned_by: m.owned_by,
                    created: m.created,
                }
            }
        }
    )*};
}
model_info_from!(v1, v2, v3, v4);

/// A chat's request and result in the versions where they have the same
/// shape (0.2.0 on; 0.1.0 lacks `extra` and two finish reasons), but for
/// the prompt-cache tokens 0.4.0 adds: `$cache` reads them from a result
/// `$r`.
macro_rules! chat_from {
    ($($v:ident: |$r:ident| $cache:expr),*) => {$(
        impl From<ChatRequest> for $v::ChatRequest {
            fn from(r: ChatRequest) -> Self {
                let message = |m: Message| $v::Message {
                    role: m.role,
                    content: m.content,
                    extra: m.extra,
                };
                $v::ChatRequest {
                    model: r.model,
                    messages: r.messages.into_iter().map(message).collect(),
                    max_tokens: r.max_tokens,
                    temperature: r.temperature,
                    top_p: r.top_p,
                    seed: r.seed,
                    stop: r.stop,
                    streamed: r.streamed,
                    extra: r.extra,
                }
            }
        }

        impl From<$v::ChatResult> for ChatResult {
            fn from($r: $v::ChatResult) -> Self {
                let (cached_tokens, cache_write_tokens) = $cache;
                ChatResult {
                    finish_reason: match $r.finish_reason {
                        $v::FinishReason::Stop => FinishReason::Stop,
                        $v::FinishReason::Length => FinishReason::Length,
                        $v::FinishReason::ToolCalls => FinishReason::ToolCalls,
                        $v::FinishReason::ContentFilter => FinishReason::ContentFilter,
                    },
                    prompt_tokens: $r.prompt_tokens,
                    completion_tokens: $r.completion_tokens,
                    cached_tokens,
                    cache_write_tokens,
                    choices: $r.choices,
                }
            }
        }
    )*};
}
chat_from!(
    v2: |r| (0, 0),
    v3: |r| (0, 0),
    v4: |r| (r.cached_tokens, r.cache_write_tokens)
);
