//! Every request, seen from outside: counted and timed for `/metrics` under
//! its route template, and logged as one access line with a request id.
//!
//! The request id is the client's `X-Request-Id` when it sends a usable one
//! (up to 128 visible ASCII characters), else a new one; either way it is
//! returned in the response's `X-Request-Id`, so a client's report can be
//! matched to the log. The caller is logged by user id, filled in by the
//! [`super::Caller`] extractor; a key never is.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

use opentelemetry::KeyValue;
use opentelemetry::context::FutureExt;
use opentelemetry::trace::SpanKind;

use crate::{telemetry, traces};

/// Where the caller extractor leaves the authenticated user's id.
#[derive(Clone, Default)]
pub struct CallerSlot(Arc<Mutex<Option<String>>>);

impl CallerSlot {
    /// Records who is calling.
    pub fn set(&self, user_id: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(user_id.to_string());
    }

    fn get(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "-".into())
    }
}

const REQUEST_ID: &str = "x-request-id";

/// A request's server span: continuing the client's `traceparent`, named by
/// its route, with the team the path names (inference requests add the
/// team they bill).
fn server_span(request: &Request, route: &str) -> opentelemetry::Context {
    let parent = traces::from_headers(request.headers());
    let mut attrs = vec![
        KeyValue::new("http.request.method", request.method().to_string()),
        KeyValue::new("http.route", route.to_string()),
        KeyValue::new("url.path", request.uri().path().to_string()),
    ];
    if let Some(team) = route
        .starts_with("/v1/teams/{team}")
        .then(|| request.uri().path().split('/').nth(3))
        .flatten()
    {
        attrs.push(KeyValue::new("switchyard.team", team.to_string()));
    }
    let name = format!("{} {route}", request.method());
    traces::start_span(name, SpanKind::Server, &parent, attrs)
}

/// The middleware: see the module's documentation.
pub async fn observe(mut request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched".to_string(), |m| m.as_str().to_string());
    let method = request.method().clone();
    let id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| crate::ids::random_hex(8), str::to_string);
    let caller = CallerSlot::default();
    request.extensions_mut().insert(caller.clone());
    let started = Instant::now();
    let span = traces::on().then(|| server_span(&request, &route));
    let mut response = match &span {
        Some(cx) => next.run(request).with_context(cx.clone()).await,
        None => next.run(request).await,
    };
    let took = started.elapsed();
    let status = response.status().as_u16();
    if let Some(cx) = &span {
        let attrs = vec![
            KeyValue::new("http.response.status_code", i64::from(status)),
            KeyValue::new("enduser.id", caller.get()),
        ];
        let failed = (status >= 500).then_some("server error");
        traces::end(cx, attrs, failed);
    }
    telemetry::http_request(method.as_str(), &route, status, took);
    let deployment = response
        .headers()
        .get(super::inference::DEPLOYMENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    tracing::info!(
        target: "switchyard::access",
        request_id = %id,
        method = %method,
        route = %route,
        status,
        latency_ms = (took.as_secs_f64() * 1e6).round() / 1e3,
        caller = %caller.get(),
        deployment = %deployment,
        "request"
    );
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}
