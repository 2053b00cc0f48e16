//! Token usage totals.

use serde::{Deserialize, Serialize};

/// Running totals of chat requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Chat requests that finished.
    pub requests: u64,
    /// Tokens in the prompts.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
    /// The sum of both.
    pub total_tokens: u64,
}

impl Totals {
    /// Adds `other` to these totals.
    pub fn add(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// The totals of one usage scope, day, model and API key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageRow {
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    /// The model id.
    pub model: String,
    /// The API key's id.
    pub key_id: String,
    /// The route's deployment that served it; empty for a model without
    /// a route.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub deployment: String,
    /// Its totals.
    #[serde(flatten)]
    pub totals: Totals,
}
