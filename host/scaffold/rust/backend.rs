//! A Switchyard model-backend plugin: it serves one model, named after the
//! plugin, that answers each chat with the last user message, word by word.
//!
//! Replace `reply` with your engine: call a library, or an upstream over
//! `wasi:http` (the operator grants its hosts and the host adds the key, so
//! the plugin never holds it). `eprintln!` goes to the host's log.

wit_bindgen::generate!({ path: "wit", world: "model-backend" });

use exports::switchyard::plugin::backend::{
    ChatRequest, ChatResult, FinishReason, ForwardRequest, ForwardResult, Guest, ModelInfo,
};
use switchyard::plugin::output;
use switchyard::plugin::types::PluginError;

/// The model's id, as clients name it.
const MODEL: &str = env!("CARGO_PKG_NAME");

struct Plugin;

/// What the model says to `request`: here, the last user message again.
fn reply(request: &ChatRequest) -> String {
    let last = request.messages.iter().rev().find(|m| m.role == "user");
    last.map_or_else(String::new, |m| m.content.clone())
}

impl Guest for Plugin {
    fn list_models() -> Vec<ModelInfo> {
        vec![ModelInfo {
            id: MODEL.into(),
            owned_by: MODEL.into(),
            created: 0,
        }]
    }

    fn health() -> Result<(), PluginError> {
        Ok(())
    }

    fn chat(request: ChatRequest) -> Result<ChatResult, PluginError> {
        let text = reply(&request);
        let most = request.max_tokens.unwrap_or(u32::MAX) as usize;
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        let mut sent = 0;
        for word in words.iter().take(most) {
            sent += 1;
            // False: the client left; stop, and report what was made.
            if !output::emit(word) {
                break;
            }
        }
        let prompt: usize = request.messages.iter().map(|m| m.content.split_whitespace().count() + 1).sum();
        Ok(ChatResult {
            finish_reason: if sent < words.len() { FinishReason::Length } else { FinishReason::Stop },
            prompt_tokens: prompt as u32,
            completion_tokens: sent as u32,
            cached_tokens: 0,
            cache_write_tokens: 0,
            choices: None,
        })
    }

    fn forward(request: ForwardRequest) -> Result<ForwardResult, PluginError> {
        // Embeddings, text completions and the Responses API, each body
        // passed whole: this model serves chat only, so it refuses them
        // and the client is told so.
        Err(PluginError {
            code: "unsupported-endpoint".into(),
            message: format!("{MODEL} serves chat only, not {:?}", request.endpoint),
            position: None,
            status: None,
        })
    }
}

export!(Plugin);
