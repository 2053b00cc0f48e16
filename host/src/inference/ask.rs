//! What a job asks of a backend: a chat, or a request to one of the other
//! endpoints. Queueing, limits, routes and usage are the same for both, so
//! [`super::Inference`] runs either through this one trait.

use tokio::sync::mpsc;

use super::backend::{
    CallError, ChatRequest, ChatResult, Endpoint, ForwardRequest, ForwardResult, ModelBackend,
    Piece,
};
use super::text;

/// A request a backend can be asked, and how its answer is counted.
#[async_trait::async_trait]
pub trait Ask: Clone + Send + Sync + 'static {
    /// How the call ends.
    type Answer: Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static;

    /// The model asked for.
    fn model(&self) -> &str;

    /// The model asked for, to change.
    fn model_mut(&mut self) -> &mut String;

    /// The same request for a route's deployment serving it as `model`.
    fn for_model(&self, model: &str) -> Self {
        let mut asked = self.clone();
        *asked.model_mut() = model.to_string();
        asked
    }

    /// The tokens an answer used: prompt, completion.
    fn tokens(answer: &Self::Answer) -> (u32, u32);

    /// Of its prompt tokens, how many the upstream says it read from its
    /// own cache, and how many it wrote there.
    fn cached_tokens(answer: &Self::Answer) -> (u32, u32);

    /// Asks `backend` on `team`'s behalf, sending what comes to `output`.
    async fn ask(
        self,
        backend: &dyn ModelBackend,
        team: &str,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<Self::Answer, CallError>;
}

#[async_trait::async_trait]
impl Ask for ChatRequest {
    type Answer = ChatResult;

    fn model(&self) -> &str {
        &self.model
    }

    fn model_mut(&mut self) -> &mut String {
        &mut self.model
    }

    fn tokens(answer: &ChatResult) -> (u32, u32) {
        (answer.prompt_tokens, answer.completion_tokens)
    }

    fn cached_tokens(answer: &ChatResult) -> (u32, u32) {
        (answer.cached_tokens, answer.cache_write_tokens)
    }

    async fn ask(
        self,
        backend: &dyn ModelBackend,
        team: &str,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ChatResult, CallError> {
        backend.chat(team, self, output).await
    }
}

#[async_trait::async_trait]
impl Ask for ForwardRequest {
    type Answer = ForwardResult;

    fn model(&self) -> &str {
        &self.model
    }

    fn model_mut(&mut self) -> &mut String {
        &mut self.model
    }

    fn tokens(answer: &ForwardResult) -> (u32, u32) {
        (answer.prompt_tokens, answer.completion_tokens)
    }

    /// As the backend says (0.4.0), or else read from a whole body's
    /// usage: `prompt_tokens_details` for completions,
    /// `input_tokens_details` for responses.
    fn cached_tokens(answer: &ForwardResult) -> (u32, u32) {
        if answer.cached_tokens > 0 || answer.cache_write_tokens > 0 {
            return (answer.cached_tokens, answer.cache_write_tokens);
        }
        let Some(body) = &answer.body else {
            return (0, 0);
        };
        let Ok(body) = serde_json::from_str::<serde_json::Value>(body) else {
            return (0, 0);
        };
        let usage = &body["usage"];
        let cached = ["prompt_tokens_details", "input_tokens_details"]
            .iter()
            .find_map(|d| usage[*d]["cached_tokens"].as_u64())
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        (cached, 0)
    }

    /// A backend without `forward` (one built before 0.3.0, the embedded
    /// model) serves completions and responses through its chat.
    async fn ask(
        self,
        backend: &dyn ModelBackend,
        team: &str,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ForwardResult, CallError> {
        if backend.forwards() || self.endpoint == Endpoint::Embeddings {
            return backend.forward(team, self, output).await;
        }
        text::through_chat(backend, team, self, output).await
    }
}
