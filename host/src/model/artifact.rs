//! Artifact collections and their versions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A collection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Collection {
    /// Unique within its scope.
    pub name: String,
    /// Free text.
    pub description: String,
    /// How many versions it has had; the next is `v{versions}`.
    pub versions: u64,
    /// Who created it.
    pub created_by: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A version of a collection, without its aliases and tags: those are
/// records of their own, so that labelling a version costs the same however
/// many labels it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Version {
    /// The collection.
    pub collection: String,
    /// `v0`, `v1`, …
    pub version: String,
    /// The number in `version`.
    pub index: u64,
    /// Top-level metadata.
    pub metadata: BTreeMap<String, Value>,
    /// For a registry version: the project version it links to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Who created it.
    pub created_by: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A project version, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The owning team.
    pub team: String,
    /// The project.
    pub project: String,
    /// The collection.
    pub collection: String,
    /// `v3`.
    pub version: String,
}

/// A version with its aliases and tags, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelledVersion {
    /// The version.
    #[serde(flatten)]
    pub version: Version,
    /// Aliases it holds, oldest first.
    pub aliases: Vec<String>,
    /// Its tags, oldest first.
    pub tags: Vec<String>,
}

impl LabelledVersion {
    /// A version with no labels yet.
    pub fn bare(version: Version) -> LabelledVersion {
        LabelledVersion {
            version,
            aliases: Vec::new(),
            tags: Vec::new(),
        }
    }
}
