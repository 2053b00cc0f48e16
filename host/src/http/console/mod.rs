//! The web console: server-rendered pages under `/` (the API stays under
//! `/v1`). Every page calls the same domain functions as the API, so the
//! role rules are the same: members read, admins act, outsiders get the
//! API's 404.
//!
//! - [`session`]: sign-in with an API key, exchanged for a session cookie
//!   (HttpOnly, SameSite=Strict), the [`Viewer`] and [`Posted`] extractors,
//!   and CSRF checks on every form.
//! - [`teams`], [`webhooks`], [`projects`] (automations, artifacts, usage),
//!   [`automations`] (the creation form, history, replays), [`keys`] and
//!   [`operator`] and [`chat`]: the pages; [`usage`]: the SVG chart of
//!   tokens per day.
//!
//! Pages need no script: every form is a plain POST answered by a page or a
//! redirect, so the console works with JavaScript off as well as on. The one
//! script (`chat.js`, ours, served from here) streams chat replies in.

mod automations;
mod chat;
mod event_types;
mod keys;
mod operator;
mod place;
mod projects;
mod session;
mod teams;
mod usage;
mod webhooks;

use askama::Template;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

pub use session::{AdminForm, Posted, Viewer};

use crate::app::App;
use crate::error::Error;

/// The console's routes, merged into the API's router.
pub fn routes(app: &App) -> Router<App> {
    // Plugin uploads may be as large as the operator API allows.
    let upload_limit = DefaultBodyLimit::max(app.cfg.plugins.max_upload_bytes);
    Router::new()
        .route("/", get(home))
        .route("/console/console.css", get(stylesheet))
        .route("/console/favicon.svg", get(favicon))
        .route("/favicon.ico", get(favicon))
        .route("/sign-in", get(session::form).post(session::sign_in))
        .route("/sign-out", post(session::sign_out))
        .route("/console/chat.js", get(chat_script))
        .route("/chat", get(chat::show).post(chat::send))
        .route("/chat/stream", post(chat::stream))
        .route("/keys", get(keys::list).post(keys::create))
        .route("/event-types", get(event_types::list))
        .route("/keys/{id}/revoke", post(keys::revoke))
        .route("/operator", get(operator::show))
        .route(
            "/operator/plugins",
            post(operator::upload).layer(upload_limit),
        )
        .route("/operator/plugins/{name}/remove", post(operator::remove))
        .route("/teams", get(teams::list).post(teams::create_team))
        .nest("/teams/{team}", teams::routes())
        .nest("/teams/{team}/webhooks", webhooks::routes())
        .nest("/teams/{team}/automations", automations::routes())
        .route(
            "/registries",
            get(teams::registries).post(teams::create_registry),
        )
        .nest("/teams/{team}/projects/{project}", place_routes())
        .nest("/registries/{registry}", place_routes())
}

/// The pages of a project or registry, written once and nested under both
/// (see [`place`]).
fn place_routes() -> Router<App> {
    Router::new()
        .route("/", get(projects::show))
        .route("/runs", post(projects::create_run))
        .route("/limits", post(projects::set_limits))
        .route("/runs/{run}/metrics", post(projects::log_metric))
        .route("/runs/{run}/state", post(projects::end_run))
        .route("/collections", post(projects::create_collection))
        .nest(
            "/collections/{collection}/versions",
            projects::version_routes(),
        )
        .nest("/automations", automations::routes())
}

async fn home(viewer: Option<Viewer>) -> Redirect {
    match viewer {
        Some(_) => Redirect::to("/teams"),
        None => Redirect::to("/sign-in"),
    }
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("console.css"),
    )
}

async fn chat_script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("chat.js"),
    )
}

async fn favicon() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("favicon.svg"),
    )
}

/// What the header of a signed-in page shows.
pub struct Nav {
    /// The user's name.
    pub user: String,
    /// The session's CSRF token, for the sign-out form.
    pub csrf: String,
    /// Whether to link the operator's page.
    pub operator: bool,
}

/// A page that loaded, as [`Shown`].
pub fn ok(template: &impl Template) -> Shown {
    Ok(page(StatusCode::OK, template))
}

/// A page's HTML with the console's headers: no caching, no framing, and a
/// content policy that allows only the console's own stylesheet and forms.
///
/// A form refused for what was in it is shown again with its errors at
/// 200: the page itself loaded, and browsers log any other status as a
/// console error.
pub fn page(status: StatusCode, template: &impl Template) -> Response {
    let html = match template.render() {
        Ok(html) => html,
        Err(e) => return Error::Internal(anyhow::anyhow!("rendering a page: {e}")).into_response(),
    };
    let mut response = (status, axum::response::Html(html)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage<'a> {
    nav: Option<Nav>,
    status: String,
    message: &'a str,
}

/// Unix milliseconds as a UTC date and time, as every page shows times.
pub fn when(ms: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

/// A record in a listing, with when it was made in words; its fields read
/// through (`row.name`), as templates use them.
pub struct Dated<T> {
    record: T,
    /// When, as [`when`] writes it.
    pub when: String,
}

impl<T> Dated<T> {
    /// `record`, made at the unix second `secs` gives.
    pub fn new(record: T, secs: impl Fn(&T) -> u64) -> Dated<T> {
        let when = when(secs(&record) * 1000);
        Dated { record, when }
    }
}

impl<T> std::ops::Deref for Dated<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.record
    }
}

/// A confirmation step before a deletion: cancelling goes back, confirming
/// posts the deletion.
#[derive(Template)]
#[template(path = "console/confirm.html")]
pub struct ConfirmPage {
    /// The page header.
    pub nav: Option<Nav>,
    /// The form's token.
    pub csrf: String,
    /// The heading, e.g. "Delete webhook x?".
    pub question: String,
    /// What else happens.
    pub detail: Option<String>,
    /// Where the confirmation posts.
    pub action: String,
    /// The button's words.
    pub confirm: String,
    /// Where cancelling goes.
    pub cancel: String,
    /// Whether to post `force=true` (the detail said what it does).
    pub force: bool,
}

/// A domain error as a page, with the status and words the API would give.
pub struct Failed {
    error: Box<Error>,
    nav: Option<Nav>,
}

impl Failed {
    /// `error`, shown to `viewer`.
    pub fn new(error: Error, viewer: &Viewer) -> Failed {
        Failed {
            error: Box::new(error),
            nav: Some(viewer.nav()),
        }
    }
}

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        if let Error::Internal(cause) = &*self.error {
            tracing::error!(error = format!("{cause:#}"), "internal error");
        }
        let status = self.error.status();
        let message = match &*self.error {
            Error::Internal(_) => "the server hit an unexpected error; it has been logged".into(),
            other => other.to_string(),
        };
        let page_ = ErrorPage {
            nav: self.nav,
            status: status.to_string(),
            message: &message,
        };
        page(status, &page_)
    }
}

/// A page's result: the page, or the error page.
pub type Shown = Result<Response, Failed>;
