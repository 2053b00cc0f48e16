//! Runs in a project: where metrics are logged.

use serde::{Deserialize, Serialize};

/// A run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Unique id.
    pub id: String,
    /// Display name (not unique).
    pub name: String,
    /// The user who created it.
    pub creator: String,
    /// Unix seconds.
    pub created_at: u64,
}
