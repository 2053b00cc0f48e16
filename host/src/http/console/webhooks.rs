//! A team's webhooks: create, show with the live Test, delete after a
//! confirmation step.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use serde_json::Value;

use super::teams::{Forms, state_of, team_page};
use super::{ConfirmPage, Failed, Nav, Posted, Shown, Viewer, page};
use crate::app::App;
use crate::automation::automations;
use crate::automation::webhook_test::{self, Outcome};
use crate::automation::webhooks::{self, Save};
use crate::domain::groups::{self, Role};
use crate::error::Error;

/// `POST /teams/{team}/webhooks`.
pub async fn create(State(app): State<App>, Path(team): Path<String>, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    let (name, url) = (posted.field("name").trim(), posted.field("url").trim());
    let create = async {
        groups::require_team(&app.store, &viewer.user, &team, Role::Admin).await?;
        let settings = webhooks::Settings {
            url: url.to_string(),
            access_token_secret: posted.optional("access_token_secret"),
            signing_secret: posted.optional("signing_secret"),
            standard_webhooks: false,
        };
        let allow = &app.cfg.webhooks.allow_private;
        webhooks::save(&app.store, (&team, name), settings, allow, Save::Create).await
    };
    match create.await {
        Ok(webhook) => {
            tracing::info!(team = %team, webhook = %webhook.name, by = %viewer.user.name, "webhook created");
            Ok(Redirect::to(&format!("/teams/{team}/webhooks/{}", webhook.name)).into_response())
        }
        Err(e @ (Error::InvalidRequest { .. } | Error::Conflict(_))) => {
            let forms = Forms::webhook(name, url, &e);
            team_page(&app, viewer, &team, forms).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
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
    let role = groups::require_team(&app.store, &viewer.user, team, Role::Member)
        .await
        .map_err(failed)?;
    let webhook = webhooks::get(&app.store, team, name)
        .await
        .map_err(failed)?;
    let secrets = crate::domain::secrets::list(&app.store, team)
        .await
        .map_err(failed)?;
    Ok(page(
        StatusCode::OK,
        &WebhookPage {
            nav: Some(viewer.nav()),
            csrf: viewer.csrf().to_string(),
            team: team.to_string(),
            admin: role == Role::Admin,
            state: state_of(&webhook),
            webhook,
            payload: tested.payload,
            test_error: tested.error.map(|e| e.to_string()),
            outcome: tested.outcome,
            secrets: secrets.into_iter().map(|s| s.name).collect(),
            edit_error: tested.edit_error.map(|e| e.to_string()),
        },
    ))
}

/// `POST /teams/{team}/webhooks/{name}/test`: sends the test request and
/// shows the endpoint's answer on the webhook's page.
pub async fn test(
    State(app): State<App>,
    Path((team, name)): Path<(String, String)>,
    posted: Posted,
) -> Shown {
    let viewer = &posted.viewer;
    let payload = posted.field("payload").trim().to_string();
    let send = async {
        groups::require_team(&app.store, &viewer.user, &team, Role::Admin).await?;
        let webhook = webhooks::get(&app.store, &team, &name).await?;
        let body = (!payload.is_empty()).then(|| Value::String(payload.clone()));
        webhook_test::run(
            &app.store,
            &app.sealer,
            &app.sender,
            &team,
            &webhook,
            body.as_ref(),
        )
        .await
    };
    let tested = match send.await {
        Ok(outcome) => {
            tracing::info!(team = %team, webhook = %name, by = %viewer.user.name, success = outcome.success, "webhook tested");
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
        Err(e) => return Err(Failed::new(e, viewer)),
    };
    webhook_page(&app, viewer, &team, &name, tested).await
}

/// `GET /teams/{team}/webhooks/{name}/delete`: the confirmation step,
/// naming the automations that would be disabled.
pub async fn confirm_delete(
    State(app): State<App>,
    viewer: Viewer,
    Path((team, name)): Path<(String, String)>,
) -> Shown {
    let failed = |e| Failed::new(e, &viewer);
    groups::require_team(&app.store, &viewer.user, &team, Role::Admin)
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
    Ok(page(
        StatusCode::OK,
        &ConfirmPage {
            nav: Some(viewer.nav()),
            csrf: viewer.csrf().to_string(),
            question: format!("Delete webhook {name}?"),
            detail,
            action: format!("/teams/{team}/webhooks/{name}/delete"),
            confirm: format!("Delete {name}"),
            cancel: format!("/teams/{team}/webhooks/{name}"),
            force: !users.is_empty(),
        },
    ))
}

/// `POST /teams/{team}/webhooks/{name}/delete`: deletes it (disabling the
/// automations that call it only when the confirmation said so).
pub async fn delete(
    State(app): State<App>,
    Path((team, name)): Path<(String, String)>,
    posted: Posted,
) -> Shown {
    let viewer = &posted.viewer;
    let force = posted.field("force") == "true";
    let delete = async {
        groups::require_team(&app.store, &viewer.user, &team, Role::Admin).await?;
        automations::delete_webhook(&app.store, &team, &name, force).await
    };
    delete.await.map_err(|e| Failed::new(e, viewer))?;
    tracing::info!(team = %team, webhook = %name, by = %viewer.user.name, "webhook deleted");
    Ok(Redirect::to(&format!("/teams/{team}#webhooks")).into_response())
}

/// `POST /teams/{team}/webhooks/{name}/edit`: a new URL or secrets, checked
/// as the API checks them (the SSRF guard included).
pub async fn update(
    State(app): State<App>,
    Path((team, name)): Path<(String, String)>,
    posted: Posted,
) -> Shown {
    let viewer = &posted.viewer;
    groups::require_team(&app.store, &viewer.user, &team, Role::Admin)
        .await
        .map_err(|e| Failed::new(e, viewer))?;
    let settings = webhooks::Settings {
        url: posted.field("url").trim().to_string(),
        access_token_secret: posted.optional("access_token_secret"),
        signing_secret: posted.optional("signing_secret"),
        standard_webhooks: webhooks::get(&app.store, &team, &name)
            .await
            .map_err(|e| Failed::new(e, viewer))?
            .standard_webhooks,
    };
    let allow = &app.cfg.webhooks.allow_private;
    match webhooks::save(&app.store, (&team, &name), settings, allow, Save::Update).await {
        Ok(_) => {
            tracing::info!(team = %team, webhook = %name, by = %viewer.user.name, "webhook updated");
            Ok(Redirect::to(&format!("/teams/{team}/webhooks/{name}")).into_response())
        }
        Err(e @ Error::InvalidRequest { .. }) => {
            let tested = Tested {
                edit_error: Some(e),
                ..Tested::default()
            };
            webhook_page(&app, viewer, &team, &name, tested).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
}
