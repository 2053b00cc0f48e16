//! What inference needs of a model backend, and nothing more: its models,
//! its health, a chat call and a call for the other endpoints, in the
//! host's own types. The backends the
//! host runs are wasmtime plugins ([`crate::plugin::Backend`]);
//! routing, limits, usage and the HTTP layer see only this trait.

use tokio::sync::mpsc;

pub use crate::plugin::{
    CallError, ChatRequest, ChatResult, Endpoint, FinishReason, ForwardRequest, ForwardResult,
    Message, ModelInfo, Piece,
};

/// A model backend as inference calls it.
#[async_trait::async_trait]
pub trait ModelBackend: Send + Sync {
    /// Its name and version, for logs and metrics.
    fn name(&self) -> &str;

    /// Whether the work happens elsewhere (an upstream server), so it is
    /// limited apart from local generation.
    fn is_proxy(&self) -> bool;

    /// Whether it takes the OpenAI fields the host passes through as they
    /// are (tools, response formats, log probabilities, several choices).
    fn passes_through(&self) -> bool;

    /// Whether it serves the endpoints besides chat itself ([`Self::forward`]).
    fn forwards(&self) -> bool;

    /// The models it serves.
    async fn models(&self) -> Result<Vec<ModelInfo>, CallError>;

    /// Whether it is ready; a backend busy with a request is.
    async fn health(&self) -> Result<(), CallError>;

    /// Generates a reply for `team`'s request, sending text to `output` as
    /// it is made.
    async fn chat(
        &self,
        team: &str,
        request: ChatRequest,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ChatResult, CallError>;

    /// Serves `team`'s request to an endpoint besides chat, sending a
    /// streamed reply's events to `output`.
    async fn forward(
        &self,
        team: &str,
        request: ForwardRequest,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ForwardResult, CallError>;
}

#[async_trait::async_trait]
impl ModelBackend for crate::plugin::Backend {
    fn name(&self) -> &str {
        self.name()
    }

    fn is_proxy(&self) -> bool {
        self.is_proxy()
    }

    fn passes_through(&self) -> bool {
        self.passes_through()
    }

    fn forwards(&self) -> bool {
        self.forwards()
    }

    async fn models(&self) -> Result<Vec<ModelInfo>, CallError> {
        self.models().await
    }

    async fn health(&self) -> Result<(), CallError> {
        self.health().await
    }

    async fn chat(
        &self,
        team: &str,
        request: ChatRequest,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ChatResult, CallError> {
        self.chat(team, request, output).await
    }

    async fn forward(
        &self,
        team: &str,
        request: ForwardRequest,
        output: mpsc::UnboundedSender<Piece>,
    ) -> Result<ForwardResult, CallError> {
        self.forward(team, request, output).await
    }
}
