//! The one error type of the HTTP API.
//!
//! Every failure a client can see is an [`Error`]. Each variant maps to exactly
//! one HTTP status and one OpenAI-shaped body:
//! `{"error":{"message":…,"type":…,"param":…,"code":…}}`, where `code` is a
//! string or null, never a number.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::plugin::PluginError;

/// A failure reported to an API client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is well-formed HTTP but its content is wrong.
    #[error("{message}")]
    InvalidRequest {
        /// What was wrong and how to fix it.
        message: String,
        /// The offending field, if one can be named.
        param: Option<String>,
    },
    /// The body is not valid JSON, or not of the expected shape.
    #[error("{message}")]
    InvalidJson {
        /// Where the body broke, and why.
        message: String,
        /// The JSON path of the offending field, if known.
        param: Option<String>,
    },
    /// A plugin refused client input (a payload template, an event filter):
    /// a 400 with the plugin's own code and where in the input it pointed.
    #[error("{message}")]
    PluginRefused {
        /// The plugin's message, naming it.
        message: String,
        /// The field holding the input.
        param: Option<String>,
        /// The plugin's code, e.g. `unknown-variable`.
        code: String,
        /// Where in the input, when the plugin said and the input is known.
        position: Option<Position>,
    },
    /// No or an unknown API key.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller is known but lacks the role for this action.
    #[error("{0}")]
    PermissionDenied(String),
    /// The API key may not be used for this model or project: a 403 naming
    /// the field (`model`, or the project header).
    #[error("{message}")]
    OutOfScope {
        /// Which key, which list, and how to get one that may.
        message: String,
        /// `model` or the project header's name.
        param: String,
    },
    /// The object or route does not exist (or is not visible to the caller).
    #[error("{0}")]
    NotFound(String),
    /// The request names a model that is not served (OpenAI's
    /// `model_not_found`, with `param: "model"`).
    #[error("{0}")]
    ModelNotFound(String),
    /// The route exists but not for this method.
    #[error("method {method} is not allowed on {path}; allowed: {allowed}")]
    MethodNotAllowed {
        /// The method that was used.
        method: String,
        /// The request path.
        path: String,
        /// The methods the route accepts.
        allowed: String,
    },
    /// An object with this name already exists.
    #[error("{0}")]
    Conflict(String),
    /// An `Idempotency-Key` came back with a different request.
    #[error("{0}")]
    IdempotencyKeyReused(String),
    /// The request's target is longer than the HTTP layer reads.
    #[error("{0}")]
    UriTooLong(String),
    /// The request's headers are larger than the HTTP layer reads.
    #[error("{0}")]
    HeadersTooLarge(String),
    /// The body exceeds the configured limit.
    #[error("request body is larger than the limit of {limit} bytes; send a smaller body")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is not `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The client sent its body too slowly.
    #[error("{0}")]
    RequestTimeout(String),
    /// A queue or limit is full; retry later.
    #[error("{0}")]
    RateLimited(String),
    /// A rate limit or budget is spent: a 429 with `Retry-After`.
    #[error("{message}")]
    OverLimit {
        /// Which limit, its value, and when it allows again.
        message: String,
        /// Seconds until a retry can succeed.
        retry_after: u64,
        /// A daily budget (`insufficient_quota`) rather than a rate.
        budget: bool,
    },
    /// The service cannot take the request right now.
    #[error("{0}")]
    Unavailable(String),
    /// The store cannot be reached. Says nothing of where it is: that is in
    /// the host's log, for operators.
    #[error("the store is unavailable; the request was not carried out, retry it shortly")]
    StoreUnavailable,
    /// The disk holding the store is full: writes are refused, reads work.
    #[error(
        "the disk holding the data directory is full: the request was not carried out. \
         Reads still work; writes resume by themselves once the disk has room again \
         (free space on it; old history expires by itself). See docs/operations.md"
    )]
    StoreFull,
    /// A server we forward to (an upstream model API) failed.
    #[error("{0}")]
    BadGateway(String),
    /// A model backend (an upstream behind it, or the model itself) did not
    /// answer within its time limit.
    #[error("{0}")]
    GatewayTimeout(String),
    /// A plugin trapped or exceeded a limit. The message names the plugin and
    /// version and says what happened; it holds no secrets.
    #[error("{0}")]
    PluginFailed(String),
    /// A bug or an unexpected failure inside the host. The message given to the
    /// client is generic; the cause goes to the log.
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

impl Error {
    /// Whether the same request may succeed later, unchanged: the store, a
    /// queue or an upstream refused it for now. Background work keeps such
    /// an item for its next pass; anything else is the item's own failure.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable(_)
                | Error::StoreUnavailable
                | Error::StoreFull
                | Error::RateLimited(_)
                | Error::OverLimit { .. }
                | Error::RequestTimeout(_)
                | Error::BadGateway(_)
                | Error::GatewayTimeout(_)
        )
    }
}

impl From<crate::store::StoreError> for Error {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            // The journal logged why; the host is stopping.
            crate::store::StoreError::Unavailable | crate::store::StoreError::Failed(_) => {
                Error::StoreUnavailable
            }
            crate::store::StoreError::Full => Error::StoreFull,
            crate::store::StoreError::Other(cause) => Error::Internal(cause),
        }
    }
}

/// A plugin's failure as the API reports it. Here rather than in `plugin/`,
/// so that the runtime knows nothing of the API above it.
impl PluginError {
    /// The API error for a call on client input held in field `param`
    /// (`input` its text, to place the plugin's position in): a refusal
    /// keeps the plugin's code and position; anything else is as `From`.
    pub fn on_input(self, param: Option<&str>, input: Option<&str>) -> Error {
        match self {
            PluginError::Reported {
                ref code, position, ..
            } => Error::PluginRefused {
                code: code.clone(),
                position: position
                    .zip(input)
                    .and_then(|(at, text)| Position::locate(text, at)),
                param: param.map(str::to_string),
                message: self.to_string(),
            },
            other => other.into(),
        }
    }
}

impl From<PluginError> for Error {
    fn from(e: PluginError) -> Self {
        use Error;
        match e {
            PluginError::Reported { .. } => e.on_input(None, None),
            PluginError::Load { .. } => Error::InvalidRequest {
                message: e.to_string(),
                param: None,
            },
            PluginError::NotLoaded { .. } => Error::NotFound(e.to_string()),
            PluginError::Failed { .. } => Error::PluginFailed(e.to_string()),
            PluginError::Conflict(message) => Error::Conflict(message),
            PluginError::Queue(message) => Error::Unavailable(message),
        }
    }
}

/// A place in a client's text: byte offset, and line and column (from 1,
/// columns in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Position {
    /// Bytes from the start.
    pub offset: u32,
    /// Line, from 1.
    pub line: u32,
    /// Column in characters, from 1.
    pub column: u32,
}

impl Position {
    /// Where byte `offset` of `text` is; `None` when it is past the end.
    pub fn locate(text: &str, offset: u32) -> Option<Position> {
        let before = text.get(..offset as usize)?;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Some(Position {
            offset,
            line: count(before.matches('\n').count() + 1),
            column: count(before[line_start..].chars().count() + 1),
        })
    }
}

/// Shorthand for results whose error is an API [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A 400 about one named field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    /// The HTTP status this error is reported with.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::InvalidRequest { .. }
            | Error::InvalidJson { .. }
            | Error::PluginRefused { .. } => StatusCode::BAD_REQUEST,
            Error::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Error::PermissionDenied(_) | Error::OutOfScope { .. } => StatusCode::FORBIDDEN,
            Error::NotFound(_) | Error::ModelNotFound(_) => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::IdempotencyKeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Error::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            Error::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Error::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::RateLimited(_) | Error::OverLimit { .. } => StatusCode::TOO_MANY_REQUESTS,
            Error::Unavailable(_) | Error::StoreUnavailable | Error::StoreFull => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Error::BadGateway(_) => StatusCode::BAD_GATEWAY,
            Error::GatewayTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Error::PluginFailed(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The OpenAI `type` field.
    fn kind(&self) -> &'static str {
        match self {
            Error::Unauthenticated(_) => "authentication_error",
            Error::PermissionDenied(_) | Error::OutOfScope { .. } => "permission_error",
            Error::RateLimited(_) => "rate_limit_error",
            Error::OverLimit { budget: false, .. } => "rate_limit_exceeded",
            Error::OverLimit { budget: true, .. } => "insufficient_quota",
            Error::Unavailable(_)
            | Error::StoreUnavailable
            | Error::StoreFull
            | Error::BadGateway(_)
            | Error::GatewayTimeout(_)
            | Error::PluginFailed(_)
            | Error::Internal(_) => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The OpenAI `code` field: a stable, machine-readable string.
    fn code(&self) -> &'static str {
        match self {
            Error::InvalidRequest { .. } => "invalid_request",
            Error::PluginRefused { .. } => "plugin_refused",
            Error::InvalidJson { .. } => "invalid_json",
            Error::Unauthenticated(_) => "invalid_api_key",
            Error::PermissionDenied(_) | Error::OutOfScope { .. } => "permission_denied",
            Error::NotFound(_) => "not_found",
            Error::ModelNotFound(_) => "model_not_found",
            Error::MethodNotAllowed { .. } => "method_not_allowed",
            Error::Conflict(_) => "conflict",
            Error::IdempotencyKeyReused(_) => "idempotency_key_reused",
            Error::PayloadTooLarge { .. } => "payload_too_large",
            Error::UriTooLong(_) => "uri_too_long",
            Error::HeadersTooLarge(_) => "headers_too_large",
            Error::UnsupportedMediaType(_) => "unsupported_media_type",
            Error::RequestTimeout(_) => "request_timeout",
            Error::RateLimited(_) | Error::OverLimit { budget: false, .. } => "rate_limit_exceeded",
            Error::OverLimit { budget: true, .. } => "insufficient_quota",
            Error::Unavailable(_) => "unavailable",
            Error::StoreUnavailable => "store_unavailable",
            Error::StoreFull => "store_full",
            Error::BadGateway(_) => "upstream_error",
            Error::GatewayTimeout(_) => "timeout",
            Error::PluginFailed(_) => "plugin_failed",
            Error::Internal(_) => "internal_error",
        }
    }

    /// The field an error is about, when it names one.
    pub fn param(&self) -> Option<&str> {
        match self {
            Error::InvalidRequest { param, .. }
            | Error::InvalidJson { param, .. }
            | Error::PluginRefused { param, .. } => param.as_deref(),
            Error::OutOfScope { param, .. } => Some(param),
            Error::ModelNotFound(_) => Some("model"),
            Error::IdempotencyKeyReused(_) => Some("Idempotency-Key"),
            _ => None,
        }
    }

    /// The JSON body clients receive.
    pub fn body(&self) -> serde_json::Value {
        let message = match self {
            // The cause may hold details (paths, internals) that are not the
            // client's business; it is logged instead.
            Error::Internal(_) => "the server hit an unexpected error; it has been logged".into(),
            other => other.to_string(),
        };
        let mut body = json!({"error": {
            "message": message,
            "type": self.kind(),
            "param": self.param(),
            "code": self.code(),
        }});
        // The plugin's own code, and where it points, for tools to show.
        if let Error::PluginRefused { code, position, .. } = self {
            body["error"]["code"] = json!(code);
            if let Some(position) = position {
                body["error"]["position"] = json!(position);
            }
        }
        body
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        if let Error::Internal(cause) = &self {
            tracing::error!(error = format!("{cause:#}"), "internal error");
        }
        let status = self.status();
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Error::OverLimit { retry_after, .. } = &self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters_from_one() {
        let text = "{\n  \"é\": \"${x}\"}";
        let at = text.find('$').unwrap() as u32;
        assert_eq!(
            Position::locate(text, at),
            Some(Position {
                offset: at,
                line: 2,
                column: 9
            })
        );
        assert_eq!(Position::locate(text, 0).unwrap().column, 1);
        assert_eq!(Position::locate(text, 999), None);
    }

    #[test]
    fn background_work_keeps_what_the_store_or_a_queue_refused_for_now() {
        use crate::store::StoreError;
        let queue = PluginError::Queue("the plugin queue is full".into());
        assert!(queue.is_transient());
        assert!(Error::from(queue).is_transient(), "and so at the edge");
        assert!(Error::from(StoreError::Unavailable).is_transient());
        assert!(Error::from(StoreError::Full).is_transient());
        let failed = PluginError::Failed {
            plugin: "p@1".into(),
            what: "trapped".into(),
        };
        assert!(!failed.is_transient());
        assert!(!Error::from(failed).is_transient());
        assert!(!Error::invalid("name", "x").is_transient());
        assert!(!Error::Internal(anyhow::anyhow!("a bug")).is_transient());
    }

    #[test]
    fn code_is_always_a_string() {
        let errors = [
            Error::invalid("name", "x"),
            Error::NotFound("x".into()),
            Error::Internal(anyhow::anyhow!("secret detail")),
        ];
        for e in errors {
            let body = e.body();
            assert!(body["error"]["code"].is_string(), "{body}");
            assert!(body["error"]["type"].is_string(), "{body}");
        }
    }

    #[test]
    fn internal_details_stay_out_of_the_body() {
        let body = Error::Internal(anyhow::anyhow!("/secret/path")).body();
        assert!(!body.to_string().contains("/secret/path"));
    }
}
