//! A project or a registry ([`Place`]): its automations and its artifacts
//! (collections, versions, aliases, tags, links), and a project's runs and
//! usage, so a user can trigger each event by hand and watch it arrive in
//! an automation's history.

use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;

use super::place::Place;
use crate::http::scope::Params;
use axum::response::{IntoResponse, Redirect};

use super::session::{optional_number, optional_usd};
use super::usage::Chart;
use super::{Dated, Failed, Nav, Posted, Shown, Viewer};
use crate::app::App;
use crate::automation::automations::{self, Automation, EventConfig, Scope};
use crate::domain::artifacts::{self, Label, Target};
use crate::domain::groups::{self, GroupKind, Role};
use crate::domain::names::Named;
use crate::domain::projects;
use crate::domain::runs::{self, Run, RunState};
use crate::error::Error;
use crate::inference::usage;
use crate::model::RateLimits;

/// Nested under a place's `/collections/{collection}/versions`.
pub fn version_routes() -> Router<App> {
    Router::new()
        .route("/", post(create_version))
        .route("/{version}/labels", post(add_label))
        .route("/{version}/link", post(link))
}

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
    title: String,
    is_project: bool,
    base: String,
    admin: bool,
    /// Where this user may link a version to: registry names.
    registries: Vec<String>,
    automations: Vec<AutomationRow>,
    collections: Vec<CollectionRow>,
    runs: Vec<Dated<Run>>,
    artifact_error: Option<String>,
    chart: Option<Chart>,
    /// A project's inference limits.
    limits: Option<RateLimits>,
}

/// An automation's event in words.
pub fn describe_event(event: &EventConfig) -> String {
    match event {
        EventConfig::AddArtifactAlias { alias_regex } => {
            format!("an alias matching /{alias_regex}/ is added")
        }
        EventConfig::UpdateArtifactAlias { alias_regex } => {
            format!("an alias matching /{alias_regex}/ moves to another version")
        }
        EventConfig::AddArtifactTag {
            tag_regex: Some(re),
        } => {
            format!("a tag matching /{re}/ is added")
        }
        EventConfig::AddArtifactTag { tag_regex: None } => "a tag is added".into(),
        EventConfig::LinkArtifact {} => "a version is linked".into(),
        EventConfig::WebhookDisabled {} => "one of the team's webhooks is switched off".into(),
        EventConfig::DeliveryExhausted {} => "a delivery fails for good".into(),
        EventConfig::WebhookCircuitOpened {} => "a webhook's circuit opens".into(),
        EventConfig::WebhookRecovered {} => "a webhook recovers".into(),
        EventConfig::CreateArtifact {
            collection_regex: Some(re),
        } => format!("a new version is created in a collection matching /{re}/"),
        EventConfig::CreateArtifact {
            collection_regex: None,
        } => "a new version is created".into(),
        EventConfig::RunState { states, .. } => {
            let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
            format!("a run ends {}", names.join(" or "))
        }
        EventConfig::RunMetricThreshold { metric, .. } => format!(
            "{} of the last {} {} {} {}",
            metric.aggregation, metric.window, metric.name, metric.comparison, metric.threshold
        ),
        EventConfig::RunMetricChange { metric, .. } => describe_change(metric),
        EventConfig::RunMetricZscore { metric, .. } => describe_zscore(metric),
    }
}

fn describe_change(metric: &crate::model::MetricChangeSpec) -> String {
    let by = match metric.change_type.as_str() {
        "relative" => format!("{}%", metric.amount * 100.0),
        _ => metric.amount.to_string(),
    };
    let moves = match metric.direction.as_str() {
        "increase" => "rises",
        "decrease" => "falls",
        _ => "moves",
    };
    format!(
        "{} of the last {} {} {moves} by {by} against the {} before",
        metric.aggregation, metric.window, metric.name, metric.prior_window
    )
}

fn describe_zscore(metric: &crate::model::MetricZscoreSpec) -> String {
    let t = metric.threshold;
    let bound = match metric.direction.as_str() {
        "above" => format!("≥ {t}"),
        "below" => format!("≤ -{t}"),
        _ => format!("beyond ±{t}"),
    };
    format!(
        "the z-score of {} over the last {} values is {bound}",
        metric.name, metric.window
    )
}

/// An automation's state in words.
pub fn state_of(automation: &Automation) -> String {
    match &automation.disabled_reason {
        Some(why) => format!("disabled: {why}"),
        None => "active".into(),
    }
}

/// `GET /teams/{team}/projects/{project}` and `GET /registries/{registry}`.
pub async fn show(State(app): State<App>, viewer: Viewer, Path(params): Params) -> Shown {
    let place = Place::of(&params).map_err(|e| Failed::new(e, &viewer))?;
    place_page(&app, &viewer, &place, None).await
}

/// The page of a project or registry; `error` is an action's refusal.
async fn place_page(app: &App, viewer: &Viewer, place: &Place, error: Option<Error>) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    let store = &app.store;
    let scope = &place.scope;
    app.access
        .authorize(&viewer.user, scope, Role::Member)
        .await
        .map_err(failed)?;
    let admin = app
        .access
        .authorize(&viewer.user, scope, Role::Admin)
        .await
        .is_ok();
    let automations = automations::list(store, scope).await.map_err(failed)?;
    let collections = collection_rows(store, scope).await.map_err(failed)?;
    let (runs, chart, limits) = match scope {
        Scope::Project { team, project } => {
            project_parts(store, team, project).await.map_err(failed)?
        }
        Scope::Registry { .. } | Scope::Collection { .. } | Scope::Team { .. } => {
            (Vec::new(), None, None)
        }
    };
    let registries = groups::list_for(store, GroupKind::Registry, &viewer.user)
        .await
        .map_err(failed)?;
    super::ok(&ProjectPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        title: place.title.clone(),
        is_project: place.is_project(),
        base: place.base.clone(),
        admin,
        limits,
        registries: registries.into_iter().map(|(g, _)| g.name).collect(),
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
            .map(|r| Dated::new(r, |r| r.created_at))
            .collect(),
        artifact_error: error.map(|e| e.to_string()),
        chart,
    })
}

/// Each collection of `scope`, with its versions.
async fn collection_rows(
    store: &crate::store::Store,
    scope: &Scope,
) -> crate::error::Result<Vec<CollectionRow>> {
    let mut rows = Vec::new();
    for c in artifacts::collections(store, scope).await? {
        let versions = artifacts::versions(store, scope, &c.name).await?;
        let version = |v: crate::model::LabelledVersion| VersionRow {
            version: v.version.version,
            aliases: v.aliases.join(", "),
            tags: v.tags.join(", "),
        };
        rows.push(CollectionRow {
            name: c.name,
            versions: versions.into_iter().map(version).collect(),
        });
    }
    Ok(rows)
}

/// What only a project's page shows: its runs, its usage chart and its
/// limits.
async fn project_parts(
    store: &crate::store::Store,
    team: &str,
    project: &str,
) -> crate::error::Result<(Vec<Run>, Option<Chart>, Option<RateLimits>)> {
    let runs = runs::list(store, team, project).await?;
    let usage = usage::rows(store, &usage::project_scope(team, project)).await?;
    let chart = Chart::of(&usage, Some(format!("{team}/{project}")));
    let found = projects::get(store, team, project).await?;
    Ok((runs, Some(chart), Some(found.limits)))
}

/// Runs an action of a member of the place (on artifacts or runs),
/// dispatches the events it caused, and shows the page again: its refusal
/// in place, or, done, the page at `anchor`.
async fn member_action<F>(
    app: &App,
    posted: &Posted,
    params: &std::collections::HashMap<String, String>,
    anchor: &str,
    act: F,
) -> Shown
where
    F: AsyncFnOnce(&Scope) -> Result<(), Error>,
{
    let viewer = &posted.viewer;
    let place = Place::of(params).map_err(|e| Failed::new(e, viewer))?;
    let done = async {
        app.access
            .authorize(&viewer.user, &place.scope, Role::Member)
            .await?;
        act(&place.scope).await
    };
    match done.await {
        Ok(()) => Ok(Redirect::to(&format!("{}#{anchor}", place.base)).into_response()),
        Err(e @ (Error::InvalidRequest { .. } | Error::Conflict(_) | Error::NotFound(_))) => {
            place_page(app, viewer, &place, Some(e)).await
        }
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

/// `POST /teams/{team}/projects/{project}/limits`: a team admin sets the
/// project's inference limits (empty fields for none).
pub async fn set_limits(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let user = &posted.viewer.user;
    let number = |field: &str| optional_number(field, posted.field(field));
    let usd = |field: &str| optional_usd(field, posted.field(field));
    member_action(&app, &posted, &params, "limits-title", async |scope| {
        let Scope::Project { team, project } = scope else {
            return Err(Error::invalid("rpm", "limits belong to projects"));
        };
        app.access.require_team(user, team, Role::Admin).await?;
        let limits = RateLimits {
            rpm: number("rpm")?,
            tpm: number("tpm")?,
            tokens_per_day: number("tokens_per_day")?,
            usd_per_day: usd("usd_per_day")?,
            usd_per_month: usd("usd_per_month")?,
        };
        projects::set_limits(&app.store, team, project, &limits).await?;
        crate::http::audit(
            &user.name,
            "project limits set",
            &format!("{team}/{project}: {limits:?}"),
        );
        Ok(())
    })
    .await
}

/// `POST …/collections`: creates a collection.
pub async fn create_collection(
    State(app): State<App>,
    Path(params): Params,
    posted: Posted,
) -> Shown {
    let (user, name) = (&posted.viewer.user, posted.field("name").trim());
    member_action(&app, &posted, &params, "artifacts", async |scope| {
        let new = Named {
            name,
            description: "",
        };
        artifacts::create_collection(&app.store, scope, user, new).await?;
        Ok(())
    })
    .await
}

/// `POST …/collections/{collection}/versions`: logs a version (projects).
pub async fn create_version(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let user = &posted.viewer.user;
    let collection = params.get("collection").cloned().unwrap_or_default();
    member_action(&app, &posted, &params, "artifacts", async |scope| {
        let metadata = Default::default();
        let events = &app.matcher;
        artifacts::create_version(&app.store, events, scope, user, &collection, metadata).await?;
        Ok(())
    })
    .await
}

/// `POST …/versions/{version}/labels`: adds an alias or a tag (the button
/// pressed says which), emitting its event.
pub async fn add_label(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let user = &posted.viewer.user;
    let labels = vec![posted.field("label").trim().to_string()];
    let kind = if posted.field("kind") == "tag" {
        Label::Tag
    } else {
        Label::Alias
    };
    let at = |name: &str| params.get(name).cloned().unwrap_or_default();
    let (collection, version) = (at("collection"), at("version"));
    member_action(&app, &posted, &params, "artifacts", async |scope| {
        let target = Target {
            scope,
            user,
            collection: &collection,
            version: &version,
        };
        artifacts::add_labels(&app.store, &app.matcher, target, kind, labels).await?;
        Ok(())
    })
    .await
}

/// `POST …/versions/{version}/link`: links a project's version into a
/// registry collection, emitting `LINK_ARTIFACT` there.
pub async fn link(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let user = &posted.viewer.user;
    let at = |name: &str| params.get(name).cloned().unwrap_or_default();
    let registry = Scope::Registry {
        registry: posted.field("registry").to_string(),
    };
    let into = posted.field("into").trim().to_string();
    member_action(&app, &posted, &params, "artifacts", async |scope| {
        let Scope::Project { team, project } = scope else {
            return Err(Error::invalid(
                "registry",
                "only a project's versions are linked",
            ));
        };
        app.access.authorize(user, &registry, Role::Member).await?;
        let source = crate::model::Source {
            team: team.clone(),
            project: project.clone(),
            collection: at("collection"),
            version: at("version"),
        };
        artifacts::link(&app.store, &app.matcher, &registry, user, &into, source).await?;
        Ok(())
    })
    .await
}

/// `POST …/runs`: starts a run.
pub async fn create_run(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let (user, name) = (&posted.viewer.user, posted.field("name").trim());
    member_action(&app, &posted, &params, "runs-title", async |scope| {
        let Scope::Project { team, project } = scope else {
            return Err(Error::invalid("name", "runs belong to projects"));
        };
        runs::create(&app.store, team, project, user, name).await?;
        Ok(())
    })
    .await
}

/// `POST …/runs/{run}/state`: ends a run (the Finish and Fail buttons),
/// which may fire `RUN_STATE` automations.
pub async fn end_run(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let user = &posted.viewer.user;
    let state = posted.field("state").to_string();
    let run = params.get("run").cloned().unwrap_or_default();
    member_action(&app, &posted, &params, "runs-title", async |scope| {
        let Scope::Project { team, project } = scope else {
            return Err(Error::invalid("state", "runs belong to projects"));
        };
        let to = RunState::parse(&state)
            .ok_or_else(|| Error::invalid("state", format!("unknown run state '{state}'")))?;
        let at = runs::RunAt {
            team,
            project,
            id: &run,
        };
        runs::end(&app.store, &app.matcher, at, user, to).await?;
        Ok(())
    })
    .await
}

/// `POST …/runs/{run}/metrics`: logs one value of one metric, which may
/// fire run-metric automations.
pub async fn log_metric(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let user = &posted.viewer.user;
    let metric = posted.field("metric").trim().to_string();
    let value = posted.field("value").trim().parse::<f64>();
    let run = params.get("run").cloned().unwrap_or_default();
    member_action(&app, &posted, &params, "runs-title", async |scope| {
        let Scope::Project { team, project } = scope else {
            return Err(Error::invalid("metric", "runs belong to projects"));
        };
        let value =
            value.map_err(|_| Error::invalid("value", "the value is a number, e.g. 0.93"))?;
        let metrics = std::collections::BTreeMap::from([(metric, value)]);
        runs::log(
            &app.store,
            &app.matcher,
            team,
            project,
            &run,
            user,
            &metrics,
        )
        .await?;
        Ok(())
    })
    .await
}
