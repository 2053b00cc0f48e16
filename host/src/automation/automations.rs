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

use serde::{Deserialize, Serialize};
use sled::Transactional;

use super::secret_refs::{self, Rewrite};
use super::{variables, webhooks};
use crate::auth::User;
use crate::error::{Error, Result};
use crate::groups::{Group, Role};
use crate::plugin::input::{FilterSpec, MetricSpec, check_template};
use crate::plugin::{PluginError, Plugins};
use crate::store::{self, Store, keys};
use crate::{ids, names, projects, secrets};

/// The filter plugin every automation uses.
pub const FILTER_PLUGIN: &str = "filter-default";
/// The template plugin used unless an automation names another.
pub const DEFAULT_TEMPLATE_PLUGIN: &str = "template-default";

/// Where an automation listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Scope {
    /// Every collection of a registry, present and future.
    Registry {
        /// The registry's name.
        registry: String,
    },
    /// Every collection and run of a project, present and future.
    Project {
        /// The owning team.
        team: String,
        /// The project's name.
        project: String,
    },
}

impl Scope {
    fn segments(&self) -> Vec<&str> {
        match self {
            Scope::Registry { registry } => vec!["r", registry],
            Scope::Project { team, project } => vec!["p", team, project],
        }
    }

    /// The key prefix of everything under this scope.
    pub fn key(&self, rest: &[&str]) -> keys::Key {
        let mut segments = self.segments();
        segments.extend_from_slice(rest);
        keys::prefix(&segments)
    }

    /// Requires `need` of `user` here: the registry role, or the role in the
    /// project's team. A scope the user cannot see is 404.
    pub fn authorize(&self, store: &Store, user: &User, need: Role) -> Result<()> {
        match self {
            Scope::Registry { registry } => {
                Group::Registry.require(store, user, registry, need)?;
            }
            Scope::Project { team, project } => {
                Group::Team.require(store, user, team, need)?;
                projects::get(store, team, project)?;
            }
        }
        Ok(())
    }

    /// `registry 'x'` or `project 'team/x'`, for messages.
    pub fn describe(&self) -> String {
        match self {
            Scope::Registry { registry } => format!("registry '{registry}'"),
            Scope::Project { team, project } => format!("project '{team}/{project}'"),
        }
    }
}

/// The event that fires an automation, with its event-specific fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum EventConfig {
    /// An alias matching `alias_regex` is added to an artifact version.
    #[serde(rename = "ADD_ARTIFACT_ALIAS")]
    AddArtifactAlias {
        /// Required: the alias must match it.
        alias_regex: String,
    },
    /// A tag is added to an artifact version.
    #[serde(rename = "ADD_ARTIFACT_TAG")]
    AddArtifactTag {
        /// When given, the tag must match it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tag_regex: Option<String>,
    },
    /// An artifact version is linked into a registry collection.
    #[serde(rename = "LINK_ARTIFACT")]
    LinkArtifact {},
    /// A run metric crosses a threshold (projects only).
    #[serde(rename = "RUN_METRIC_THRESHOLD")]
    RunMetricThreshold {
        /// The condition.
        metric: MetricSpec,
        /// Which runs count.
        #[serde(default)]
        run_filters: RunFilters,
    },
}

/// Filters on the run a metric came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunFilters {
    /// Only runs created by this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creator: Option<String>,
    /// Only runs whose name matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_name_regex: Option<String>,
}

impl EventConfig {
    /// The event type, as `${event_type}` renders it.
    pub fn event_type(&self) -> &'static str {
        match self {
            EventConfig::AddArtifactAlias { .. } => "ADD_ARTIFACT_ALIAS",
            EventConfig::AddArtifactTag { .. } => "ADD_ARTIFACT_TAG",
            EventConfig::LinkArtifact {} => "LINK_ARTIFACT",
            EventConfig::RunMetricThreshold { .. } => "RUN_METRIC_THRESHOLD",
        }
    }

    /// What the filter plugin checks.
    pub fn filter(&self) -> FilterSpec {
        match self {
            EventConfig::AddArtifactAlias { alias_regex } => FilterSpec {
                alias_regex: Some(alias_regex.clone()),
                ..FilterSpec::default()
            },
            EventConfig::AddArtifactTag { tag_regex } => FilterSpec {
                tag_regex: tag_regex.clone(),
                ..FilterSpec::default()
            },
            EventConfig::LinkArtifact {} => FilterSpec::default(),
            EventConfig::RunMetricThreshold {
                metric,
                run_filters,
            } => FilterSpec {
                run_creator: run_filters.creator.clone(),
                run_name_regex: run_filters.run_name_regex.clone(),
                metric: Some(metric.clone()),
                ..FilterSpec::default()
            },
        }
    }
}

/// A webhook, named by its owning team and its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookRef {
    /// The team that owns the webhook.
    pub team: String,
    /// The webhook's name.
    pub name: String,
}

/// What an automation does; the spec has one action type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// POST the rendered payload to the webhook.
    Webhooks,
}

/// Whether an automation fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Fires on every matching event.
    Active,
    /// Does not fire; `disabled_reason` says why. Saving it again re-validates
    /// and reactivates it.
    Disabled,
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
}

/// An automation as stored and shown.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Automation {
    /// Unique within the scope.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Where it listens.
    pub scope: Scope,
    /// The triggering event.
    pub event: EventConfig,
    /// The webhook it calls.
    pub webhook: WebhookRef,
    /// Always `Webhooks`.
    pub action: Action,
    /// The payload template.
    pub payload: Option<String>,
    /// The payload-template plugin.
    pub template_plugin: String,
    /// `active` or `disabled`.
    pub state: State,
    /// Why it is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Who last saved it.
    pub updated_by: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds.
    pub updated_at: u64,
}

/// An automation's place: its scope and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handle {
    /// Where it listens.
    pub scope: Scope,
    /// Its name.
    pub name: String,
}

impl Handle {
    /// `registry 'x' automation 'y'`, for messages.
    pub fn describe(&self) -> String {
        format!("{} automation '{}'", self.scope.describe(), self.name)
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
    if matches!(def.event, EventConfig::RunMetricThreshold { .. })
        && matches!(scope, Scope::Registry { .. })
    {
        return Err(Error::invalid(
            "event.type",
            "RUN_METRIC_THRESHOLD automations listen to runs, which live in projects; create it on a project instead",
        ));
    }
    let webhook = usable_webhook(store, user, &def.webhook)?;
    if let EventConfig::RunMetricThreshold { metric, .. } = &def.event
        && metric.window as usize > crate::runs::MAX_WINDOW
    {
        return Err(Error::invalid(
            "event.metric.window",
            format!("window is at most {} values", crate::runs::MAX_WINDOW),
        ));
    }
    let filter = def
        .event
        .filter()
        .to_wit()
        .map_err(|m| Error::invalid("event", m))?;
    plugins
        .validate_filter(FILTER_PLUGIN, filter)
        .await
        .map_err(|e| plugin_input_error("event", e))?;
    if let Some(payload) = &def.payload {
        check_payload(store, plugins, def, &webhook, payload).await?;
    }
    Ok(())
}

/// The webhook, if `user` may use it: they must belong to its team. Both a
/// missing webhook and a foreign team read the same, so nothing leaks.
fn usable_webhook(store: &Store, user: &User, wh: &WebhookRef) -> Result<webhooks::Webhook> {
    let missing = || {
        Error::invalid(
            "webhook",
            format!(
                "no webhook '{}' in a team '{}' you belong to; GET /v1/teams/{}/webhooks lists them",
                wh.name, wh.team, wh.team
            ),
        )
    };
    Group::Team
        .require(store, user, &wh.team, Role::Member)
        .map_err(|_| missing())?;
    webhooks::get(store, &wh.team, &wh.name).map_err(|_| missing())
}

async fn check_payload(
    store: &Store,
    plugins: &Arc<Plugins>,
    def: &Definition,
    webhook: &webhooks::Webhook,
    payload: &str,
) -> Result<()> {
    check_template(payload).map_err(|m| Error::invalid("payload", m))?;
    let known = variables::known(
        &webhook.secret_names(),
        webhook.access_token_secret.is_some(),
    );
    // `$NAME` secret references become `${NAME}` variables, as at send time.
    let mut carried: std::collections::BTreeMap<String, String> = webhook
        .secret_names()
        .into_iter()
        .map(|n| (n.to_string(), String::new()))
        .collect();
    if webhook.access_token_secret.is_some() {
        carried.insert(variables::ACCESS_TOKEN.to_string(), String::new());
    }
    let is_team_secret = |name: &str| secrets::exists(store, &def.webhook.team, name);
    let payload = &secret_refs::resolve(
        payload,
        &webhook.name,
        &carried,
        is_team_secret,
        Rewrite::Variable,
    )?
    .map_err(|e| Error::invalid("payload", e.to_string()))?;
    let plugin = def
        .template_plugin
        .as_deref()
        .unwrap_or(DEFAULT_TEMPLATE_PLUGIN);
    let Err(e) = plugins
        .validate_template(plugin, payload.to_string(), known)
        .await
    else {
        return Ok(());
    };
    if let PluginError::NotLoaded { .. } = e {
        return Err(Error::invalid("template_plugin", e.to_string()));
    }
    // An unknown variable that names another of the team's secrets gets a
    // precise message: the webhook has to carry it.
    if let Some(name) = unknown_variable(&e, payload)
        && secrets::exists(store, &def.webhook.team, name)?
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
    Err(plugin_input_error("payload", e))
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

/// A plugin's complaint about client input is a 400 on `field`; a plugin
/// failure stays what it is.
fn plugin_input_error(field: &str, e: PluginError) -> Error {
    match e {
        PluginError::Reported { .. } => Error::invalid(field, e.to_string()),
        e => e.into(),
    }
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
        updated_by: user.name.clone(),
        created_at,
        updated_at: ids::now(),
    }
}

/// Saves a checked definition as a new automation.
pub fn create(store: &Store, scope: &Scope, def: Definition, user: &User) -> Result<Automation> {
    let automation = record(scope, def, user, ids::now());
    write(store, None, &automation)?;
    Ok(automation)
}

/// Replaces automation `name` with a checked definition; a different name in
/// the definition renames it.
pub fn update(
    store: &Store,
    scope: &Scope,
    name: &str,
    def: Definition,
    user: &User,
) -> Result<Automation> {
    let old = get(store, scope, name)?;
    let automation = record(scope, def, user, old.created_at);
    write(store, Some(&old), &automation)?;
    Ok(automation)
}

/// One automation.
pub fn get(store: &Store, scope: &Scope, name: &str) -> Result<Automation> {
    store::get_json(&store.trees.automations, scope.key(&[name]))?.ok_or_else(|| {
        Error::NotFound(format!(
            "{} has no automation named '{name}'",
            scope.describe()
        ))
    })
}

/// The scope's automations, by name.
pub fn list(store: &Store, scope: &Scope) -> Result<Vec<Automation>> {
    Ok(store::scan_json(&store.trees.automations, scope.key(&[]))?)
}

/// The active automations in `scope` listening for `event_type`, by index.
pub fn triggered(store: &Store, scope: &Scope, event_type: &str) -> Result<Vec<Automation>> {
    let mut out = Vec::new();
    for key in store
        .trees
        .automation_triggers
        .scan_prefix(scope.key(&[event_type]))
        .keys()
    {
        let key = key.map_err(anyhow::Error::from)?;
        let name = last_segment(&key);
        if let Ok(automation) = get(store, scope, name)
            && automation.state == State::Active
        {
            out.push(automation);
        }
    }
    Ok(out)
}

/// Whether any automation in `scope` listens for `event_type`.
pub fn listens(store: &Store, scope: &Scope, event_type: &str) -> Result<bool> {
    Ok(store
        .trees
        .automation_triggers
        .scan_prefix(scope.key(&[event_type]))
        .next()
        .is_some())
}

/// The last text segment of a key.
fn last_segment(key: &[u8]) -> &str {
    let body = &key[..key.len().saturating_sub(1)];
    let start = body.iter().rposition(|b| *b == 0).map_or(0, |i| i + 1);
    std::str::from_utf8(&body[start..]).unwrap_or("")
}

/// Deletes an automation and its index entries.
pub fn delete(store: &Store, scope: &Scope, name: &str) -> Result<()> {
    let old = get(store, scope, name)?;
    let t = &store.trees;
    (
        &t.automations,
        &t.automation_triggers,
        &t.webhook_automations,
    )
        .transaction(|(all, triggers, by_webhook)| {
            all.remove(scope.key(&[name]).as_ref())?;
            triggers.remove(trigger_key(&old).as_ref())?;
            by_webhook.remove(webhook_key(&old).as_ref())?;
            Ok(())
        })
        .map_err(|e: sled::transaction::TransactionError| {
            anyhow::anyhow!("deleting automation: {e}")
        })?;
    Ok(())
}

/// Deletes every automation in a scope (the scope itself is going away).
pub fn delete_scope(store: &Store, scope: &Scope) -> Result<()> {
    for automation in list(store, scope)? {
        delete(store, scope, &automation.name)?;
    }
    Ok(())
}

/// The automations that call webhook `team/name`.
pub fn using_webhook(store: &Store, team: &str, name: &str) -> Result<Vec<Handle>> {
    Ok(store::scan_json(
        &store.trees.webhook_automations,
        keys::prefix(&[team, name]),
    )?)
}

/// Disables the automations that call webhook `team/name`, saying why.
pub fn disable_for_webhook(store: &Store, team: &str, name: &str, reason: &str) -> Result<()> {
    for handle in using_webhook(store, team, name)? {
        let Ok(mut automation) = get(store, &handle.scope, &handle.name) else {
            continue;
        };
        automation.state = State::Disabled;
        automation.disabled_reason = Some(reason.to_string());
        store
            .trees
            .automations
            .insert(
                handle.scope.key(&[&handle.name]),
                store::to_json(&automation)?,
            )
            .map_err(anyhow::Error::from)?;
    }
    Ok(())
}

fn trigger_key(a: &Automation) -> keys::Key {
    a.scope.key(&[a.event.event_type(), &a.name])
}

fn webhook_key(a: &Automation) -> keys::Key {
    let mut segments = vec![a.webhook.team.as_str(), a.webhook.name.as_str()];
    segments.extend(a.scope.segments());
    segments.push(&a.name);
    keys::prefix(&segments)
}

/// Writes `new` (replacing `old`) and both indexes in one transaction;
/// refuses a name already taken in the scope.
fn write(store: &Store, old: Option<&Automation>, new: &Automation) -> Result<()> {
    let value = store::to_json(new)?;
    let handle = store::to_json(&Handle {
        scope: new.scope.clone(),
        name: new.name.clone(),
    })?;
    let new_key = new.scope.key(&[&new.name]);
    let renamed = old.is_none_or(|o| o.name != new.name);
    let t = &store.trees;
    let written = (
        &t.automations,
        &t.automation_triggers,
        &t.webhook_automations,
    )
        .transaction(|(all, triggers, by_webhook)| {
            if renamed && all.get(new_key.as_ref())?.is_some() {
                return Ok(false);
            }
            if let Some(old) = old {
                all.remove(old.scope.key(&[&old.name]).as_ref())?;
                triggers.remove(trigger_key(old).as_ref())?;
                by_webhook.remove(webhook_key(old).as_ref())?;
            }
            all.insert(new_key.as_ref(), value.as_slice())?;
            triggers.insert(trigger_key(new).as_ref(), &[] as &[u8])?;
            by_webhook.insert(webhook_key(new).as_ref(), handle.as_slice())?;
            Ok(true)
        })
        .map_err(|e: sled::transaction::TransactionError| {
            anyhow::anyhow!("saving automation: {e}")
        })?;
    if !written {
        return Err(Error::Conflict(format!(
            "{} already has an automation named '{}'",
            new.scope.describe(),
            new.name
        )));
    }
    Ok(())
}
