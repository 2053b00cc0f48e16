//! A project: its automations, and its artifacts (collections, versions,
//! aliases and tags), so a user can trigger an event by hand and watch it
//! arrive in an automation's history.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};

use super::usage::Chart;
use super::{Failed, Nav, Posted, Shown, Viewer, page};
use crate::app::App;
use crate::artifacts;
use crate::automation::automations::{self, Automation, EventConfig, Scope};
use crate::error::Error;
use crate::groups::{self, Role};
use crate::inference::usage;
use crate::{projects, runs};

/// An automation as a project page lists it.
struct AutomationRow {
    name: String,
    event: String,
    webhook: String,
    state: String,
}

/// A version as a project page lists it.
struct VersionRow {
    version: String,
    aliases: String,
    tags: String,
}

/// A run as listed.
struct RunRow {
    id: String,
    name: String,
    creator: String,
    started: String,
}

/// A collection and its versions.
struct CollectionRow {
    name: String,
    versions: Vec<VersionRow>,
}

#[derive(Template)]
#[template(path = "console/project.html")]
struct ProjectPage {
    nav: Option<Nav>,
    csrf: String,
    team: String,
    project: String,
    base: String,
    admin: bool,
    automations: Vec<AutomationRow>,
    collections: Vec<CollectionRow>,
    runs: Vec<RunRow>,
    artifact_error: Option<String>,
    chart: Chart,
}

/// The console path of a project.
pub fn base(team: &str, project: &str) -> String {
    format!("/teams/{team}/projects/{project}")
}

/// An automation's event in words.
pub fn describe_event(event: &EventConfig) -> String {
    match event {
        EventConfig::AddArtifactAlias { alias_regex } => {
            format!("an alias matching /{alias_regex}/ is added")
        }
        EventConfig::AddArtifactTag {
            tag_regex: Some(re),
        } => {
            format!("a tag matching /{re}/ is added")
        }
        EventConfig::AddArtifactTag { tag_regex: None } => "a tag is added".into(),
        EventConfig::LinkArtifact {} => "a version is linked".into(),
        EventConfig::RunMetricThreshold { metric, .. } => format!(
            "{} of the last {} {} {} {}",
            metric.aggregation, metric.window, metric.name, metric.comparison, metric.threshold
        ),
    }
}

/// An automation's state in words.
pub fn state_of(automation: &Automation) -> String {
    match &automation.disabled_reason {
        Some(why) => format!("disabled: {why}"),
        None => "active".into(),
    }
}

/// `GET /teams/{team}/projects/{project}`.
pub async fn show(
    State(app): State<App>,
    viewer: Viewer,
    Path((team, project)): Path<(String, String)>,
) -> Shown {
    project_page(&app, &viewer, &team, &project, None).await
}

/// The project page; `error` is an artifact action's refusal.
async fn project_page(
    app: &App,
    viewer: &Viewer,
    team: &str,
    project: &str,
    error: Option<Error>,
) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    let store = &app.store;
    let role = groups::require_team(store, &viewer.user, team, Role::Member)
        .await
        .map_err(failed)?;
    projects::get(store, team, project).await.map_err(failed)?;
    let scope = Scope::project(team, project);
    let automations = automations::list(store, &scope).await.map_err(failed)?;
    let mut collections = Vec::new();
    for c in artifacts::collections(store, &scope)
        .await
        .map_err(failed)?
    {
        let versions = artifacts::versions(store, &scope, &c.name)
            .await
            .map_err(failed)?;
        collections.push(CollectionRow {
            name: c.name,
            versions: versions
                .into_iter()
                .map(|v| VersionRow {
                    version: v.version.version,
                    aliases: v.aliases.join(", "),
                    tags: v.tags.join(", "),
                })
                .collect(),
        });
    }
    let runs = runs::list(store, team, project).await.map_err(failed)?;
    let usage = usage::rows(store, &usage::project_scope(team, project))
        .await
        .map_err(failed)?;
    Ok(page(
        StatusCode::OK,
        &ProjectPage {
            nav: Some(viewer.nav()),
            csrf: viewer.csrf().to_string(),
            team: team.to_string(),
            project: project.to_string(),
            base: base(team, project),
            admin: role == Role::Admin,
            automations: automations
                .into_iter()
                .map(|a| AutomationRow {
                    event: describe_event(&a.event),
                    webhook: format!("{}/{}", a.webhook.team, a.webhook.name),
                    state: state_of(&a),
                    name: a.name,
                })
                .collect(),
            collections,
            runs: runs
                .into_iter()
                .map(|r| RunRow {
                    started: super::teams::date(r.created_at),
                    id: r.id,
                    name: r.name,
                    creator: r.creator,
                })
                .collect(),
            artifact_error: error.map(|e| e.to_string()),
            chart: Chart::of(&usage, Some(format!("{team}/{project}"))),
        },
    ))
}

/// Runs an action of a project member (on artifacts or runs), dispatches
/// the events it caused, and shows the page again: its refusal in place,
/// or, done, the page at `anchor`.
async fn member_action<F>(
    app: &App,
    posted: &Posted,
    (team, project, anchor): (&str, &str, &str),
    act: F,
) -> Shown
where
    F: AsyncFnOnce(&Scope) -> Result<Vec<crate::model::Event>, Error>,
{
    let viewer = &posted.viewer;
    let scope = Scope::project(team, project);
    let done = async {
        groups::authorize(&app.store, &viewer.user, &scope, Role::Member).await?;
        let events = act(&scope).await?;
        app.matcher.dispatch(&events).await
    };
    match done.await {
        Ok(()) => {
            let to = format!("{}#{anchor}", base(team, project));
            Ok(Redirect::to(&to).into_response())
        }
        Err(e @ (Error::InvalidRequest { .. } | Error::Conflict(_))) => {
            project_page(app, viewer, team, project, Some(e)).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

/// `POST …/collections`: creates a collection.
pub async fn create_collection(
    State(app): State<App>,
    Path((team, project)): Path<(String, String)>,
    posted: Posted,
) -> Shown {
    let (user, name) = (&posted.viewer.user, posted.field("name").trim());
    member_action(
        &app,
        &posted,
        (&team, &project, "artifacts"),
        async |scope| {
            artifacts::create_collection(&app.store, scope, user, name, "").await?;
            Ok(Vec::new())
        },
    )
    .await
}

/// `POST …/collections/{collection}/versions`: logs a version.
pub async fn create_version(
    State(app): State<App>,
    Path((team, project, collection)): Path<(String, String, String)>,
    posted: Posted,
) -> Shown {
    let user = &posted.viewer.user;
    member_action(
        &app,
        &posted,
        (&team, &project, "artifacts"),
        async |scope| {
            let metadata = Default::default();
            let (_, events) =
                artifacts::create_version(&app.store, scope, user, &collection, metadata).await?;
            Ok(events)
        },
    )
    .await
}

/// `POST …/versions/{version}/labels`: adds an alias or a tag (the button
/// pressed says which), emitting its event.
pub async fn add_label(
    State(app): State<App>,
    Path((team, project, collection, version)): Path<(String, String, String, String)>,
    posted: Posted,
) -> Shown {
    let user = &posted.viewer.user;
    let labels = vec![posted.field("label").trim().to_string()];
    let tag = posted.field("kind") == "tag";
    member_action(
        &app,
        &posted,
        (&team, &project, "artifacts"),
        async |scope| {
            let store = &app.store;
            let (_, events) = if tag {
                artifacts::add_tags(store, scope, user, &collection, &version, labels).await?
            } else {
                artifacts::add_aliases(store, scope, user, &collection, &version, labels).await?
            };
            Ok(events)
        },
    )
    .await
}

/// `POST …/runs`: starts a run.
pub async fn create_run(
    State(app): State<App>,
    Path((team, project)): Path<(String, String)>,
    posted: Posted,
) -> Shown {
    let (user, name) = (&posted.viewer.user, posted.field("name").trim());
    member_action(&app, &posted, (&team, &project, "runs-title"), async |_| {
        runs::create(&app.store, &team, &project, user, name).await?;
        Ok(Vec::new())
    })
    .await
}

/// `POST …/runs/{run}/metrics`: logs one value of one metric, which may
/// fire run-metric automations.
pub async fn log_metric(
    State(app): State<App>,
    Path((team, project, run)): Path<(String, String, String)>,
    posted: Posted,
) -> Shown {
    let user = &posted.viewer.user;
    let metric = posted.field("metric").trim().to_string();
    let value = posted.field("value").trim().parse::<f64>();
    member_action(&app, &posted, (&team, &project, "runs-title"), async |_| {
        let value =
            value.map_err(|_| Error::invalid("value", "the value is a number, e.g. 0.93"))?;
        let metrics = std::collections::BTreeMap::from([(metric, value)]);
        let (_, events) = runs::log(&app.store, &team, &project, &run, user, &metrics).await?;
        Ok(events)
    })
    .await
}
