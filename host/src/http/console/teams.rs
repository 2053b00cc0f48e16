//! Teams: the list of the viewer's teams (and registries), and a team's
//! settings page (members, secrets, webhooks) with the admin's forms.

use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};

use super::session::Posted;
use super::{AdminForm, Failed, Nav, Shown, Viewer};
use crate::app::App;
use crate::automation::webhooks;
use crate::domain::groups::{self, GroupKind, Role};
use crate::domain::{auth, projects, secrets};
use crate::error::Error;

/// Nested under `/teams/{team}`: the team page and its forms.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/", get(show))
        .route("/projects", post(create_project))
        .route("/members", post(set_member))
        .route("/members/{user}/remove", post(remove_member))
        .route("/secrets", post(put_secret))
        .route("/secrets/{name}/delete", post(delete_secret))
}

/// The viewer's teams, or registries.
#[derive(Template)]
#[template(path = "console/groups.html")]
struct GroupsPage {
    nav: Option<Nav>,
    /// "Team" or "Registry", "Teams" or "Registries".
    words: (&'static str, &'static str),
    /// Where their pages are: `/teams` or `/registries`.
    base: &'static str,
    /// What the page says when there are none (HTML: static text only).
    empty: &'static str,
    groups: Vec<(String, Role)>,
    csrf: String,
    /// The create form, shown again after a refusal.
    form: OneField,
}

/// `GET /teams`.
pub async fn list(State(app): State<App>, viewer: Viewer) -> Shown {
    groups_page(&app, &viewer, GroupKind::Team, OneField::default()).await
}

/// `GET /registries`.
pub async fn registries(State(app): State<App>, viewer: Viewer) -> Shown {
    groups_page(&app, &viewer, GroupKind::Registry, OneField::default()).await
}

/// `POST /teams`: a new team, with the viewer as its admin.
pub async fn create_team(State(app): State<App>, posted: Posted) -> Shown {
    create_group(&app, &posted, GroupKind::Team).await
}

/// `POST /registries`: a new registry, with the viewer as its admin.
pub async fn create_registry(State(app): State<App>, posted: Posted) -> Shown {
    create_group(&app, &posted, GroupKind::Registry).await
}

/// Creates the group and opens its page; a refused name (invalid, or
/// taken) is shown on the form it came from.
async fn create_group(app: &App, posted: &Posted, kind: GroupKind) -> Shown {
    let (viewer, named) = (&posted.viewer, posted.named());
    match groups::create(&app.store, kind, &viewer.user, named).await {
        Ok(group) => {
            let what = format!("{} created", kind.noun());
            crate::http::audit(&viewer.user.name, &what, &group.name);
            let base = match kind {
                GroupKind::Team => "/teams",
                GroupKind::Registry => "/registries",
            };
            let to = format!("{base}/{}", group.name);
            Ok(Redirect::to(&to).into_response())
        }
        Err(e @ (Error::InvalidRequest { .. } | Error::Conflict(_))) => {
            groups_page(app, viewer, kind, OneField::refused(named.name, &e)).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

async fn groups_page(app: &App, viewer: &Viewer, kind: GroupKind, form: OneField) -> Shown {
    let groups = groups::list_for(&app.store, kind, &viewer.user).await;
    let groups = groups.map_err(|e| Failed::new(e, viewer))?;
    let groups = groups.into_iter().map(|(g, role)| (g.name, role)).collect();
    let (words, base, empty) = match kind {
        GroupKind::Team => (
            ("Team", "Teams"),
            "/teams",
            "You belong to no team yet. Create one below, or ask a team's admin to add you.",
        ),
        GroupKind::Registry => (
            ("Registry", "Registries"),
            "/registries",
            "You belong to no registry yet. A registry holds collections linked from projects \
             across teams; create one below.",
        ),
    };
    let nav = Some(viewer.nav());
    super::ok(&GroupsPage {
        nav,
        words,
        base,
        empty,
        groups,
        csrf: viewer.csrf().to_string(),
        form,
    })
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

/// What a one-field form (a secret, a member) shows again after a refusal.
#[derive(Default)]
pub struct OneField {
    value: String,
    error: Option<String>,
}

impl OneField {
    fn refused(value: &str, error: &Error) -> OneField {
        let (value, error) = (value.to_string(), Some(error.to_string()));
        OneField { value, error }
    }
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
    /// The team's automations on its webhooks: name, event in words,
    /// webhook called.
    automations: Vec<(String, String, String)>,
    secret_form: OneField,
    webhook_form: WebhookForm,
    member_form: OneField,
    project_form: OneField,
    member_refused: Option<String>,
    secret_refused: Option<String>,
}

/// `GET /teams/{team}`.
pub async fn show(State(app): State<App>, viewer: Viewer, Path(team): Path<String>) -> Shown {
    team_page(&app, &viewer, &team, Forms::default()).await
}

/// The forms of the team page, as posted when one was refused.
#[derive(Default)]
pub struct Forms {
    /// The secret form.
    pub secret: OneField,
    /// The webhook form.
    pub webhook: WebhookForm,
    /// The member form.
    pub member: OneField,
    /// The project form.
    pub project: OneField,
    /// Why removing a member was refused (the last admin).
    pub member_refused: Option<String>,
    /// Why deleting a secret was refused (a webhook uses it).
    pub secret_refused: Option<String>,
}

/// The lists of the team page that have a form (and a refusal) of their own.
pub enum Field {
    /// Add or replace a secret.
    Secret,
    /// Add a member or change a role.
    Member,
}

impl Forms {
    /// The `which` form as posted, with the error the domain gave.
    pub fn one(which: Field, value: &str, error: &Error) -> Forms {
        let (mut forms, field) = (Forms::default(), OneField::refused(value, error));
        match which {
            Field::Secret => forms.secret = field,
            Field::Member => forms.member = field,
        }
        forms
    }

    /// Why an action on the `which` list (removing a member, deleting a
    /// secret) was refused, shown beside that list.
    pub fn refusal(which: Field, error: &Error) -> Forms {
        let (mut forms, why) = (Forms::default(), Some(error.to_string()));
        match which {
            Field::Secret => forms.secret_refused = why,
            Field::Member => forms.member_refused = why,
        }
        forms
    }

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
async fn team_page(app: &App, viewer: &Viewer, team: &str, forms: Forms) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    let store = &app.store;
    let role = app
        .access
        .require_team(&viewer.user, team, Role::Member)
        .await
        .map_err(failed)?;
    let members = groups::members(store, GroupKind::Team, team)
        .await
        .map_err(failed)?;
    let projects = projects::list(store, team).await.map_err(failed)?;
    let secrets = secrets::list(store, team).await.map_err(failed)?;
    let webhooks = webhooks::list(store, team).await.map_err(failed)?;
    let scope = crate::model::Scope::Team {
        team: team.to_string(),
    };
    let automations = crate::automation::automations::list(store, &scope)
        .await
        .map_err(failed)?;
    super::ok(&TeamPage {
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
        automations: automations
            .iter()
            .map(|a| {
                let what = super::projects::describe_event(&a.event);
                (a.name.clone(), what, a.webhook.name.clone())
            })
            .collect(),
        secret_form: forms.secret,
        webhook_form: forms.webhook,
        member_form: forms.member,
        project_form: forms.project,
        member_refused: forms.member_refused,
        secret_refused: forms.secret_refused,
    })
}

/// `POST /teams/{team}/projects`: any member may create a project, as
/// with the API; it opens on creation, and a refused name is shown on the
/// form.
pub async fn create_project(
    State(app): State<App>,
    Path(team): Path<String>,
    posted: Posted,
) -> Shown {
    let viewer = &posted.viewer;
    app.access
        .require_team(&viewer.user, &team, Role::Member)
        .await
        .map_err(|e| Failed::new(e, viewer))?;
    let named = posted.named();
    match projects::create(&app.store, &team, &viewer.user, named).await {
        Ok(project) => {
            let object = format!("{team}/{}", project.name);
            crate::http::audit(&viewer.user.name, "project created", &object);
            let to = format!("/teams/{team}/projects/{}", project.name);
            Ok(Redirect::to(&to).into_response())
        }
        Err(e @ (Error::InvalidRequest { .. } | Error::Conflict(_))) => {
            let project = OneField::refused(named.name, &e);
            let forms = Forms {
                project,
                ..Forms::default()
            };
            team_page(&app, viewer, &team, forms).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

/// The team page again, with the form that `form` posted and why it was refused.
pub async fn refused(form: &AdminForm, forms: Forms) -> Shown {
    team_page(&form.app, form.viewer(), &form.team, forms).await
}

/// A webhook's state in words.
pub fn state_of(webhook: &webhooks::Webhook) -> String {
    match &webhook.disabled_reason {
        Some(why) => format!("disabled: {why}"),
        None => "active".into(),
    }
}

/// `POST /teams/{team}/secrets`: add or replace.
pub async fn put_secret(form: AdminForm) -> Shown {
    let (app, team) = (&form.app, &form.team);
    let (name, value) = (form.field("name"), form.posted.field("value"));
    let stored = match form.posted.field("generate") {
        "ed25519" if value.is_empty() => {
            webhooks::generate_signing_key(&app.store, &app.sealer, team, name)
                .await
                .map(drop)
        }
        "" => secrets::put(&app.store, &app.sealer, team, name, value)
            .await
            .map(drop),
        _ => Err(Error::invalid(
            "value",
            "leave the value empty to generate a key, or untick the box",
        )),
    };
    match stored {
        Ok(()) => Ok(form.done("secret stored", name, "#secrets")),
        Err(e @ Error::InvalidRequest { .. }) => {
            refused(&form, Forms::one(Field::Secret, name, &e)).await
        }
        Err(e) => Err(form.failed(e)),
    }
}

/// `POST /teams/{team}/secrets/{name}/delete`.
pub async fn delete_secret(form: AdminForm) -> Shown {
    let (app, team, name) = (&form.app, &form.team, form.param("name")?);
    match webhooks::delete_secret(&app.store, team, &name, false).await {
        Ok(_) => Ok(form.done("secret deleted", &name, "#secrets")),
        // In use: said on the page, beside the secrets, not as an error page.
        Err(e @ Error::Conflict(_)) => refused(&form, Forms::refusal(Field::Secret, &e)).await,
        Err(e) => Err(form.failed(e)),
    }
}

/// `POST /teams/{team}/members`: adds a member or changes a role.
pub async fn set_member(form: AdminForm) -> Shown {
    let (app, team, name) = (&form.app, &form.team, form.field("user"));
    let role = match form.field("role") {
        "admin" => Role::Admin,
        _ => Role::Member,
    };
    let set = async {
        let target = auth::find_user(&app.store, name).await?;
        groups::set_member(&app.store, GroupKind::Team, team, &target, role).await
    };
    match set.await {
        Ok(_) => Ok(form.done("member set", name, "#members")),
        // An unknown user or a last admin's demotion: the form says so.
        Err(e @ (Error::NotFound(_) | Error::Conflict(_) | Error::InvalidRequest { .. })) => {
            refused(&form, Forms::one(Field::Member, name, &e)).await
        }
        Err(e) => Err(form.failed(e)),
    }
}

/// `POST /teams/{team}/members/{user}/remove`. The last admin stays.
pub async fn remove_member(form: AdminForm) -> Shown {
    let (app, team, name) = (&form.app, &form.team, form.param("user")?);
    let remove = async {
        let target = auth::find_user(&app.store, &name).await?;
        groups::remove_member(&app.store, GroupKind::Team, team, &target).await
    };
    match remove.await {
        Ok(()) => Ok(form.done("member removed", &name, "#members")),
        // The last admin: said on the page, beside the members.
        Err(e @ Error::Conflict(_)) => refused(&form, Forms::refusal(Field::Member, &e)).await,
        Err(e) => Err(form.failed(e)),
    }
}
