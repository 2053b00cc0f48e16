//! The HTTP API: one router, one module per API area.
//!
//! Every response that is an error has the OpenAI error shape, including the
//! 404 for unknown routes and the 405 for wrong methods, which [`shape_errors`]
//! produces for the router.

mod admin;
mod caller;
mod health;
mod json;
mod me;
mod query;
mod teams;
mod users;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};

pub use caller::Caller;
pub use json::Json;

use crate::app::App;
use crate::error::Error;

/// The router for the whole API.
pub fn router(app: App) -> Router {
    let routes = Router::new()
        .route("/v1/system-check", get(health::system_check))
        .route("/v1/me", get(me::show))
        .route("/v1/me/api-keys", get(me::list_keys).post(me::create_key))
        .route("/v1/me/api-keys/{id}", delete(me::revoke_key))
        .route("/v1/admin/users", get(users::list).post(users::create))
        .route("/v1/teams", get(teams::list).post(teams::create))
        .route("/v1/teams/{team}", get(teams::show))
        .route("/v1/teams/{team}/members", get(teams::members))
        .route(
            "/v1/teams/{team}/members/{user}",
            put(teams::set_member).delete(teams::remove_member),
        )
        .route("/v1/teams/{team}/secrets", get(teams::list_secrets))
        .route(
            "/v1/teams/{team}/secrets/{name}",
            put(teams::put_secret).delete(teams::delete_secret),
        )
        .route(
            "/v1/teams/{team}/webhooks",
            get(teams::list_webhooks).post(teams::create_webhook),
        )
        .route(
            "/v1/teams/{team}/webhooks/{name}",
            get(teams::show_webhook)
                .put(teams::update_webhook)
                .delete(teams::delete_webhook),
        )
        .route("/v1/admin/plugins", get(admin::list))
        .route(
            "/v1/admin/plugins/{name}",
            get(admin::show).put(admin::upload).delete(admin::remove),
        )
        .route("/v1/admin/plugins/{name}/invoke", post(admin::invoke))
        .fallback(unknown_route)
        .with_state(app.clone());
    // The error-shaping layer wraps the finished router, not each route:
    // only from outside does a 405 already carry axum's `Allow` header.
    Router::new()
        .fallback_service(routes)
        .layer(middleware::from_fn_with_state(app, shape_errors))
}

/// The envelope of every listing: `{"object": "list", "data": [...]}`, as
/// OpenAI clients expect.
fn list_of<T: serde::Serialize>(data: T) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"object": "list", "data": data}))
}

async fn unknown_route(request: Request) -> Error {
    Error::NotFound(format!(
        "no route {} {}; see the README for the API",
        request.method(),
        request.uri().path()
    ))
}

/// Plugin uploads may be larger than other bodies.
fn body_limit(app: &App, request: &Request) -> usize {
    let upload = request.method() == axum::http::Method::PUT
        && request.uri().path().starts_with("/v1/admin/plugins/");
    if upload {
        app.cfg.plugins.max_upload_bytes
    } else {
        app.cfg.limits.max_body_bytes
    }
}

/// Refuses declared-oversized bodies before any handler runs, and gives the
/// router's own 405 the OpenAI error shape.
async fn shape_errors(State(app): State<App>, request: Request, next: Next) -> Response {
    let limit = body_limit(&app, &request);
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Error::PayloadTooLarge { limit }.into_response();
    }
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    if response.status() != StatusCode::METHOD_NOT_ALLOWED {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let allowed = allow
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut shaped = Error::MethodNotAllowed {
        method,
        path,
        allowed,
    }
    .into_response();
    if let Some(allow) = allow {
        shaped.headers_mut().insert(header::ALLOW, allow);
    }
    shaped
}
