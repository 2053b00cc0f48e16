//! Idempotency keys: the first answer to an event-producing request, kept
//! so that the same request sent again gets it back and causes nothing.

use serde::{Deserialize, Serialize};

/// A request seen under an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Idempotent {
    /// SHA-256 (hex) of the method, path and body: the same key with
    /// another request is refused.
    pub fingerprint: String,
    /// Unix milliseconds of the first request; the key lapses 24 hours on.
    pub at_ms: u64,
    /// The answer's status; `None` while the first request runs.
    pub status: Option<u16>,
    /// The answer's body (JSON text).
    pub body: Option<String>,
}
