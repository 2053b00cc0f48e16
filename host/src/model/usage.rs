//! Token usage totals.

use serde::{Deserialize, Serialize};

/// Running totals of chat requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Chat requests that finished.
    pub requests: u64,
    /// Tokens in the prompts.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
    /// The sum of both.
    pub total_tokens: u64,
    /// What they cost in USD, at `[[inference.prices]]` when each was
    /// answered.
    #[serde(default, serialize_with = "nano_rounded")]
    pub cost_usd: f64,
    /// Requests answered from the response cache.
    #[serde(default)]
    pub cache_hits: u64,
    /// Of the prompt tokens, those the upstream read from its own prompt
    /// cache (priced at `cached_input_per_mtok`).
    #[serde(default)]
    pub cached_tokens: u64,
}

impl Totals {
    /// Adds `other` to these totals.
    pub fn add(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
        self.cost_usd += other.cost_usd;
        self.cache_hits += other.cache_hits;
        self.cached_tokens += other.cached_tokens;
    }
}

/// USD to the nano-dollar, so sums of floats read as the sums they are.
fn nano_rounded<S: serde::Serializer>(usd: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((usd * 1e9).round() / 1e9)
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
