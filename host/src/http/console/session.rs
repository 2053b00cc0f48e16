//! Signing in and out, and who is looking: the session cookie, the
//! [`Viewer`] of a page and the CSRF-checked [`Posted`] form.
//!
//! The cookie is HttpOnly and SameSite=Strict (Secure behind a proxy that
//! says the request came over HTTPS); the store keeps only its SHA-256. Every
//! form carries the session's CSRF token; the sign-in form, before there is
//! a session, carries one that must match a cookie set with the form.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Form, FromRequest, FromRequestParts, OptionalFromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::{Failed, Nav, page};
use crate::app::App;
use crate::domain::auth::{self, Session, User};
use crate::domain::groups::Role;
use crate::error::Error;
use crate::ids;

/// The session cookie's name.
const SESSION: &str = "sy_session";
/// The sign-in form's CSRF cookie.
const SIGN_IN: &str = "sy_sign_in";

/// The signed-in user looking at a page.
pub struct Viewer {
    /// Who.
    pub user: User,
    /// Their session.
    pub session: Session,
    cookie: String,
}

impl Viewer {
    /// What the page header shows.
    pub fn nav(&self) -> Nav {
        Nav {
            user: self.user.name.clone(),
            csrf: self.session.csrf.clone(),
            operator: self.user.operator,
        }
    }

    /// The token the viewer's forms carry.
    pub fn csrf(&self) -> &str {
        &self.session.csrf
    }
}

impl FromRequestParts<App> for Viewer {
    type Rejection = Redirect;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Redirect> {
        let sign_in = || Redirect::to("/sign-in");
        let cookie = cookie(&parts.headers, SESSION).ok_or_else(sign_in)?;
        let (user, session) = auth::session_user(&app.store, &cookie)
            .await
            .map_err(|_| sign_in())?;
        if let Some(slot) = parts.extensions.get::<crate::http::observe::CallerSlot>() {
            slot.set(&user.id);
        }
        Ok(Viewer {
            user,
            session,
            cookie,
        })
    }
}

impl OptionalFromRequestParts<App> for Viewer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &App,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(
            <Viewer as FromRequestParts<App>>::from_request_parts(parts, app)
                .await
                .ok(),
        )
    }
}

/// A form posted by a signed-in viewer, its CSRF token checked.
pub struct Posted {
    /// Who posted it.
    pub viewer: Viewer,
    fields: HashMap<String, String>,
}

impl Posted {
    /// A field's value, empty when absent.
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map(String::as_str).unwrap_or("")
    }

    /// The `name` (trimmed) and `description` fields of a create form.
    pub fn named(&self) -> crate::domain::names::Named<'_> {
        crate::domain::names::Named {
            name: self.field("name").trim(),
            description: self.field("description"),
        }
    }

    /// A field's value, `None` when absent or empty.
    pub fn optional(&self, name: &str) -> Option<String> {
        Some(self.field(name).trim())
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    }
}

impl FromRequest<App> for Posted {
    type Rejection = Response;

    async fn from_request(request: Request, app: &App) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let viewer = <Viewer as FromRequestParts<App>>::from_request_parts(&mut parts, app)
            .await
            .map_err(IntoResponse::into_response)?;
        let request = Request::from_parts(parts, body);
        let fields = match Form::<HashMap<String, String>>::from_request(request, app).await {
            Ok(Form(fields)) => fields,
            Err(e) => {
                let error = Error::invalid("form", format!("the form could not be read: {e}"));
                return Err(Failed::new(error, &viewer).into_response());
            }
        };
        let token = fields.get("csrf").map(String::as_str).unwrap_or("");
        if !same(token, viewer.csrf()) {
            let error = Error::PermissionDenied(
                "the form's CSRF token is missing or stale; reload the page and submit it again"
                    .into(),
            );
            return Err(Failed::new(error, &viewer).into_response());
        }
        if let Some(error) = crate::http::nul::in_fields(&fields) {
            return Err(Failed::new(error, &viewer).into_response());
        }
        Ok(Posted { viewer, fields })
    }
}

/// A form posted to a team's pages (`/teams/{team}/…`) by one of its
/// admins: the role is checked before the handler runs, as the API's
/// `InTeam<AsAdmin>` checks it.
pub struct AdminForm {
    /// The host's parts.
    pub app: App,
    /// The form, and who posted it.
    pub posted: Posted,
    /// The team.
    pub team: String,
    params: HashMap<String, String>,
}

impl AdminForm {
    /// Who posted it.
    pub fn viewer(&self) -> &Viewer {
        &self.posted.viewer
    }

    /// Who posted it, by name (for the audit log).
    pub fn by(&self) -> &str {
        &self.posted.viewer.user.name
    }

    /// A form field, trimmed; empty when absent.
    pub fn field(&self, name: &str) -> &str {
        self.posted.field(name).trim()
    }

    /// A named path parameter (`name`, `user`, …).
    pub fn param(&self, name: &str) -> Result<String, Failed> {
        crate::http::scope::param(&self.params, name).map_err(|e| self.failed(e))
    }

    /// `error`, shown as the error page.
    pub fn failed(&self, error: Error) -> Failed {
        Failed::new(error, self.viewer())
    }

    /// After a change to the team's `name`d object: the audit line, and a
    /// redirect to `path` under the team's page (`#secrets`, `/webhooks/x`).
    pub fn done(&self, what: &str, name: &str, path: &str) -> Response {
        crate::http::audit(self.by(), what, &format!("{}/{name}", self.team));
        Redirect::to(&format!("/teams/{}{path}", self.team)).into_response()
    }
}

impl FromRequest<App> for AdminForm {
    type Rejection = Response;

    async fn from_request(request: Request, app: &App) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let params = crate::http::scope::path_params(&mut parts, app).await;
        let posted = Posted::from_request(Request::from_parts(parts, body), app).await?;
        let admin = async {
            let params = params?;
            let team = crate::http::scope::param(&params, "team")?;
            let user = &posted.viewer.user;
            app.access.require_team(user, &team, Role::Admin).await?;
            Ok((team, params))
        };
        match admin.await {
            Ok((team, params)) => Ok(AdminForm {
                app: app.clone(),
                posted,
                team,
                params,
            }),
            Err(e) => Err(Failed::new(e, &posted.viewer).into_response()),
        }
    }
}

#[derive(Template)]
#[template(path = "console/sign_in.html")]
struct SignInPage {
    nav: Option<Nav>,
    csrf: String,
    error: Option<String>,
}

/// `GET /sign-in`: the form, with a fresh token in a cookie beside it.
pub async fn form(headers: HeaderMap) -> Response {
    sign_in_page(&headers, StatusCode::OK, None)
}

fn sign_in_page(headers: &HeaderMap, status: StatusCode, error: Option<String>) -> Response {
    let csrf = ids::random_hex(16);
    let mut response = page(
        status,
        &SignInPage {
            nav: None,
            csrf: csrf.clone(),
            error,
        },
    );
    set_cookie(&mut response, headers, SIGN_IN, &csrf, 600);
    response
}

/// `POST /sign-in`: an API key exchanged for a session.
pub async fn sign_in(
    axum::extract::State(app): axum::extract::State<App>,
    headers: HeaderMap,
    Form(fields): Form<HashMap<String, String>>,
) -> Response {
    let given = fields.get("csrf").map(String::as_str).unwrap_or("");
    let expected = cookie(&headers, SIGN_IN).unwrap_or_default();
    if expected.is_empty() || !same(given, &expected) {
        let why = "the sign-in form expired or came from another site; sign in again".to_string();
        return sign_in_page(&headers, StatusCode::FORBIDDEN, Some(why));
    }
    let key = fields.get("api_key").map(String::as_str).unwrap_or("");
    match auth::sign_in(&app.store, key).await {
        Ok((cookie, session)) => {
            tracing::info!(user = %session.user_id, "console sign-in");
            let mut response = Redirect::to("/teams").into_response();
            set_cookie(
                &mut response,
                &headers,
                SESSION,
                &cookie,
                auth::SESSION_SECONDS,
            );
            set_cookie(&mut response, &headers, SIGN_IN, "", 0);
            response
        }
        Err(Error::Unauthenticated(_)) => {
            let why = "that API key is not valid; check it, or create a new one".to_string();
            sign_in_page(&headers, StatusCode::OK, Some(why))
        }
        Err(e) => e.into_response(),
    }
}

/// `POST /sign-out`: ends the session and forgets the cookie.
pub async fn sign_out(
    axum::extract::State(app): axum::extract::State<App>,
    headers: HeaderMap,
    posted: Posted,
) -> Response {
    if let Err(e) = auth::sign_out(&app.store, &posted.viewer.cookie).await {
        return Failed::new(e, &posted.viewer).into_response();
    }
    let mut response = Redirect::to("/sign-in").into_response();
    set_cookie(&mut response, &headers, SESSION, "", 0);
    response
}

/// The value of cookie `name` in the request.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

/// Sets (or, with `max_age` 0, clears) a console cookie.
fn set_cookie(response: &mut Response, request: &HeaderMap, name: &str, value: &str, max_age: u64) {
    let https = request
        .get("x-forwarded-proto")
        .is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(b"https"));
    let secure = if https { "; Secure" } else { "" };
    let text =
        format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    if let Ok(value) = HeaderValue::from_str(&text) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// Compares tokens in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A whole number from a form field left empty for none.
pub fn optional_number<N: std::str::FromStr>(field: &str, text: &str) -> Result<Option<N>, Error> {
    match text.trim() {
        "" => Ok(None),
        text => text.parse().map(Some).map_err(|_| {
            Error::invalid(
                field,
                format!("{field} is a whole number, or empty for none"),
            )
        }),
    }
}

/// An amount of USD posted in `field` (empty for none).
pub fn optional_usd(field: &str, text: &str) -> Result<Option<f64>, Error> {
    optional_number(field, text).map_err(|_| {
        Error::invalid(
            field,
            format!("{field} is a number of USD, e.g. 5.0, or empty for none"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_read_by_exact_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("sy_session_x=1; sy_session=abc; other=2"),
        );
        assert_eq!(cookie(&headers, SESSION).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, SIGN_IN), None);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abcd", "abcd"));
        assert!(!same("abcd", "abce"));
        assert!(!same("abc", "abcd"));
        assert!(!same("", "a"));
    }
}
