//! Automations: an event in a registry or project, bound to a webhook and a
//! payload template.
//!
//! A definition is checked before it is saved: its filter through the filter
//! plugin (regexes, metric condition), its template through the template
//! plugin (syntax, unknown variables, with line and column), and every secret
//! the template names must be one the webhook carries. An automation is kept
//! with two indexes, written in the same transaction: by trigger (scope and
//! event type), for matching events, and by webhook, for naming dependants.

use std::sync::Arc;

use serde::Deserialize;

use super::secret_refs::{self, Rewrite};
use super::throttle::{self, Throttle};
use super::{variables, webhooks};
use crate::domain::auth::User;
use crate::domain::groups::{self, GroupKind, Role};
use crate::domain::{artifacts, names, secrets};
use crate::error::{Error, Result};
use crate::ids;
pub use crate::model::{
    Action, Automation, Event, EventConfig, EventType, Handle, RunFilters, RunState, Scope, State,
    WebhookRef,
};
use crate::plugin::Variable;
use crate::plugin::{FilterSpec, MetricTest, check_template};
use crate::plugin::{Kind, Plugin, PluginError, Plugins};
use crate::store::{Store, Transaction};

/// The filter plugin every automation uses.
pub const FILTER_PLUGIN: &str = "filter-default";
/// The template plugin used unless an automation names another.
pub const DEFAULT_TEMPLATE_PLUGIN: &str = "template-default";

impl EventConfig {
    /// What the filter plugin checks.
    pub fn filter(&self) -> FilterSpec {
        match self {
            EventConfig::AddArtifactAlias { alias_regex }
            | EventConfig::UpdateArtifactAlias { alias_regex } => FilterSpec {
                alias_regex: Some(alias_regex.clone()),
                ..FilterSpec::default()
            },
            EventConfig::AddArtifactTag { tag_regex } => FilterSpec {
                tag_regex: tag_regex.clone(),
                ..FilterSpec::default()
            },
            EventConfig::LinkArtifact {}
            | EventConfig::WebhookDisabled {}
            | EventConfig::DeliveryExhausted {}
            | EventConfig::WebhookCircuitOpened {}
            | EventConfig::WebhookRecovered {} => FilterSpec::default(),
            EventConfig::CreateArtifact { collection_regex } => FilterSpec {
                collection_regex: collection_regex.clone(),
                ..FilterSpec::default()
            },
            EventConfig::RunMetricThreshold { .. }
            | EventConfig::RunMetricChange { .. }
            | EventConfig::RunMetricZscore { .. }
            | EventConfig::RunState { .. } => {
                let run_filters = self.run_filters().cloned().unwrap_or_default();
                FilterSpec {
                    run_creator: run_filters.creator,
                    run_name_regex: run_filters.run_name_regex,
                    metric: self.metric(),
                    ..FilterSpec::default()
                }
            }
        }
    }

    /// The run-metric condition, for run-metric events.
    pub fn metric(&self) -> Option<MetricTest> {
        match self {
            EventConfig::RunMetricThreshold { metric, .. } => {
                Some(MetricTest::Threshold(metric.clone()))
            }
            EventConfig::RunMetricChange { metric, .. } => Some(MetricTest::Change(metric.clone())),
            EventConfig::RunMetricZscore { metric, .. } => Some(MetricTest::Zscore(metric.clone())),
            _ => None,
        }
    }

    /// Whether `event` is one this listens for, beyond its type: for
    /// `RUN_STATE`, a state it names. Part of the trigger, like the type,
    /// so checked before the filter plugin sees the event.
    pub fn accepts(&self, event: &Event) -> bool {
        match self {
            EventConfig::RunState { states, .. } => event
                .run
                .as_ref()
                .is_some_and(|run| states.contains(&run.state)),
            _ => true,
        }
    }
}

/// The run states a `RUN_STATE` automation may name: `killed` never fires,
/// as in W&B, and `running` is where every run starts.
pub const ENDING_STATES: [RunState; 3] = [RunState::Finished, RunState::Failed, RunState::Crashed];

/// Refuses a `RUN_STATE` automation's `states` unless some of
/// [`ENDING_STATES`], each once.
fn check_states(states: &[RunState]) -> Result<()> {
    let names: Vec<&str> = ENDING_STATES.iter().map(|s| s.as_str()).collect();
    let wrong = states.iter().find(|s| !ENDING_STATES.contains(s));
    let repeated = (1..states.len()).any(|i| states[..i].contains(&states[i]));
    if states.is_empty() || wrong.is_some() || repeated {
        let why = match wrong {
            Some(RunState::Killed) => "'killed' never fires an automation, as in W&B; ".to_string(),
            Some(other) => format!("'{other}' is where a run is, not how it ends; "),
            None if repeated => "a state is named twice; ".to_string(),
            None => String::new(),
        };
        return Err(Error::invalid(
            "event.states",
            format!("{why}list one or more of {}", names.join(", ")),
        ));
    }
    Ok(())
}

/// What a client sends to create or replace an automation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    /// Unique within the scope.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// The triggering event.
    pub event: EventConfig,
    /// The webhook to call.
    pub webhook: WebhookRef,
    /// Always `Webhooks`.
    pub action: Action,
    /// The payload template; when absent, deliveries carry every variable.
    #[serde(default)]
    pub payload: Option<String>,
    /// The payload-template plugin; `template-default` unless given.
    #[serde(default)]
    pub template_plugin: Option<String>,
    /// No firing within this many seconds of the last one.
    #[serde(default)]
    pub cooldown_s: Option<u64>,
    /// At most this many firings in any 60 minutes.
    #[serde(default)]
    pub max_per_hour: Option<u32>,
}

impl Definition {
    fn throttle(&self) -> Throttle {
        Throttle {
            cooldown_s: self.cooldown_s,
            max_per_hour: self.max_per_hour,
        }
    }
}

/// Checks a definition for `scope`, as `user` would save it.
pub async fn check(
    store: &Store,
    plugins: &Arc<Plugins>,
    user: &User,
    scope: &Scope,
    def: &Definition,
) -> Result<()> {
    names::validate("name", &def.name)?;
    names::validate_text("description", &def.description)?;
    throttle::check(&def.throttle())?;
    let event_type = def.event.event_type();
    if event_type.is_run() && !matches!(scope, Scope::Project { .. }) {
        return Err(Error::invalid(
            "event.type",
            format!(
                "{event_type} automations listen to runs, which live in projects; create it on a project instead"
            ),
        ));
    }
    let in_team = matches!(scope, Scope::Team { .. });
    if event_type.is_operational() != in_team {
        let why = match in_team {
            true => format!(
                "a team's automations listen for what happens to its webhooks (WEBHOOK_DISABLED, DELIVERY_EXHAUSTED, WEBHOOK_CIRCUIT_OPENED, WEBHOOK_RECOVERED), not {event_type}; create it on a project or registry"
            ),
            false => format!(
                "{event_type} is about the team's own webhooks; create it on the team: POST /v1/teams/{{team}}/automations"
            ),
        };
        return Err(Error::invalid("event.type", why));
    }
    if let EventConfig::RunState { states, .. } = &def.event {
        check_states(states)?;
    }
    if let Scope::Collection { collection, .. } = scope {
        artifacts::collection(store, &scope.parent(), collection).await?;
    }
    let webhook = usable_webhook(store, user, &def.webhook).await?;
    check_windows(&def.event)?;
    check_plugins(store, plugins, def, &webhook, None).await
}

/// Refuses a metric condition that needs more values than a run keeps.
fn check_windows(event: &EventConfig) -> Result<()> {
    let (field, needed) = match event {
        EventConfig::RunMetricThreshold { metric, .. } => ("window", metric.window),
        EventConfig::RunMetricChange { metric, .. } => (
            "window + prior_window",
            metric.window.saturating_add(metric.prior_window),
        ),
        EventConfig::RunMetricZscore { metric, .. } => ("window", metric.window),
        _ => return Ok(()),
    };
    let kept = crate::domain::runs::MAX_WINDOW;
    if needed as usize > kept {
        return Err(Error::invalid(
            "event.metric.window",
            format!("{field} is {needed}; a run keeps its last {kept} values of a metric"),
        ));
    }
    Ok(())
}

/// What the plugins say of a definition: its filter, and its payload
/// template. With `swap`, as if that plugin replaced the loaded one of its
/// name.
async fn check_plugins(
    store: &Store,
    plugins: &Arc<Plugins>,
    def: &Definition,
    webhook: &webhooks::Webhook,
    swap: Option<&Arc<Plugin>>,
) -> Result<()> {
    let filter = def.event.filter();
    filter.check().map_err(|m| Error::invalid("event", m))?;
    let plugin = pick(plugins, FILTER_PLUGIN, Kind::EventFilter, swap)
        .map_err(|e| e.on_input(Some("event"), None))?;
    plugins
        .validate_filter_on(plugin, &def.webhook.team, filter)
        .await
        .map_err(|e| e.on_input(Some("event"), None))?;
    if let Some(payload) = &def.payload {
        check_payload(store, plugins, def, webhook, payload, swap).await?;
    }
    Ok(())
}

/// The plugin `name` of `kind`: `swap` if it is that one, else the loaded one.
fn pick(
    plugins: &Plugins,
    name: &str,
    kind: Kind,
    swap: Option<&Arc<Plugin>>,
) -> std::result::Result<Arc<Plugin>, PluginError> {
    match swap {
        Some(plugin) if plugin.name == name && plugin.kind == kind => Ok(plugin.clone()),
        _ => plugins.get_kind(name, kind),
    }
}

/// Whether `automation` calls plugin `name` of `kind`.
fn uses(automation: &Automation, name: &str, kind: Kind) -> bool {
    match kind {
        Kind::PayloadTemplate => automation.template_plugin == name,
        Kind::EventFilter => name == FILTER_PLUGIN,
        Kind::ModelBackend => false,
    }
}

/// The automations that call plugin `name` of `kind`.
pub async fn using_plugin(store: &Store, name: &str, kind: Kind) -> Result<Vec<Automation>> {
    let all = store.all_automations().await?;
    Ok(all.into_iter().filter(|a| uses(a, name, kind)).collect())
}

/// The saved automations that `replacement` would break if it replaced the
/// loaded plugin of its name, each with why: every one that calls it is
/// checked again with it.
pub async fn broken_by(
    store: &Store,
    plugins: &Arc<Plugins>,
    replacement: &Arc<Plugin>,
) -> Result<Vec<(Handle, String)>> {
    let mut broken = Vec::new();
    for automation in using_plugin(store, &replacement.name, replacement.kind).await? {
        let Ok(webhook) =
            webhooks::get(store, &automation.webhook.team, &automation.webhook.name).await
        else {
            continue; // already failing for want of its webhook
        };
        let def = Definition {
            name: automation.name.clone(),
            description: automation.description.clone(),
            event: automation.event.clone(),
            webhook: automation.webhook.clone(),
            action: automation.action,
            payload: automation.payload.clone(),
            template_plugin: Some(automation.template_plugin.clone()),
            cooldown_s: automation.cooldown_s,
            max_per_hour: automation.max_per_hour,
        };
        if let Err(e) = check_plugins(store, plugins, &def, &webhook, Some(replacement)).await {
            broken.push((automation.handle(), e.to_string()));
        }
    }
    Ok(broken)
}

/// The webhook, if `user` may use it: they must belong to its team. Both a
/// missing webhook and a foreign team read the same, so nothing leaks.
async fn usable_webhook(store: &Store, user: &User, wh: &WebhookRef) -> Result<webhooks::Webhook> {
    let missing = || {
        Error::invalid(
            "webhook",
            format!(
                "no webhook '{}' in a team '{}' you belong to; GET /v1/teams/{}/webhooks lists them",
                wh.name, wh.team, wh.team
            ),
        )
    };
    groups::require(store, GroupKind::Team, user, &wh.team, Role::Member)
        .await
        .map_err(|_| missing())?;
    webhooks::get(store, &wh.team, &wh.name)
        .await
        .map_err(|_| missing())
}

async fn check_payload(
    store: &Store,
    plugins: &Arc<Plugins>,
    def: &Definition,
    webhook: &webhooks::Webhook,
    payload: &str,
    swap: Option<&Arc<Plugin>>,
) -> Result<()> {
    check_template(payload).map_err(|m| Error::invalid("payload", m))?;
    let known = variables::known(
        &webhook.secret_names(),
        webhook.access_token_secret.is_some(),
    );
    let payload = &with_secret_variables(store, def, webhook, payload).await?;
    let plugin = def
        .template_plugin
        .as_deref()
        .unwrap_or(DEFAULT_TEMPLATE_PLUGIN);
    let validated = match pick(plugins, plugin, Kind::PayloadTemplate, swap) {
        Ok(plugin) => {
            plugins
                .validate_template_on(plugin, &def.webhook.team, payload.to_string(), known)
                .await
        }
        Err(e) => Err(e),
    };
    let Err(e) = validated else {
        return Ok(());
    };
    if let PluginError::NotLoaded { .. } = e {
        return Err(Error::invalid("template_plugin", e.to_string()));
    }
    // An unknown variable that names another of the team's secrets gets a
    // precise message: the webhook has to carry it.
    if let Some(name) = unknown_variable(&e, payload)
        && secrets::exists(store, &def.webhook.team, name).await?
    {
        return Err(Error::invalid(
            "payload",
            format!(
                "the payload uses ${{{name}}}, a secret of team '{}' that webhook '{}' does not carry; \
                 set it as the webhook's access_token_secret or signing_secret, or remove the reference",
                def.webhook.team, webhook.name
            ),
        ));
    }
    Err(e.on_input(Some("payload"), Some(payload)))
}

/// `payload` with its `$NAME` secret references as `${NAME}` variables, as
/// at send time; a reference to a secret the webhook does not carry is an
/// error.
async fn with_secret_variables(
    store: &Store,
    def: &Definition,
    webhook: &webhooks::Webhook,
    payload: &str,
) -> Result<String> {
    let mut carried: std::collections::BTreeMap<String, String> = webhook
        .secret_names()
        .into_iter()
        .map(|n| (n.to_string(), String::new()))
        .collect();
    if webhook.access_token_secret.is_some() {
        carried.insert(variables::ACCESS_TOKEN.to_string(), String::new());
    }
    secret_refs::resolve_in_team(
        store,
        &def.webhook.team,
        payload,
        &webhook.name,
        &carried,
        Rewrite::Variable,
    )
    .await?
    .map_err(|e| Error::invalid("payload", e.to_string()))
}

/// The payload `def` would send for a sample event of its type: checked as
/// saving would check it, then rendered by its template plugin, with every
/// secret shown as `[REDACTED]` (as the history shows them).
pub async fn preview(
    store: &Store,
    plugins: &Arc<Plugins>,
    user: &User,
    scope: &Scope,
    def: &Definition,
) -> Result<String> {
    check(store, plugins, user, scope, def).await?;
    let webhook = usable_webhook(store, user, &def.webhook).await?;
    let mut vars = variables::sample(scope, def.event.event_type(), &user.name);
    let Some(payload) = &def.payload else {
        return Ok(serde_json::to_string_pretty(&vars).unwrap_or_default());
    };
    let template = with_secret_variables(store, def, &webhook, payload).await?;
    for name in webhook.secret_names() {
        vars.insert(name.to_string(), serde_json::json!("[REDACTED]"));
    }
    if webhook.access_token_secret.is_some() {
        vars.insert(
            variables::ACCESS_TOKEN.into(),
            serde_json::json!("[REDACTED]"),
        );
    }
    let vars = vars
        .into_iter()
        .map(|(name, value)| Variable {
            name,
            value: value.to_string(),
        })
        .collect();
    let plugin = def
        .template_plugin
        .as_deref()
        .unwrap_or(DEFAULT_TEMPLATE_PLUGIN);
    plugins
        .render(plugin, &def.webhook.team, template, vars)
        .await
        .map_err(|e| e.on_input(Some("payload"), Some(payload)))
}

/// The name of the variable an `unknown-variable` error points at.
fn unknown_variable<'a>(e: &PluginError, payload: &'a str) -> Option<&'a str> {
    let PluginError::Reported {
        code,
        position: Some(at),
        ..
    } = e
    else {
        return None;
    };
    if code != "unknown-variable" {
        return None;
    }
    let rest = payload.get(*at as usize..)?.strip_prefix("${")?;
    rest.split('}').next()
}

fn record(scope: &Scope, def: Definition, user: &User, created_at: u64) -> Automation {
    Automation {
        name: def.name,
        description: def.description,
        scope: scope.clone(),
        event: def.event,
        webhook: def.webhook,
        action: def.action,
        payload: def.payload,
        template_plugin: def
            .template_plugin
            .unwrap_or_else(|| DEFAULT_TEMPLATE_PLUGIN.to_string()),
        state: State::Active,
        disabled_reason: None,
        cooldown_s: def.cooldown_s,
        max_per_hour: def.max_per_hour,
        updated_by: user.name.clone(),
        created_at,
        updated_at: ids::now(),
    }
}

fn name_taken(a: &Automation) -> Error {
    Error::Conflict(format!(
        "{} already has an automation named '{}'",
        a.scope.describe(),
        a.name
    ))
}

/// Saves a checked definition as a new automation.
pub async fn create(
    store: &Store,
    scope: &Scope,
    def: Definition,
    user: &User,
) -> Result<Automation> {
    let automation = record(scope, def, user, ids::now());
    if !store.save_automation(None, &automation).await? {
        return Err(name_taken(&automation));
    }
    Ok(automation)
}

/// Replaces automation `name` with a checked definition; a different name in
/// the definition renames it.
pub async fn update(
    store: &Store,
    scope: &Scope,
    name: &str,
    def: Definition,
    user: &User,
) -> Result<Automation> {
    let tx = store.begin().await?;
    let old = tx
        .automation(scope, name)
        .await?
        .ok_or_else(|| not_found(scope, name))?;
    let automation = record(scope, def, user, old.created_at);
    if !tx.save_automation(Some(name), &automation).await? {
        return Err(name_taken(&automation));
    }
    tx.commit().await?;
    Ok(automation)
}

fn not_found(scope: &Scope, name: &str) -> Error {
    Error::NotFound(format!(
        "{} has no automation named '{name}'",
        scope.describe()
    ))
}

/// One automation.
pub async fn get(store: &Store, scope: &Scope, name: &str) -> Result<Automation> {
    let found = store.automation(scope, name).await?;
    found.ok_or_else(|| not_found(scope, name))
}

/// The scope's automations, by name.
pub async fn list(store: &Store, scope: &Scope) -> Result<Vec<Automation>> {
    Ok(store.automations(scope).await?)
}

/// Deletes an automation and its index entries.
pub async fn delete(store: &Store, scope: &Scope, name: &str) -> Result<()> {
    let deleted = store.delete_automation(scope, name).await?;
    deleted.then_some(()).ok_or_else(|| not_found(scope, name))
}

/// Deletes every automation in a scope (the scope itself is going away).
pub async fn delete_scope(store: &Store, scope: &Scope) -> Result<()> {
    for automation in list(store, scope).await? {
        store.delete_automation(scope, &automation.name).await?;
    }
    Ok(())
}

/// Deletes webhook `team/name`. One that automations call is refused,
/// naming them, unless `force`, which disables them first.
pub async fn delete_webhook(store: &Store, team: &str, name: &str, force: bool) -> Result<()> {
    webhooks::get(store, team, name).await?;
    let users = using_webhook(store, team, name).await?;
    if !users.is_empty() && !force {
        let names: Vec<String> = users.iter().map(|h| h.describe()).collect();
        return Err(Error::Conflict(format!(
            "webhook '{name}' is used by {}; change them first, or delete anyway with ?force=true (they will be disabled)",
            names.join(", ")
        )));
    }
    let reason = format!("its webhook '{team}/{name}' was deleted");
    disable_for_webhook(store, team, name, &reason).await?;
    webhooks::delete(store, team, name).await
}

/// The automations that call webhook `team/name`.
pub async fn using_webhook(store: &Store, team: &str, name: &str) -> Result<Vec<Handle>> {
    Ok(store.automations_using(team, name).await?)
}

/// Disables the automations that call webhook `team/name`, saying why.
pub async fn disable_for_webhook(
    store: &Store,
    team: &str,
    name: &str,
    reason: &str,
) -> Result<()> {
    let handles = store.automations_using(team, name).await?;
    disable(store, &handles, reason).await
}

/// Deletes collection `name` of `scope` with its versions, aliases and
/// tags. The automations on that collection alone are disabled, saying
/// why, in the same transaction, as when their webhook is deleted.
pub async fn delete_collection(store: &Store, scope: &Scope, name: &str) -> Result<()> {
    artifacts::collection(store, scope, name).await?;
    let on_it = list(store, &Scope::collection(scope, name)).await?;
    let handles: Vec<Handle> = on_it.iter().map(Automation::handle).collect();
    let reason = format!("its collection '{name}' was deleted");
    let tx = store.begin().await?;
    if !tx.delete_collection(scope, name).await? {
        return Err(Error::NotFound(format!(
            "{} has no collection '{name}'",
            scope.describe()
        )));
    }
    mark_disabled(&*tx, &handles, &reason).await?;
    tx.commit().await?;
    Ok(())
}

/// Disables automations, saying why; saving one again re-validates it and
/// makes it active.
pub async fn disable(store: &Store, handles: &[Handle], reason: &str) -> Result<()> {
    let tx = store.begin().await?;
    mark_disabled(&*tx, handles, reason).await?;
    tx.commit().await?;
    Ok(())
}

/// [`disable`] inside a transaction.
async fn mark_disabled(tx: &dyn Transaction, handles: &[Handle], reason: &str) -> Result<()> {
    for handle in handles {
        let Some(mut automation) = tx.automation(&handle.scope, &handle.name).await? else {
            continue;
        };
        automation.state = State::Disabled;
        automation.disabled_reason = Some(reason.to_string());
        tx.save_automation(Some(&handle.name), &automation).await?;
    }
    Ok(())
}
