//! Plugins uploaded through the operator API, kept in the store so that a
//! restart, and every other host, loads them too.

use serde::{Deserialize, Serialize};

/// An uploaded plugin: its component and what it was uploaded with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPlugin {
    /// The plugin's name.
    pub name: String,
    /// `payload-template`, `event-filter` or `model-backend`.
    pub kind: String,
    /// The uploader's version label.
    pub version: String,
    /// SHA-256 of the component, hex: hosts compare it to what they run.
    pub sha256: String,
    /// The upload's limits and a backend's grant, as the API took them.
    pub settings: serde_json::Value,
    /// The component.
    #[serde(with = "hex_bytes")]
    pub wasm: Vec<u8>,
    /// Unix milliseconds.
    pub uploaded_at_ms: u64,
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        hex::decode(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}
