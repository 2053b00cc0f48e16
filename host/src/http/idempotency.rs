//! The `Idempotency-Key` header on the event-producing requests: the body
//! and path fingerprint the request, the caller is its credentials, and
//! the rules are `domain::idempotency`'s.

use axum::body::{Body, to_bytes};
use axum::extract::{OriginalUri, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use sha2::{Digest, Sha256};

use crate::app::App;
use crate::domain::idempotency::{self, Begun};
use crate::error::Result;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// Set on an answer replayed from the first request.
pub const REPLAYED: &str = "idempotent-replayed";

/// `methods` with the guard on each of them, and not on the 405 their
/// router answers other methods with.
pub fn keyed(app: &App, methods: MethodRouter<App>) -> MethodRouter<App> {
    methods.route_layer(axum::middleware::from_fn_with_state(app.clone(), guard))
}

/// Carries out a request once per key; see [`crate::domain::idempotency`].
pub async fn guard(State(app): State<App>, request: Request, next: Next) -> Response {
    match once(&app, request, next).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn once(app: &App, request: Request, next: Next) -> Result<Response> {
    // Only the requests that act: a GET needs no key, and any other method
    // is refused by the router as it would be without one.
    if !matches!(request.method().as_str(), "POST" | "PATCH") {
        return Ok(next.run(request).await);
    }
    let headers = request.headers();
    let (Some(key), Some(credentials)) = (
        headers.get(HEADER),
        headers
            .get(header::AUTHORIZATION)
            .or_else(|| headers.get(header::COOKIE)),
    ) else {
        // No key, or no caller to hold it for (the request is refused anyway).
        return Ok(next.run(request).await);
    };
    let key = key.to_str().unwrap_or_default().to_string();
    let caller = hex::encode(Sha256::digest(credentials.as_bytes()));
    // The whole path: a nested router sees only its own part of it.
    let path = match request.extensions().get::<OriginalUri>() {
        Some(OriginalUri(uri)) => uri.path().to_string(),
        None => request.uri().path().to_string(),
    };
    let (parts, body) = request.into_parts();
    let body = super::json::read_all(body, app, app.cfg.limits.max_body_bytes).await?;
    let mut print = Sha256::new();
    for part in [parts.method.as_str().as_bytes(), path.as_bytes(), &body] {
        print.update(part);
        print.update([0]);
    }
    let fingerprint = hex::encode(print.finalize());
    let ticket = match idempotency::begin(&app.store, &caller, &key, fingerprint).await? {
        Begun::Replay(status, body) => return Ok(replayed(status, body)),
        Begun::Run(ticket) => ticket,
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    let (parts, body) = response.into_parts();
    // The answers here are small JSON documents.
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body).into_owned();
    if let Err(e) = idempotency::finish(&app.store, ticket, parts.status.as_u16(), text).await {
        tracing::warn!(error = %e, "keeping an idempotent answer failed; a retry with its key is answered 409");
    }
    Ok(Response::from_parts(parts, Body::from(body)))
}

fn replayed(status: u16, body: String) -> Response {
    let status = axum::http::StatusCode::from_u16(status).unwrap_or_default();
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}
