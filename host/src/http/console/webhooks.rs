//! A team's webhooks: create, show with the live Test, delete after a
//! confirmation step.

use std::collections::BTreeMap;

use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use serde_json::Value;

use super::teams::{Forms, refused, state_of};
use super::{AdminForm, ConfirmPage, Failed, Nav, Shown, Viewer};
use crate::app::App;
use crate::automation::automations;
use crate::automation::webhook_test::{self, Outcome};
use crate::automation::webhooks::{self, Save};
use crate::domain::groups::Role;
use crate::error::Error;
use crate::model::{Circuit, Ordering, WebhookAuth, WebhookTls};

/// Nested under `/teams/{team}/webhooks`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/", post(create))
        .route("/{name}", get(show))
        .route("/{name}/test", post(test))
        .route("/{name}/edit", post(update))
        .route("/{name}/rotate", post(rotate))
        .route("/{name}/delete", get(confirm_delete).post(delete))
}

/// `POST /teams/{team}/webhooks`.
pub async fn create(form: AdminForm) -> Shown {
    let (name, url) = (form.field("name"), form.field("url"));
    let settings = webhooks::Settings {
        url: url.to_string(),
        access_token_secret: form.posted.optional("access_token_secret"),
        signing_secret: form.posted.optional("signing_secret"),
        standard_webhooks: false,
        signing_key_secret: form.posted.optional("signing_key_secret"),
        previous_signing_secret: None,
        previous_signing_key_secret: None,
        previous_until: None,
        max_per_second: None,
        circuit_breaker: None,
        headers: Default::default(),
        retry_schedule_ms: None,
        disable_after_hours: None,
        auth: None,
        tls: None,
        ordering: Default::default(),
    };
    match save(&form, name, settings, Save::Create).await {
        Ok(webhook) => {
            let page = format!("/webhooks/{}", webhook.name);
            Ok(form.done("webhook created", &webhook.name, &page))
        }
        Err(e @ (Error::InvalidRequest { .. } | Error::Conflict(_))) => {
            refused(&form, Forms::webhook(name, url, &e)).await
        }
        Err(e) => Err(form.failed(e)),
    }
}

/// Saves `settings` as the team's webhook `name`, checked as the API
/// checks them (the SSRF guard included).
async fn save(
    form: &AdminForm,
    name: &str,
    settings: webhooks::Settings,
    how: Save,
) -> crate::error::Result<webhooks::Webhook> {
    let app = &form.app;
    let (allow, named) = (&app.cfg.webhooks.allow_private, (form.team.as_str(), name));
    let saved = webhooks::save(&app.store, &app.sealer, named, settings, allow, how).await?;
    app.dispatcher.wake();
    Ok(saved)
}

#[derive(Template)]
#[template(path = "console/webhook.html")]
struct WebhookPage {
    nav: Option<Nav>,
    csrf: String,
    team: String,
    admin: bool,
    webhook: webhooks::Webhook,
    state: String,
    payload: String,
    test_error: Option<String>,
    outcome: Option<Outcome>,
    /// The team's secret names, for the edit form.
    secrets: Vec<String>,
    edit_error: Option<String>,
    /// The Ed25519 public key, or why it cannot be read.
    public_key: Option<String>,
    /// When a rotation's previous secrets stop signing.
    previous_until: Option<String>,
    /// The circuit, in words.
    circuit: String,
    /// Since when every attempt has failed.
    failing_since: Option<String>,
    /// The host's `[delivery] disable_after_hours`.
    disable_after_hours: f64,
    /// How deliveries leave the host, in words.
    egress: String,
    /// Its OAuth2 client credentials, empty when none.
    oauth: OAuthFields,
    /// The TLS selects: field, label, the secret chosen ("" for none).
    tls_fields: Vec<(&'static str, &'static str, String)>,
}

/// A webhook's OAuth2 client credentials as the form shows them.
#[derive(Default)]
struct OAuthFields {
    token_url: String,
    client_id: String,
    client_secret_secret: String,
    scope: String,
}

impl OAuthFields {
    fn of(auth: Option<&WebhookAuth>) -> OAuthFields {
        match auth {
            None => OAuthFields::default(),
            Some(WebhookAuth::Oauth2ClientCredentials {
                token_url,
                client_id,
                client_secret_secret,
                scope,
            }) => OAuthFields {
                token_url: token_url.clone(),
                client_id: client_id.clone(),
                client_secret_secret: client_secret_secret.clone(),
                scope: scope.clone().unwrap_or_default(),
            },
        }
    }
}

/// `GET /teams/{team}/webhooks/{name}`.
pub async fn show(
    State(app): State<App>,
    viewer: Viewer,
    Path((team, name)): Path<(String, String)>,
) -> Shown {
    webhook_page(&app, &viewer, &team, &name, Tested::default()).await
}

/// What the Test form shows: the payload sent, and the outcome or why it
/// could not be sent.
#[derive(Default)]
struct Tested {
    payload: String,
    outcome: Option<Outcome>,
    error: Option<Error>,
    /// Why an edit was refused.
    edit_error: Option<Error>,
}

async fn webhook_page(app: &App, viewer: &Viewer, team: &str, name: &str, tested: Tested) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    let role = app
        .access
        .require_team(&viewer.user, team, Role::Member)
        .await
        .map_err(failed)?;
    let webhook = webhooks::get(&app.store, team, name)
        .await
        .map_err(failed)?;
    let secrets = crate::domain::secrets::list(&app.store, team)
        .await
        .map_err(failed)?;
    let public_key = match &webhook.signing_key_secret {
        Some(_) => Some(
            match webhooks::public_keys(&app.store, &app.sealer, team, name).await {
                Ok(keys) => keys.public_key,
                Err(e) => e.to_string(),
            },
        ),
        None => None,
    };
    let previous_until = webhook.previous_until.map(|s| super::when(s * 1000));
    let health = app.dispatcher.health(team, name).await.map_err(failed)?;
    let failing_since = health.failing_since_ms.map(super::when);
    let circuit = match health.circuit {
        Circuit::Closed => "closed: deliveries go".to_string(),
        Circuit::Open {
            until_ms, reason, ..
        } => format!(
            "open ({reason}): deliveries wait until {}, then one probe goes",
            super::when(until_ms)
        ),
        Circuit::HalfOpen { .. } => "half open: a probe is out".to_string(),
    };
    super::ok(&WebhookPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        team: team.to_string(),
        admin: role == Role::Admin,
        state: state_of(&webhook),
        payload: tested.payload,
        test_error: tested.error.map(|e| e.to_string()),
        outcome: tested.outcome,
        secrets: secrets.into_iter().map(|s| s.name).collect(),
        edit_error: tested.edit_error.map(|e| e.to_string()),
        public_key,
        previous_until,
        circuit,
        failing_since,
        disable_after_hours: app.cfg.delivery.disable_after_hours,
        egress: egress(&app.cfg.delivery),
        oauth: OAuthFields::of(webhook.auth.as_ref()),
        tls_fields: tls_fields(webhook.tls.as_ref()),
        webhook,
    })
}

/// How deliveries leave: through the operator's proxy, or directly.
fn egress(delivery: &crate::cfg::DeliveryConfig) -> String {
    match (&delivery.proxy, delivery.no_proxy.is_empty()) {
        (None, _) => "directly from the host".to_string(),
        (Some(proxy), true) => format!("through the proxy {proxy}"),
        (Some(proxy), false) => format!(
            "through the proxy {proxy}, but to {} directly",
            delivery.no_proxy.join(", ")
        ),
    }
}

/// `POST /teams/{team}/webhooks/{name}/test`: sends the test request and
/// shows the endpoint's answer on the webhook's page.
pub async fn test(form: AdminForm) -> Shown {
    let (app, team, name) = (&form.app, &form.team, form.param("name")?);
    let payload = form.field("payload").to_string();
    let send = async {
        let webhook = webhooks::get(&app.store, team, &name).await?;
        let body = (!payload.is_empty()).then(|| Value::String(payload.clone()));
        webhook_test::run(
            &app.store,
            &app.sealer,
            &app.sender,
            team,
            &webhook,
            body.as_ref(),
        )
        .await
    };
    let tested = match send.await {
        Ok(outcome) => {
            let (by, success) = (form.by(), outcome.success);
            tracing::info!(team = %team, webhook = %name, by = %by, success, "webhook tested");
            Tested {
                payload,
                outcome: Some(outcome),
                ..Tested::default()
            }
        }
        Err(e @ Error::InvalidRequest { .. }) => Tested {
            payload,
            error: Some(e),
            ..Tested::default()
        },
        Err(e) => return Err(form.failed(e)),
    };
    webhook_page(app, form.viewer(), team, &name, tested).await
}

/// `GET /teams/{team}/webhooks/{name}/delete`: the confirmation step,
/// naming the automations that would be disabled.
pub async fn confirm_delete(
    State(app): State<App>,
    viewer: Viewer,
    Path((team, name)): Path<(String, String)>,
) -> Shown {
    let failed = |e| Failed::new(e, &viewer);
    app.access
        .require_team(&viewer.user, &team, Role::Admin)
        .await
        .map_err(failed)?;
    webhooks::get(&app.store, &team, &name)
        .await
        .map_err(failed)?;
    let users = automations::using_webhook(&app.store, &team, &name)
        .await
        .map_err(failed)?;
    let detail = (!users.is_empty()).then(|| {
        let names: Vec<String> = users.iter().map(|h| h.describe()).collect();
        format!(
            "These automations call it and will be disabled: {}.",
            names.join(", ")
        )
    });
    super::ok(&ConfirmPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        question: format!("Delete webhook {name}?"),
        detail,
        action: format!("/teams/{team}/webhooks/{name}/delete"),
        confirm: format!("Delete {name}"),
        cancel: format!("/teams/{team}/webhooks/{name}"),
        force: !users.is_empty(),
    })
}

/// `POST /teams/{team}/webhooks/{name}/delete`: deletes it (disabling the
/// automations that call it only when the confirmation said so).
pub async fn delete(form: AdminForm) -> Shown {
    let (app, team, name) = (&form.app, &form.team, form.param("name")?);
    let force = form.field("force") == "true";
    let deleted = automations::delete_webhook(&app.store, team, &name, force).await;
    deleted.map_err(|e| form.failed(e))?;
    Ok(form.done("webhook deleted", &name, "#webhooks"))
}

/// `POST /teams/{team}/webhooks/{name}/edit`: a new URL or secrets, checked
/// as the API checks them (the SSRF guard included).
pub async fn update(form: AdminForm) -> Shown {
    let (app, team, name) = (&form.app, &form.team, form.param("name")?);
    let current = webhooks::get(&app.store, team, &name).await;
    let current = current.map_err(|e| form.failed(e))?;
    // A rotation in progress carries on: the form edits the current secrets.
    let settings = webhooks::Settings {
        url: form.field("url").to_string(),
        access_token_secret: form.posted.optional("access_token_secret"),
        signing_secret: form.posted.optional("signing_secret"),
        standard_webhooks: current.standard_webhooks,
        signing_key_secret: form.posted.optional("signing_key_secret"),
        previous_signing_secret: current.previous_signing_secret,
        previous_signing_key_secret: current.previous_signing_key_secret,
        previous_until: current.previous_until,
        max_per_second: match number(&form, "max_per_second", PACE_HINT) {
            Ok(rate) => rate,
            Err(e) => return edit_refused(app, &form, team, &name, e).await,
        },
        circuit_breaker: current.circuit_breaker,
        headers: match headers(&form) {
            Ok(headers) => headers,
            Err(e) => return edit_refused(app, &form, team, &name, e).await,
        },
        retry_schedule_ms: match schedule(&form) {
            Ok(schedule) => schedule,
            Err(e) => return edit_refused(app, &form, team, &name, e).await,
        },
        disable_after_hours: match number(&form, "disable_after_hours", DISABLE_HINT) {
            Ok(hours) => hours,
            Err(e) => return edit_refused(app, &form, team, &name, e).await,
        },
        auth: auth(&form),
        tls: tls(&form),
        ordering: match form.field("ordering") {
            "fifo" => Ordering::Fifo,
            _ => Ordering::Parallel,
        },
    };
    match save(&form, &name, settings, Save::Update).await {
        Ok(_) => Ok(form.done("webhook updated", &name, &format!("/webhooks/{name}"))),
        Err(e @ Error::InvalidRequest { .. }) => edit_refused(app, &form, team, &name, e).await,
        Err(e) => Err(form.failed(e)),
    }
}

/// `POST /teams/{team}/webhooks/{name}/rotate`: new signing secrets, the
/// replaced ones signing too for the overlap (in hours).
pub async fn rotate(form: AdminForm) -> Shown {
    let (app, team, name) = (&form.app, &form.team, form.param("name")?);
    let hours = form.field("overlap_hours").trim();
    let overlap_s = match hours.parse::<u64>() {
        Ok(hours) => hours.saturating_mul(3600),
        Err(_) => {
            let e = Error::invalid("overlap_s", "the overlap is a whole number of hours");
            return edit_refused(app, &form, team, &name, e).await;
        }
    };
    let rotation = webhooks::Rotation {
        signing_secret: form.posted.optional("signing_secret"),
        signing_key_secret: form.posted.optional("signing_key_secret"),
        overlap_s,
    };
    let allow = &app.cfg.webhooks.allow_private;
    let named = (team.as_str(), name.as_str());
    match webhooks::rotate(&app.store, &app.sealer, named, rotation, allow).await {
        Ok(_) => Ok(form.done(
            "webhook signing rotated",
            &name,
            &format!("/webhooks/{name}"),
        )),
        Err(e @ Error::InvalidRequest { .. }) => edit_refused(app, &form, team, &name, e).await,
        Err(e) => Err(form.failed(e)),
    }
}

/// The edit form's pace: empty for none.
/// The form's OAuth2 client credentials; none when the token URL is empty.
fn auth(form: &AdminForm) -> Option<WebhookAuth> {
    let token_url = form.field("oauth_token_url").trim();
    (!token_url.is_empty()).then(|| WebhookAuth::Oauth2ClientCredentials {
        token_url: token_url.to_string(),
        client_id: form.field("oauth_client_id").trim().to_string(),
        client_secret_secret: form.field("oauth_client_secret_secret").trim().to_string(),
        scope: form.posted.optional("oauth_scope"),
    })
}

/// The TLS selects of the edit form, with what `tls` chose.
fn tls_fields(tls: Option<&WebhookTls>) -> Vec<(&'static str, &'static str, String)> {
    let chosen = |pick: fn(&WebhookTls) -> &Option<String>| {
        tls.and_then(|t| pick(t).clone()).unwrap_or_default()
    };
    vec![
        (
            "tls_client_cert_secret",
            "Client certificate",
            chosen(|t| &t.client_cert_secret),
        ),
        (
            "tls_client_key_secret",
            "Client key",
            chosen(|t| &t.client_key_secret),
        ),
        ("tls_ca_secret", "Receiver's CA", chosen(|t| &t.ca_secret)),
    ]
}

/// The form's TLS secrets; none when it names none.
fn tls(form: &AdminForm) -> Option<WebhookTls> {
    let tls = WebhookTls {
        client_cert_secret: form.posted.optional("tls_client_cert_secret"),
        client_key_secret: form.posted.optional("tls_client_key_secret"),
        ca_secret: form.posted.optional("tls_ca_secret"),
    };
    let named = tls.secrets().next().is_some();
    named.then_some(tls)
}

const PACE_HINT: &str = "the most deliveries a second is a number, e.g. 20, or empty for no pace";
const DISABLE_HINT: &str =
    "disable after this many hours of failures, e.g. 120 or 0.5, or empty for the host's default";

/// The form's number `field`, if given; `hint` says what it takes.
fn number(form: &AdminForm, field: &str, hint: &str) -> Result<Option<f64>, Error> {
    match form.field(field).trim() {
        "" => Ok(None),
        text => (text.parse().map(Some)).map_err(|_| Error::invalid(field, hint)),
    }
}

/// The form's headers: one `Name: value` a line.
fn headers(form: &AdminForm) -> Result<BTreeMap<String, String>, Error> {
    let mut headers = BTreeMap::new();
    for line in form
        .field("headers")
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        let Some((name, value)) = line.split_once(':') else {
            return Err(Error::invalid(
                "headers",
                format!("'{line}' is not a header: write one a line, as Name: value"),
            ));
        };
        headers.insert(name.trim().to_string(), value.trim().to_string());
    }
    Ok(headers)
}

/// The form's retry schedule: waits in ms, separated by commas; empty for
/// the host's.
fn schedule(form: &AdminForm) -> Result<Option<Vec<u64>>, Error> {
    let text = form.field("retry_schedule_ms");
    if text.trim().is_empty() {
        return Ok(None);
    }
    let waits: Result<Vec<u64>, _> = text.split(',').map(|w| w.trim().parse()).collect();
    waits.map(Some).map_err(|_| {
        Error::invalid(
            "retry_schedule_ms",
            "the retry schedule is waits in milliseconds separated by commas, e.g. 0, 5000, 300000; empty for the host's",
        )
    })
}

/// The webhook's page again, saying why an edit or rotation was refused.
async fn edit_refused(app: &App, form: &AdminForm, team: &str, name: &str, e: Error) -> Shown {
    let tested = Tested {
        edit_error: Some(e),
        ..Tested::default()
    };
    webhook_page(app, form.viewer(), team, name, tested).await
}
