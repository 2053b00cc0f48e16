//! The automations of a project or registry ([`Place`]): the creation form
//! (scope → event → webhook →
//! payload with a preview by the real template plugin → name), one
//! automation with its execution history and replays, and deletion after a
//! confirmation step.

use std::collections::HashMap;

use askama::Template;
use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};

use super::place::Place;
use super::projects::{describe_event, state_of};
use super::session::optional_number;
use super::{ConfirmPage, Failed, Nav, Posted, Shown, Viewer};
use crate::app::App;
use crate::automation::automations::{
    self, Action, Automation, Definition, EventConfig, Handle, Scope, WebhookRef,
};
use crate::automation::outbox::{self, Execution, Status};
use crate::automation::webhooks;
use crate::domain::groups::{self, GroupKind, Role};
use crate::error::Error;
use crate::http::scope::{Params, param};
use crate::model::{
    ExecutionId, MetricChangeSpec, MetricSpec, MetricZscoreSpec, RunFilters, RunState,
};
use crate::plugin::Kind;

/// Nested under a place's `/automations`.
pub fn routes() -> Router<App> {
    Router::new()
        .route("/new", get(new).post(create))
        .route("/{name}", get(show))
        .route("/{name}/edit", get(edit).post(update))
        .route("/{name}/replay", post(replay_failed))
        .route("/{name}/executions/{execution}/replay", post(replay_one))
        .route("/{name}/delete", get(confirm_delete).post(delete))
}

/// The creation form as posted (or empty, with defaults).
pub struct AutomationForm {
    name: String,
    description: String,
    event: String,
    alias_regex: String,
    tag_regex: String,
    metric_name: String,
    aggregation: String,
    window: String,
    comparison: String,
    threshold: String,
    /// For `RUN_METRIC_CHANGE`.
    prior_window: String,
    change_type: String,
    change_direction: String,
    amount: String,
    /// For `RUN_METRIC_ZSCORE`.
    zscore_direction: String,
    zscore_threshold: String,
    /// For `RUN_STATE`: the ending states ticked.
    states: Vec<String>,
    webhook: String,
    template_plugin: String,
    payload: String,
    cooldown_s: String,
    max_per_hour: String,
}

impl Default for AutomationForm {
    fn default() -> Self {
        AutomationForm {
            name: String::new(),
            description: String::new(),
            event: "ADD_ARTIFACT_ALIAS".into(),
            alias_regex: String::new(),
            tag_regex: String::new(),
            metric_name: String::new(),
            aggregation: "average".into(),
            window: String::new(),
            comparison: ">".into(),
            threshold: String::new(),
            prior_window: String::new(),
            change_type: "relative".into(),
            change_direction: "any".into(),
            amount: String::new(),
            zscore_direction: "any".into(),
            zscore_threshold: String::new(),
            states: vec!["finished".into(), "failed".into()],
            webhook: String::new(),
            template_plugin: automations::DEFAULT_TEMPLATE_PLUGIN.into(),
            payload: String::new(),
            cooldown_s: String::new(),
            max_per_hour: String::new(),
        }
    }
}

impl AutomationForm {
    /// Whether the `RUN_STATE` box for `state` is ticked.
    fn has_state(&self, state: &str) -> bool {
        self.states.iter().any(|s| s == state)
    }

    /// The form filled in from a saved automation, for editing.
    fn of(a: &Automation) -> AutomationForm {
        let mut form = AutomationForm {
            name: a.name.clone(),
            description: a.description.clone(),
            event: a.event.event_type().as_str().to_string(),
            webhook: format!("{}/{}", a.webhook.team, a.webhook.name),
            template_plugin: a.template_plugin.clone(),
            payload: a.payload.clone().unwrap_or_default(),
            cooldown_s: a.cooldown_s.map(|c| c.to_string()).unwrap_or_default(),
            max_per_hour: a.max_per_hour.map(|m| m.to_string()).unwrap_or_default(),
            ..AutomationForm::default()
        };
        match &a.event {
            EventConfig::AddArtifactAlias { alias_regex }
            | EventConfig::UpdateArtifactAlias { alias_regex } => {
                form.alias_regex = alias_regex.clone();
            }
            EventConfig::AddArtifactTag { tag_regex } => {
                form.tag_regex = tag_regex.clone().unwrap_or_default();
            }
            EventConfig::LinkArtifact {}
            | EventConfig::CreateArtifact { .. }
            | EventConfig::WebhookDisabled {}
            | EventConfig::DeliveryExhausted {}
            | EventConfig::WebhookCircuitOpened {}
            | EventConfig::WebhookRecovered {} => {}
            EventConfig::RunState { states, .. } => {
                form.states = states.iter().map(|s| s.as_str().to_string()).collect();
            }
            EventConfig::RunMetricThreshold { metric, .. } => {
                form.metric_name = metric.name.clone();
                form.aggregation = metric.aggregation.clone();
                form.window = metric.window.to_string();
                form.comparison = metric.comparison.clone();
                form.threshold = metric.threshold.to_string();
            }
            EventConfig::RunMetricChange { metric, .. } => {
                form.metric_name = metric.name.clone();
                form.aggregation = metric.aggregation.clone();
                form.window = metric.window.to_string();
                form.prior_window = metric.prior_window.to_string();
                form.change_type = metric.change_type.clone();
                form.change_direction = metric.direction.clone();
                form.amount = metric.amount.to_string();
            }
            EventConfig::RunMetricZscore { metric, .. } => {
                form.metric_name = metric.name.clone();
                form.window = metric.window.to_string();
                form.zscore_direction = metric.direction.clone();
                form.zscore_threshold = metric.threshold.to_string();
            }
        }
        form
    }

    fn posted(posted: &Posted) -> AutomationForm {
        let field = |name: &str| posted.field(name).to_string();
        AutomationForm {
            name: field("name").trim().to_string(),
            description: field("description"),
            event: field("event"),
            alias_regex: field("alias_regex"),
            tag_regex: field("tag_regex"),
            metric_name: field("metric_name"),
            aggregation: field("aggregation"),
            window: field("window"),
            comparison: field("comparison"),
            threshold: field("threshold"),
            prior_window: field("prior_window"),
            change_type: field("change_type"),
            change_direction: field("change_direction"),
            amount: field("amount"),
            zscore_direction: field("zscore_direction"),
            zscore_threshold: field("zscore_threshold"),
            states: automations::ENDING_STATES
                .iter()
                .map(|s| s.as_str().to_string())
                .filter(|s| !posted.field(&format!("state_{s}")).is_empty())
                .collect(),
            webhook: field("webhook"),
            template_plugin: field("template_plugin"),
            payload: field("payload"),
            cooldown_s: field("cooldown_s"),
            max_per_hour: field("max_per_hour"),
        }
    }

    /// The definition the API would receive, or the field that is wrong.
    fn definition(&self) -> Result<Definition, Error> {
        let event = self.event_config()?;
        let payload = Some(self.payload.trim().to_string()).filter(|p| !p.is_empty());
        let (team, webhook) = self.webhook.split_once('/').ok_or_else(|| {
            Error::invalid(
                "webhook",
                "choose a webhook; a team admin creates them in team settings",
            )
        })?;
        Ok(Definition {
            name: self.name.clone(),
            description: self.description.trim().to_string(),
            event,
            webhook: WebhookRef {
                team: team.to_string(),
                name: webhook.to_string(),
            },
            action: Action::Webhooks,
            payload,
            template_plugin: Some(self.template_plugin.clone()),
            cooldown_s: optional_number("cooldown_s", &self.cooldown_s)?,
            max_per_hour: optional_number("max_per_hour", &self.max_per_hour)?,
        })
    }

    /// The event chosen, with the fields its kind reads.
    fn event_config(&self) -> Result<EventConfig, Error> {
        Ok(match self.event.as_str() {
            "ADD_ARTIFACT_ALIAS" => EventConfig::AddArtifactAlias {
                alias_regex: self.alias_regex.trim().to_string(),
            },
            "UPDATE_ARTIFACT_ALIAS" => EventConfig::UpdateArtifactAlias {
                alias_regex: self.alias_regex.trim().to_string(),
            },
            "ADD_ARTIFACT_TAG" => EventConfig::AddArtifactTag {
                tag_regex: Some(self.tag_regex.trim().to_string()).filter(|t| !t.is_empty()),
            },
            "RUN_METRIC_THRESHOLD" => EventConfig::RunMetricThreshold {
                metric: self.threshold_metric()?,
                run_filters: RunFilters::default(),
            },
            "RUN_METRIC_CHANGE" => EventConfig::RunMetricChange {
                metric: self.change_metric()?,
                run_filters: RunFilters::default(),
            },
            "RUN_METRIC_ZSCORE" => EventConfig::RunMetricZscore {
                metric: self.zscore_metric()?,
                run_filters: RunFilters::default(),
            },
            "LINK_ARTIFACT" => EventConfig::LinkArtifact {},
            "WEBHOOK_DISABLED" => EventConfig::WebhookDisabled {},
            "DELIVERY_EXHAUSTED" => EventConfig::DeliveryExhausted {},
            "WEBHOOK_CIRCUIT_OPENED" => EventConfig::WebhookCircuitOpened {},
            "WEBHOOK_RECOVERED" => EventConfig::WebhookRecovered {},
            "CREATE_ARTIFACT" => EventConfig::CreateArtifact {
                collection_regex: None,
            },
            "RUN_STATE" => EventConfig::RunState {
                states: self
                    .states
                    .iter()
                    .filter_map(|s| RunState::parse(s))
                    .collect(),
                run_filters: RunFilters::default(),
            },
            other => return Err(Error::invalid("event", format!("unknown event '{other}'"))),
        })
    }

    fn threshold_metric(&self) -> Result<MetricSpec, Error> {
        Ok(MetricSpec {
            name: self.metric_name.trim().to_string(),
            window: or_default("window", &self.window, 5)?,
            aggregation: self.aggregation.clone(),
            comparison: self.comparison.clone(),
            threshold: number("threshold", &self.threshold, None)?,
        })
    }

    fn change_metric(&self) -> Result<MetricChangeSpec, Error> {
        Ok(MetricChangeSpec {
            name: self.metric_name.trim().to_string(),
            aggregation: self.aggregation.clone(),
            window: or_default("window", &self.window, 10)?,
            prior_window: or_default("prior_window", &self.prior_window, 50)?,
            change_type: self.change_type.clone(),
            direction: self.change_direction.clone(),
            amount: number("amount", &self.amount, None)?,
        })
    }

    fn zscore_metric(&self) -> Result<MetricZscoreSpec, Error> {
        Ok(MetricZscoreSpec {
            name: self.metric_name.trim().to_string(),
            window: or_default("window", &self.window, 30)?,
            direction: self.zscore_direction.clone(),
            threshold: number("threshold", &self.zscore_threshold, Some(3.0))?,
        })
    }
}

/// A window from a form field, `default` when left empty.
fn or_default(field: &str, text: &str, default: u32) -> Result<u32, Error> {
    match text.trim() {
        "" => Ok(default),
        text => text.parse().map_err(|_| {
            Error::invalid(
                format!("event.metric.{field}"),
                format!("{field} is a whole number of values, or empty for {default}"),
            )
        }),
    }
}

/// A number from a form field; `default`, if any, when left empty.
fn number(field: &str, text: &str, default: Option<f64>) -> Result<f64, Error> {
    match (text.trim(), default) {
        ("", Some(default)) => Ok(default),
        (text, _) => text.parse().map_err(|_| {
            Error::invalid(
                format!("event.metric.{field}"),
                format!("the {field} is a number, e.g. 0.5"),
            )
        }),
    }
}

#[derive(Template)]
#[template(path = "console/automation_form.html")]
struct FormPage {
    nav: Option<Nav>,
    csrf: String,
    heading: String,
    action: String,
    save: String,
    title: String,
    base: String,
    events: &'static [(&'static str, &'static str)],
    /// Whether the place has runs (a project).
    runs: bool,
    /// Whether the place is a team (its automations watch its webhooks).
    team: bool,
    /// The states a `RUN_STATE` automation may name.
    ending: Vec<&'static str>,
    /// `team/name` of every webhook the viewer may call.
    webhooks: Vec<String>,
    templates: Vec<String>,
    form: AutomationForm,
    /// The first part of the error's field (`payload`, `event`, `name`, …).
    error_at: String,
    error: Option<String>,
    preview: Option<String>,
}

/// The place a route names, or the error page.
fn place(params: &HashMap<String, String>, viewer: &Viewer) -> Result<Place, Failed> {
    Place::of(params).map_err(|e| Failed::new(e, viewer))
}

/// The automation a route names.
fn handle(place: &Place, params: &HashMap<String, String>) -> Result<Handle, Error> {
    Ok(Handle {
        scope: place.scope.clone(),
        name: param(params, "name")?,
    })
}

/// `GET …/automations/new`.
pub async fn new(State(app): State<App>, viewer: Viewer, Path(params): Params) -> Shown {
    let place = place(&params, &viewer)?;
    let form = AutomationForm::default();
    form_page(&app, &viewer, &place, None, form, Ok(None)).await
}

/// The automation the path names, shown only to the place's admins.
async fn for_admin(
    app: &App,
    viewer: &Viewer,
    place: &Place,
    params: &HashMap<String, String>,
) -> Result<Automation, Failed> {
    let found = async {
        let handle = handle(place, params)?;
        app.access
            .authorize(&viewer.user, &place.scope, Role::Admin)
            .await?;
        automations::get(&app.store, &place.scope, &handle.name).await
    };
    found.await.map_err(|e| Failed::new(e, viewer))
}

/// `GET …/automations/{name}/edit`: the form filled in.
pub async fn edit(State(app): State<App>, viewer: Viewer, Path(params): Params) -> Shown {
    let place = place(&params, &viewer)?;
    let automation = for_admin(&app, &viewer, &place, &params).await?;
    let form = AutomationForm::of(&automation);
    let editing = Some(automation.name.as_str());
    form_page(&app, &viewer, &place, editing, form, Ok(None)).await
}

/// The `team/name` of every webhook `viewer` may call: those of the
/// project's team, or, for a registry, of every team they belong to.
async fn webhook_choices(app: &App, viewer: &Viewer, place: &Place) -> Result<Vec<String>, Error> {
    let teams = match place.scope.parent() {
        Scope::Project { team, .. } | Scope::Team { team } => vec![team],
        Scope::Registry { .. } | Scope::Collection { .. } => {
            groups::list_for(&app.store, GroupKind::Team, &viewer.user)
                .await?
                .into_iter()
                .map(|(g, _)| g.name)
                .collect()
        }
    };
    let mut choices = Vec::new();
    for team in teams {
        for w in webhooks::list(&app.store, &team).await? {
            choices.push(format!("{team}/{}", w.name));
        }
    }
    Ok(choices)
}

/// The form (for a new automation, or for editing `editing`), with the
/// outcome of a preview or a refused save.
async fn form_page(
    app: &App,
    viewer: &Viewer,
    place: &Place,
    editing: Option<&str>,
    form: AutomationForm,
    outcome: Result<Option<String>, Error>,
) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    app.access
        .authorize(&viewer.user, &place.scope, Role::Admin)
        .await
        .map_err(failed)?;
    let webhooks = webhook_choices(app, viewer, place).await.map_err(failed)?;
    let mut templates: Vec<String> = app
        .plugins
        .list()
        .iter()
        .filter(|p| p.kind == Kind::PayloadTemplate)
        .map(|p| p.name.clone())
        .collect();
    templates.sort();
    let (error_at, error, preview) = match outcome {
        Ok(preview) => (String::new(), None, preview),
        Err(e) => {
            let at = e.param().unwrap_or("").split('.').next().unwrap_or("");
            (at.to_string(), Some(with_place(&e)), None)
        }
    };
    let base = &place.base;
    super::ok(&FormPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        heading: editing.map_or("New automation".into(), |n| format!("Edit automation {n}")),
        action: match editing {
            Some(name) => format!("{base}/automations/{name}/edit"),
            None => format!("{base}/automations/new"),
        },
        save: if editing.is_some() {
            "Save changes"
        } else {
            "Create automation"
        }
        .into(),
        title: place.title.clone(),
        base: base.clone(),
        events: place.events(),
        runs: place.is_project(),
        team: matches!(place.scope, Scope::Team { .. }),
        ending: automations::ENDING_STATES.map(RunState::as_str).to_vec(),
        webhooks,
        templates,
        form,
        error_at,
        error,
        preview,
    })
}

/// An error's words, led by its line and column when a plugin placed it.
fn with_place(e: &Error) -> String {
    match e {
        Error::PluginRefused {
            position: Some(at), ..
        } => format!("line {}, column {}: {e}", at.line, at.column),
        other => other.to_string(),
    }
}

/// `POST …/automations/new`: previews (intent `preview`) or creates.
pub async fn create(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let place = place(&params, &posted.viewer)?;
    save(&app, &place, None, &posted).await
}

/// `POST …/automations/{name}/edit`: previews, or saves the new definition
/// (re-validated; a new name renames it).
pub async fn update(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let place = place(&params, &posted.viewer)?;
    let name = param(&params, "name").map_err(|e| Failed::new(e, &posted.viewer))?;
    save(&app, &place, Some(&name), &posted).await
}

async fn save(app: &App, place: &Place, editing: Option<&str>, posted: &Posted) -> Shown {
    let viewer = &posted.viewer;
    let form = AutomationForm::posted(posted);
    let scope = &place.scope;
    let preview = posted.field("intent") == "preview";
    let outcome = async {
        app.access
            .authorize(&viewer.user, scope, Role::Admin)
            .await?;
        if let Some(name) = editing {
            automations::get(&app.store, scope, name).await?;
        }
        let def = form.definition()?;
        if preview {
            let text =
                automations::preview(&app.store, &app.plugins, &viewer.user, scope, &def).await?;
            return Ok(Some(pretty(text)));
        }
        automations::check(&app.store, &app.plugins, &viewer.user, scope, &def).await?;
        match editing {
            Some(name) => automations::update(&app.store, scope, name, def, &viewer.user).await?,
            None => automations::create(&app.store, scope, def, &viewer.user).await?,
        };
        Ok(None)
    };
    match outcome.await {
        Ok(None) => {
            tracing::info!(scope = %scope.describe(), automation = %form.name, by = %viewer.user.name, "automation saved");
            let to = format!("{}/automations/{}", place.base, form.name);
            Ok(Redirect::to(&to).into_response())
        }
        Ok(Some(text)) => form_page(app, viewer, place, editing, form, Ok(Some(text))).await,
        Err(
            e @ (Error::InvalidRequest { .. } | Error::PluginRefused { .. } | Error::Conflict(_)),
        ) => form_page(app, viewer, place, editing, form, Err(e)).await,
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

/// JSON as indented text; anything else as it is.
fn pretty(text: String) -> String {
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(text)
}

/// An attempt as the history shows it.
struct AttemptRow {
    when: String,
    status: String,
    latency: String,
    error: String,
    next: String,
}

/// An execution as the history shows it.
struct ExecutionRow {
    id: String,
    when: String,
    status: &'static str,
    event: String,
    delivery_id: String,
    error: Option<String>,
    /// Why it was skipped.
    skipped: Option<String>,
    payload: Option<String>,
    attempts: Vec<AttemptRow>,
    replayable: bool,
}

impl ExecutionRow {
    fn of(e: Execution) -> ExecutionRow {
        ExecutionRow {
            when: super::when(e.created_at_ms),
            status: match e.status {
                Status::Pending => "pending",
                Status::Finished => "finished",
                Status::Failed => "failed",
                Status::Skipped => "skipped",
            },
            event: e.event.event_type.as_str().to_string(),
            replayable: e.status != Status::Pending && e.body_sealed.is_some(),
            attempts: e
                .attempts
                .into_iter()
                .map(|a| AttemptRow {
                    when: super::when(a.at_ms),
                    status: a.status.map_or("no answer".into(), |s| s.to_string()),
                    latency: format!("{:.0} ms", a.latency_ms),
                    error: a.error.unwrap_or_default(),
                    next: a.next_attempt_at_ms.map(super::when).unwrap_or_default(),
                })
                .collect(),
            payload: e.payload.map(pretty),
            id: e.id.to_string(),
            delivery_id: e.delivery_id.to_string(),
            error: e.error,
            skipped: e
                .skipped
                .map(|s| format!("{}: {}", s.reason.as_str(), s.message)),
        }
    }
}

#[derive(Template)]
#[template(path = "console/automation.html")]
struct AutomationPage {
    nav: Option<Nav>,
    csrf: String,
    title: String,
    base: String,
    admin: bool,
    event: String,
    state: String,
    automation: Automation,
    executions: Vec<ExecutionRow>,
    note: Option<String>,
    /// The status the history shows, lower case; empty for all.
    status: String,
    statuses: &'static [(&'static str, &'static str)],
    history: usize,
}

impl AutomationPage {
    /// Whether the history's filter is set to `value`.
    fn filters(&self, value: &str) -> bool {
        self.status == value
    }
}

/// How many executions the history shows.
const HISTORY: usize = 50;

/// The history's filter: value and label.
const STATUSES: &[(&str, &str)] = &[
    ("", "every execution"),
    ("pending", "pending"),
    ("finished", "finished"),
    ("failed", "failed"),
    ("skipped", "skipped"),
];

/// `?status=` on an automation's page.
#[derive(serde::Deserialize, Default)]
pub struct HistoryFilter {
    #[serde(default)]
    status: String,
}

/// `GET …/automations/{name}`: the automation and its history.
pub async fn show(
    State(app): State<App>,
    viewer: Viewer,
    Path(params): Params,
    axum::extract::Query(filter): axum::extract::Query<HistoryFilter>,
) -> Shown {
    let place = place(&params, &viewer)?;
    let handle = handle(&place, &params).map_err(|e| Failed::new(e, &viewer))?;
    let status = filter.status;
    let shown = History {
        note: None,
        status: &status,
    };
    automation_page(&app, &viewer, &place, &handle.name, shown).await
}

/// What the history part of an automation's page shows.
struct History<'a> {
    /// What was just done.
    note: Option<String>,
    /// Only executions of this status (lower case); empty for all.
    status: &'a str,
}

impl History<'_> {
    /// The full history, under a note.
    fn noted(note: String) -> History<'static> {
        History {
            note: Some(note),
            status: "",
        }
    }
}

async fn automation_page(
    app: &App,
    viewer: &Viewer,
    place: &Place,
    name: &str,
    shown: History<'_>,
) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    let scope = &place.scope;
    let (store, user) = (&app.store, &viewer.user);
    let loaded = async {
        app.access.authorize(user, scope, Role::Member).await?;
        let admin = app.access.authorize(user, scope, Role::Admin).await.is_ok();
        let automation = automations::get(store, scope, name).await?;
        let status = match shown.status {
            "" => None,
            text => Some(outbox::parse_status(text)?),
        };
        let executions = outbox::executions(store, &automation.handle(), HISTORY).await?;
        let executions: Vec<Execution> = executions
            .into_iter()
            .filter(|e| status.is_none_or(|s| e.status == s))
            .collect();
        Ok::<_, Error>((admin, automation, executions))
    };
    let (admin, automation, executions) = loaded.await.map_err(failed)?;
    super::ok(&AutomationPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        title: place.title.clone(),
        base: place.base.clone(),
        admin,
        event: describe_event(&automation.event),
        state: state_of(&automation),
        automation,
        executions: executions.into_iter().map(ExecutionRow::of).collect(),
        note: shown.note,
        status: shown.status.to_ascii_lowercase(),
        statuses: STATUSES,
        history: HISTORY,
    })
}

/// `POST …/executions/{id}/replay`: sends one execution's payload again.
pub async fn replay_one(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    let place = place(&params, viewer)?;
    let replay = async {
        let handle = handle(&place, &params)?;
        let id: ExecutionId = param(&params, "execution")?.into();
        app.access
            .authorize(&viewer.user, &handle.scope, Role::Admin)
            .await?;
        let (_, delivery) = outbox::replay(&app.store, &handle, &id).await?;
        app.dispatcher.send_when_durable(vec![delivery]).await?;
        Ok::<_, Error>((handle.name, id))
    };
    let (name, id) = replay.await.map_err(|e| Failed::new(e, viewer))?;
    let note = format!("Execution {id} is queued again.");
    automation_page(&app, viewer, &place, &name, History::noted(note)).await
}

/// `POST …/automations/{name}/replay`: every failed execution since the
/// chosen time, again.
pub async fn replay_failed(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    let place = place(&params, viewer)?;
    let seconds: u64 = posted.field("since").parse().unwrap_or(3600);
    let since_ms = crate::ids::now_ms().saturating_sub(seconds * 1000);
    let replay = async {
        let handle = handle(&place, &params)?;
        app.access
            .authorize(&viewer.user, &handle.scope, Role::Admin)
            .await?;
        automations::get(&app.store, &handle.scope, &handle.name).await?;
        let (ids, deliveries) = outbox::replay_failed(&app.store, &handle, since_ms).await?;
        app.dispatcher.send_when_durable(deliveries).await?;
        Ok::<_, Error>((handle.name, ids.len()))
    };
    let (name, count) = replay.await.map_err(|e| Failed::new(e, viewer))?;
    let note = format!("{count} failed execution(s) queued again.");
    automation_page(&app, viewer, &place, &name, History::noted(note)).await
}

/// `GET …/automations/{name}/delete`: the confirmation step.
pub async fn confirm_delete(State(app): State<App>, viewer: Viewer, Path(params): Params) -> Shown {
    let place = place(&params, &viewer)?;
    let automation = for_admin(&app, &viewer, &place, &params).await?;
    let name = &automation.name;
    let at = format!("{}/automations/{name}", place.base);
    super::ok(&ConfirmPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        question: format!("Delete automation {name}?"),
        detail: Some("Its execution history goes with it.".into()),
        action: format!("{at}/delete"),
        confirm: format!("Delete {name}"),
        cancel: at,
        force: false,
    })
}

/// `POST …/automations/{name}/delete`.
pub async fn delete(State(app): State<App>, Path(params): Params, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    let place = place(&params, viewer)?;
    let delete = async {
        let handle = handle(&place, &params)?;
        app.access
            .authorize(&viewer.user, &place.scope, Role::Admin)
            .await?;
        automations::delete(&app.store, &place.scope, &handle.name).await?;
        Ok::<_, Error>(handle.name)
    };
    let name = delete.await.map_err(|e| Failed::new(e, viewer))?;
    tracing::info!(scope = %place.scope.describe(), automation = %name, by = %viewer.user.name, "automation deleted");
    Ok(Redirect::to(&format!("{}#automations", place.base)).into_response())
}
