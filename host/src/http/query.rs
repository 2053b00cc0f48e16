//! The query-string extractor, with errors in the API's shape.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Query parameters parsed as a `T`.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
        axum::extract::Query::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| Error::InvalidRequest {
                message: format!("invalid query parameters: {}", e.body_text()),
                param: None,
            })
    }
}

/// `?force=true`: go ahead although other objects depend on this one.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Force {
    /// Whether to go ahead.
    #[serde(default)]
    pub force: bool,
}
