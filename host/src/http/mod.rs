//! The HTTP API: one router, one module per API area.
//!
//! Every response that is an error has the OpenAI error shape, including the
//! 404 for unknown routes and the 405 for wrong methods, which [`shape_errors`]
//! produces for the router.

mod admin;
mod artifacts;
mod automations;
mod caller;
mod console;
mod durable;
mod event_types;
mod forwarded;
mod groups;
mod health;
mod idempotency;
mod inference;
mod json;
mod me;
mod messages;
mod metrics;
mod nul;
mod observe;
mod openapi;
mod projects;
mod query;
mod runs;
mod scope;
mod secrets;
mod unread;
mod users;
mod webhooks;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};

pub use caller::{Caller, KeyedCaller};
use groups::{Registries, Teams};
pub use json::Json;

use crate::app::App;
use crate::error::Error;

/// The router for the whole API.
pub fn router(app: App) -> Router {
    let mut routes = Router::new();
    if app.cfg.metrics.listen.is_none() {
        routes = routes.route("/metrics", metrics_route(&app));
    }
    let routes = routes
        .route("/v1/system-check", get(health::system_check))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/docs", get(openapi::docs_page))
        .route("/docs/{file}", get(openapi::docs_asset))
        .route("/v1/models", get(inference::list_models))
        .route("/v1/models/{model}", get(inference::show_model))
        .route("/v1/event-types", get(event_types::list))
        .route("/v1/me", get(me::show))
        .route("/v1/me/api-keys", get(me::list_keys).post(me::create_key))
        .route("/v1/me/api-keys/{id}", delete(me::revoke_key))
        .route("/v1/me/usage", get(inference::my_usage))
        .route("/v1/admin/users", get(users::list).post(users::create))
        .route(
            "/v1/teams",
            get(groups::list::<Teams>).post(groups::create::<Teams>),
        )
        .nest("/v1/teams/{team}", groups::routes::<Teams>())
        .route(
            "/v1/registries",
            get(groups::list::<Registries>).post(groups::create::<Registries>),
        )
        .nest("/v1/registries/{registry}", groups::routes::<Registries>())
        .nest("/v1/teams/{team}/secrets", secrets::routes())
        .nest("/v1/teams/{team}/webhooks", webhooks::routes())
        .nest("/v1/teams/{team}/automations", automations::routes())
        .nest("/v1/teams/{team}/projects", projects::routes())
        .nest(
            "/v1/teams/{team}/projects/{project}/runs",
            runs::routes(&app),
        )
        .route(
            "/v1/teams/{team}/projects/{project}/usage",
            get(inference::project_usage),
        )
        .route(
            "/v1/teams/{team}/projects/{project}/limits",
            put(projects::set_limits),
        )
        .nest("/v1/teams/{team}/projects/{project}", scoped(&app))
        .nest("/v1/registries/{registry}", scoped(&app))
        .nest(
            "/v1/registries/{registry}/collections",
            artifacts::registry_routes(&app),
        )
        .route("/v1/admin/plugins", get(admin::list))
        .route(
            "/v1/admin/plugins/{name}",
            get(admin::show).put(admin::upload).delete(admin::remove),
        )
        .route("/v1/admin/plugins/{name}/invoke", post(admin::invoke))
        .merge(console::routes(&app))
        .layer(middleware::from_fn_with_state(
            app.store.clone(),
            durable::acknowledge,
        ))
        .merge(model_calls())
        .fallback(unknown_route)
        .layer(middleware::from_fn(observe::observe))
        .with_state(app.clone());
    // The error-shaping layer wraps the finished router, not each route:
    // only from outside does a 405 already carry axum's `Allow` header.
    // Outermost, so that the refusals made here leave the connection usable too.
    Router::new()
        .fallback_service(routes)
        .layer(middleware::from_fn_with_state(app, shape_errors))
        .layer(middleware::from_fn(unread::keep_connection))
}

/// The OpenAI-compatible model calls. Added after the layer that answers
/// writes once durable: what they write is usage and rate-limit claims, not
/// the caller's records, and the next group commit or checkpoint (within a
/// second) covers it, rather than an fsync per model call.
fn model_calls() -> Router<App> {
    Router::new()
        .route("/v1/chat/completions", post(inference::chat_completions))
        .route("/v1/embeddings", post(forwarded::embeddings))
        .route("/v1/completions", post(forwarded::completions))
        .route("/v1/responses", post(forwarded::responses))
        .merge(
            Router::new()
                .route("/v1/messages", post(messages::create))
                .route("/v1/messages/count_tokens", post(messages::count_tokens))
                .route_layer(middleware::from_fn(messages::anthropic_errors)),
        )
}

/// `GET /metrics`, open or for operators as configured.
fn metrics_route(app: &App) -> axum::routing::MethodRouter<App> {
    if app.cfg.metrics.require_key {
        get(metrics::scrape_as_operator)
    } else {
        get(metrics::scrape)
    }
}

/// The router of `[metrics] listen`: `/metrics` alone.
pub fn metrics_router(app: App) -> Router {
    Router::new()
        .route("/metrics", metrics_route(&app))
        .with_state(app)
}

/// The routes of a registry or a project, written once and nested under
/// `/v1/registries/{registry}` and `/v1/teams/{team}/projects/{project}`;
/// each handler reads the scope from the path (see [`scope`]).
fn scoped(app: &App) -> Router<App> {
    Router::new()
        .nest("/automations", automations::routes())
        .nest("/collections", artifacts::routes(app))
        .nest(
            "/collections/{collection}/automations",
            automations::routes(),
        )
}

/// The audit trail: who changed which object, and how, one line each.
pub fn audit(by: &str, what: &str, object: &str) {
    tracing::info!(by, object, "{what}");
}

/// What a handler answers: a JSON body, or the API error.
pub type Reply<T> = crate::error::Result<axum::Json<T>>;

/// A JSON body with its status (201 Created, 202 Accepted, …).
pub type ReplyWith<T> = crate::error::Result<(StatusCode, axum::Json<T>)>;

/// The envelope of every listing: `{"object": "list", "data": [...]}`, as
/// OpenAI clients expect.
fn list_of<T: serde::Serialize>(data: T) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"object": "list", "data": data}))
}

/// The body that creates a team, a registry, a project or a collection.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Create {
    name: String,
    #[serde(default)]
    description: String,
}

impl Create {
    fn named(&self) -> crate::domain::names::Named<'_> {
        crate::domain::names::Named {
            name: &self.name,
            description: &self.description,
        }
    }
}

async fn unknown_route(request: Request) -> Error {
    Error::NotFound(format!(
        "no route {} {}; docs/api.md and GET /v1/openapi.json list the API",
        request.method(),
        request.uri().path()
    ))
}

/// Plugin uploads may be larger than other bodies.
fn body_limit(app: &App, request: &Request) -> usize {
    let path = request.uri().path();
    let upload = request.method() == axum::http::Method::PUT
        && path.starts_with("/v1/admin/plugins/")
        || request.method() == axum::http::Method::POST && path == "/operator/plugins";
    if upload {
        app.cfg.plugins.max_upload_bytes
    } else {
        app.cfg.limits.max_body_bytes
    }
}

/// Refuses URLs holding a NUL and declared-oversized bodies before any
/// handler runs, and gives the errors that axum's router and extractors
/// answer by themselves (405 for a wrong method, plain-text 400s for a path
/// that does not decode) the API's error shape.
async fn shape_errors(State(app): State<App>, request: Request, next: Next) -> Response {
    if let Some(refused) = nul::in_uri(request.uri()) {
        return refused.into_response();
    }
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
    tracing::debug!(%method, %path, "request received");
    let response = next.run(request).await;
    let status = response.status();
    // JSON errors are the API's own; HTML ones the console's pages.
    let shaped = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            v.as_bytes().starts_with(b"application/json") || v.as_bytes().starts_with(b"text/html")
        });
    if !(status.is_client_error() || status.is_server_error()) || shaped {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let error = if status == StatusCode::METHOD_NOT_ALLOWED {
        Error::MethodNotAllowed {
            method,
            path,
            allowed: allow
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
        }
    } else {
        let text = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        match status {
            StatusCode::BAD_REQUEST => Error::InvalidRequest {
                message: format!(
                    "the request URL could not be read ({text}); percent-encode names as UTF-8"
                ),
                param: None,
            },
            _ => Error::Internal(anyhow::anyhow!("unshaped {status} from the router: {text}")),
        }
    };
    let mut shaped = error.into_response();
    if let Some(allow) = allow {
        shaped.headers_mut().insert(header::ALLOW, allow);
    }
    shaped
}
