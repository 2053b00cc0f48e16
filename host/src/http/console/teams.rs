//! Teams: the list of the viewer's teams (and registries), and a team's
//! settings page (members, secrets, webhooks) with the admin's forms.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};

use super::{Failed, Nav, Posted, Shown, Viewer, page};
use crate::app::App;
use crate::automation::webhooks;
use crate::domain::groups::{self, GroupKind, Role};
use crate::domain::{auth, projects, secrets};
use crate::error::Error;

#[derive(Template)]
#[template(path = "console/teams.html")]
struct TeamsPage {
    nav: Option<Nav>,
    teams: Vec<(String, Role)>,
}

/// `GET /teams`.
pub async fn list(State(app): State<App>, viewer: Viewer) -> Shown {
    let teams = groups::list_for(&app.store, GroupKind::Team, &viewer.user)
        .await
        .map_err(|e| Failed::new(e, &viewer))?;
    let teams = teams.into_iter().map(|(g, role)| (g.name, role)).collect();
    Ok(page(
        StatusCode::OK,
        &TeamsPage {
            nav: Some(viewer.nav()),
            teams,
        },
    ))
}

#[derive(Template)]
#[template(path = "console/registries.html")]
struct RegistriesPage {
    nav: Option<Nav>,
    registries: Vec<(String, Role)>,
}

/// `GET /registries`.
pub async fn registries(State(app): State<App>, viewer: Viewer) -> Shown {
    let registries = groups::list_for(&app.store, GroupKind::Registry, &viewer.user)
        .await
        .map_err(|e| Failed::new(e, &viewer))?;
    Ok(page(
        StatusCode::OK,
        &RegistriesPage {
            nav: Some(viewer.nav()),
            registries: registries.into_iter().map(|(g, r)| (g.name, r)).collect(),
        },
    ))
}

/// A secret as the team page lists it.
struct SecretRow {
    name: String,
    updated: String,
}

/// A webhook as the team page lists it.
struct WebhookRow {
    name: String,
    url: String,
    state: String,
}

/// What the secret form shows again after a refusal.
#[derive(Default)]
pub struct SecretForm {
    name: String,
    error: Option<String>,
}

/// What the member form shows again after a refusal.
#[derive(Default)]
pub struct MemberForm {
    user: String,
    error: Option<String>,
}

/// What the webhook form shows again after a refusal.
#[derive(Default)]
pub struct WebhookForm {
    name: String,
    url: String,
    error: Option<String>,
    param: Option<String>,
}

#[derive(Template)]
#[template(path = "console/team.html")]
struct TeamPage {
    nav: Option<Nav>,
    csrf: String,
    team: String,
    role: Role,
    admin: bool,
    members: Vec<(String, Role)>,
    projects: Vec<String>,
    secrets: Vec<SecretRow>,
    webhooks: Vec<WebhookRow>,
    secret_form: SecretForm,
    webhook_form: WebhookForm,
    member_form: MemberForm,
}

/// `GET /teams/{team}`.
pub async fn show(State(app): State<App>, viewer: Viewer, Path(team): Path<String>) -> Shown {
    team_page(&app, &viewer, &team, Forms::default()).await
}

/// The forms of the team page, as posted when one was refused.
#[derive(Default)]
pub struct Forms {
    /// The secret form.
    pub secret: SecretForm,
    /// The webhook form.
    pub webhook: WebhookForm,
    /// The member form.
    pub member: MemberForm,
}

impl Forms {
    /// The webhook form as posted, with the error the domain gave.
    pub fn webhook(name: &str, url: &str, error: &Error) -> Forms {
        Forms {
            webhook: WebhookForm {
                name: name.into(),
                url: url.into(),
                error: Some(error.to_string()),
                param: error.param().map(str::to_string),
            },
            ..Forms::default()
        }
    }
}

/// The team page; `forms` says how a refused form is shown again.
pub async fn team_page(app: &App, viewer: &Viewer, team: &str, forms: Forms) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    let store = &app.store;
    let role = groups::require_team(store, &viewer.user, team, Role::Member)
        .await
        .map_err(failed)?;
    let members = groups::members(store, GroupKind::Team, team)
        .await
        .map_err(failed)?;
    let projects = projects::list(store, team).await.map_err(failed)?;
    let secrets = secrets::list(store, team).await.map_err(failed)?;
    let webhooks = webhooks::list(store, team).await.map_err(failed)?;
    Ok(page(
        StatusCode::OK,
        &TeamPage {
            nav: Some(viewer.nav()),
            csrf: viewer.csrf().to_string(),
            team: team.to_string(),
            role,
            admin: role == Role::Admin,
            members: members.into_iter().map(|m| (m.user, m.role)).collect(),
            projects: projects.into_iter().map(|p| p.name).collect(),
            secrets: secrets
                .into_iter()
                .map(|s| SecretRow {
                    name: s.name,
                    updated: super::when(s.updated_at * 1000),
                })
                .collect(),
            webhooks: webhooks
                .into_iter()
                .map(|w| WebhookRow {
                    state: state_of(&w),
                    name: w.name,
                    url: w.url,
                })
                .collect(),
            secret_form: forms.secret,
            webhook_form: forms.webhook,
            member_form: forms.member,
        },
    ))
}

/// A webhook's state in words.
pub fn state_of(webhook: &webhooks::Webhook) -> String {
    match &webhook.disabled_reason {
        Some(why) => format!("disabled: {why}"),
        None => "active".into(),
    }
}

/// `POST /teams/{team}/secrets`: add or replace.
pub async fn put_secret(State(app): State<App>, Path(team): Path<String>, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    let name = posted.field("name").trim();
    let put = async {
        groups::require_team(&app.store, &viewer.user, &team, Role::Admin).await?;
        secrets::put(&app.store, &app.sealer, &team, name, posted.field("value")).await
    };
    match put.await {
        Ok(_) => {
            tracing::info!(team = %team, secret = %name, by = %viewer.user.name, "secret stored");
            Ok(Redirect::to(&format!("/teams/{team}#secrets")).into_response())
        }
        Err(e @ Error::InvalidRequest { .. }) => {
            let forms = Forms {
                secret: SecretForm {
                    name: name.to_string(),
                    error: Some(e.to_string()),
                },
                ..Forms::default()
            };
            team_page(&app, viewer, &team, forms).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

/// `POST /teams/{team}/secrets/{name}/delete`.
pub async fn delete_secret(
    State(app): State<App>,
    Path((team, name)): Path<(String, String)>,
    posted: Posted,
) -> Shown {
    let viewer = &posted.viewer;
    let delete = async {
        groups::require_team(&app.store, &viewer.user, &team, Role::Admin).await?;
        webhooks::delete_secret(&app.store, &team, &name, false).await
    };
    delete.await.map_err(|e| Failed::new(e, viewer))?;
    tracing::info!(team = %team, secret = %name, by = %viewer.user.name, "secret deleted");
    Ok(Redirect::to(&format!("/teams/{team}#secrets")).into_response())
}

/// `POST /teams/{team}/members`: adds a member or changes a role.
pub async fn set_member(State(app): State<App>, Path(team): Path<String>, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    let name = posted.field("user").trim();
    groups::require_team(&app.store, &viewer.user, &team, Role::Admin)
        .await
        .map_err(|e| Failed::new(e, viewer))?;
    let set = async {
        let role = match posted.field("role") {
            "admin" => Role::Admin,
            _ => Role::Member,
        };
        let target = auth::find_user(&app.store, name).await?;
        groups::set_member(&app.store, GroupKind::Team, &team, &target, role).await
    };
    match set.await {
        Ok(_) => Ok(Redirect::to(&format!("/teams/{team}#members")).into_response()),
        // An unknown user or a last admin's demotion: the form says so.
        Err(e @ (Error::NotFound(_) | Error::Conflict(_) | Error::InvalidRequest { .. })) => {
            let forms = Forms {
                member: MemberForm {
                    user: name.to_string(),
                    error: Some(e.to_string()),
                },
                ..Forms::default()
            };
            team_page(&app, viewer, &team, forms).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

/// `POST /teams/{team}/members/{user}/remove`. The last admin stays.
pub async fn remove_member(
    State(app): State<App>,
    Path((team, name)): Path<(String, String)>,
    posted: Posted,
) -> Shown {
    let viewer = &posted.viewer;
    let remove = async {
        groups::require_team(&app.store, &viewer.user, &team, Role::Admin).await?;
        let target = auth::find_user(&app.store, &name).await?;
        groups::remove_member(&app.store, GroupKind::Team, &team, &target).await
    };
    remove.await.map_err(|e| Failed::new(e, viewer))?;
    Ok(Redirect::to(&format!("/teams/{team}#members")).into_response())
}
