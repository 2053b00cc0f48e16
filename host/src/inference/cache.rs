//! The response cache (`[inference.cache]`): exact-match answers, kept in
//! the store so that every host on one database shares them.
//!
//! The key is a hash of the caller's team, the endpoint and the request's
//! body without the fields that do not change the answer (how it is
//! delivered, who asks). What is kept is what the backend sent: its pieces
//! and its result, so a hit is answered by the same code as a miss, whole
//! or as the same stream. Only answers that ended well and reached the
//! client whole are kept.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::backend::Piece;
use crate::cfg::InferenceConfig;
use crate::ids;
use crate::store::Store;
use crate::tasks::{Stage, Tasks};

/// The header every cacheable answer carries: `hit` or `miss`.
pub const HEADER: &str = "x-switchyard-cache";

/// Fields that change how an answer is delivered or billed, not what it
/// says.
const NOT_THE_ANSWER: [&str; 5] = [
    "stream_options",
    "user",
    "metadata",
    "store",
    "service_tier",
];

/// How often expired answers are forgotten and the cache held to its size.
const TRIM_EVERY: Duration = Duration::from_secs(60);

/// What a client asked, as the cache sees it.
#[derive(Debug, Clone)]
pub struct Asked {
    /// Hash of the endpoint and the body's answer-changing fields.
    digest: String,
    /// `Cache-Control: no-cache` turns this off: the upstream is asked.
    read: bool,
    /// `Cache-Control: no-store` turns this off: the answer is not kept.
    write: bool,
}

impl Asked {
    /// [`Asked::new`] for a body as sent (already parsed once as a
    /// request, so it is a JSON object).
    pub fn of_bytes(endpoint: &str, body: &[u8], headers: &HeaderMap) -> Option<Asked> {
        let fields: Map<String, Value> = serde_json::from_slice(body).ok()?;
        Some(Asked::new(endpoint, &fields, headers))
    }

    /// What `body` (a request to `endpoint`) asks, and what its
    /// `Cache-Control` allows.
    pub fn new(endpoint: &str, body: &Map<String, Value>, headers: &HeaderMap) -> Asked {
        // serde_json's maps are sorted, so equal bodies hash alike.
        let mut hash = Sha256::new();
        hash.update(endpoint.as_bytes());
        for (field, value) in body {
            if NOT_THE_ANSWER.contains(&field.as_str()) {
                continue;
            }
            hash.update([0]);
            hash.update(field.as_bytes());
            hash.update([0]);
            hash.update(value.to_string().as_bytes());
        }
        let control: Vec<String> = headers
            .get_all(axum::http::header::CACHE_CONTROL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|d| d.trim().to_ascii_lowercase())
            .collect();
        Asked {
            digest: hex::encode(hash.finalize()),
            read: !control.iter().any(|d| d == "no-cache"),
            write: !control.iter().any(|d| d == "no-store"),
        }
    }
}

/// Where a request's answer is, or will be, kept.
#[derive(Debug, Clone)]
pub struct Slot {
    key: String,
    read: bool,
    write: bool,
}

impl Slot {
    /// Whether the answer may be kept.
    pub fn keeps(&self) -> bool {
        self.write
    }
}

/// An answer as kept.
#[derive(Serialize, Deserialize)]
pub struct Kept<T> {
    /// What the backend sent as it generated.
    pub pieces: Vec<Piece>,
    /// How it ended.
    pub answer: T,
}

/// The cache.
pub struct Cache {
    store: Store,
    enabled: bool,
    ttl_ms: u64,
    max_bytes: usize,
    /// Routes set `cache = false`.
    off: HashSet<String>,
}

impl Cache {
    /// The cache `cfg` asks for; while it is on, a loop on `tasks` trims
    /// it each minute.
    pub fn start(cfg: &InferenceConfig, store: Store, tasks: &Tasks) -> Arc<Cache> {
        let cache = Arc::new(Cache {
            store,
            enabled: cfg.cache.enabled,
            ttl_ms: cfg.cache.ttl_s.saturating_mul(1_000),
            max_bytes: cfg.cache.max_bytes,
            off: cfg
                .routes
                .iter()
                .filter(|r| !r.cache)
                .map(|r| r.model.clone())
                .collect(),
        });
        if cache.enabled {
            let weak = Arc::downgrade(&cache);
            tasks.spawn_draining(Stage::Upkeep, |stop| async move {
                let mut tick = tokio::time::interval(TRIM_EVERY);
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = tick.tick() => {}
                    }
                    let Some(cache) = weak.upgrade() else { return };
                    cache.trim().await;
                }
            });
        }
        cache
    }

    /// Whether answers are cached at all: when not, requests need not
    /// say what they ask.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    async fn trim(&self) {
        let max = self.max_bytes as u64;
        if let Err(e) = self.store.trim_cache(ids::now_ms(), max).await {
            tracing::warn!(error = %e, "trimming the response cache failed; retried in a minute");
        }
    }

    /// Where `team`'s request for `model` is kept, if its answers may be.
    pub fn slot(&self, team: &str, model: &str, asked: Option<&Asked>) -> Option<Slot> {
        let asked = asked.filter(|_| self.enabled && !self.off.contains(model))?;
        let mut hash = Sha256::new();
        hash.update(team.as_bytes());
        hash.update([0]);
        hash.update(asked.digest.as_bytes());
        Some(Slot {
            key: hex::encode(hash.finalize()),
            read: asked.read,
            write: asked.write,
        })
    }

    /// The answer kept in `slot`, if there is one and the client allows it.
    pub async fn get<T: serde::de::DeserializeOwned>(&self, slot: &Slot) -> Option<Kept<T>> {
        if !slot.read {
            return None;
        }
        match self.store.cached(&slot.key, ids::now_ms()).await {
            Ok(found) => found.and_then(|bytes| serde_json::from_slice(&bytes).ok()),
            Err(e) => {
                tracing::warn!(error = %e, "reading the response cache failed; asking the backend");
                None
            }
        }
    }

    /// Keeps `kept` in `slot`, unless it is larger than the cache.
    pub async fn put<T: Serialize>(&self, slot: &Slot, kept: &Kept<T>) {
        let Ok(bytes) = serde_json::to_vec(kept) else {
            return;
        };
        if bytes.len() > self.max_bytes {
            return;
        }
        let expires = ids::now_ms().saturating_add(self.ttl_ms);
        if let Err(e) = self.store.cache(&slot.key, &bytes, expires).await {
            tracing::warn!(error = %e, "keeping an answer in the response cache failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fields_that_change_the_answer_make_the_key() {
        let none = HeaderMap::new();
        let body = |v: Value| v.as_object().unwrap().clone();
        let a = Asked::new(
            "chat",
            &body(
                serde_json::json!({"model": "m", "messages": [], "user": "x", "stream_options": {}}),
            ),
            &none,
        );
        let b = Asked::new(
            "chat",
            &body(serde_json::json!({"messages": [], "model": "m"})),
            &none,
        );
        let c = Asked::new(
            "chat",
            &body(serde_json::json!({"model": "m", "messages": [], "temperature": 0})),
            &none,
        );
        let d = Asked::new(
            "completions",
            &body(serde_json::json!({"model": "m", "messages": []})),
            &none,
        );
        assert_eq!(a.digest, b.digest);
        assert_ne!(a.digest, c.digest);
        assert_ne!(a.digest, d.digest);
        let mut headers = HeaderMap::new();
        headers.insert("cache-control", "No-Cache, no-store".parse().unwrap());
        let e = Asked::new("chat", &Map::new(), &headers);
        assert!(!e.read && !e.write);
    }
}
