//! Automations: an event in a registry or project, bound to a webhook and a
//! payload template.

use serde::{Deserialize, Serialize};

use super::event::EventType;
use super::run::RunState;
use super::scope::Scope;

/// The event that fires an automation, with its event-specific fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum EventConfig {
    /// A new version is created in a collection.
    #[serde(rename = "CREATE_ARTIFACT")]
    CreateArtifact {
        /// When given, the collection's name must match it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        collection_regex: Option<String>,
    },
    /// An alias matching `alias_regex` is added to an artifact version.
    #[serde(rename = "ADD_ARTIFACT_ALIAS")]
    AddArtifactAlias {
        /// Required: the alias must match it.
        alias_regex: String,
    },
    /// An alias matching `alias_regex` moves to an artifact version from
    /// the version that held it.
    #[serde(rename = "UPDATE_ARTIFACT_ALIAS")]
    UpdateArtifactAlias {
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
    /// A run ends in one of `states` (projects only).
    #[serde(rename = "RUN_STATE")]
    RunState {
        /// Which ends count: some of `finished`, `failed`, `crashed`.
        states: Vec<RunState>,
        /// Which runs count.
        #[serde(default)]
        run_filters: RunFilters,
    },
    /// A run metric crosses a threshold (projects only).
    #[serde(rename = "RUN_METRIC_THRESHOLD")]
    RunMetricThreshold {
        /// The condition.
        metric: MetricSpec,
        /// Which runs count.
        #[serde(default)]
        run_filters: RunFilters,
    },
    /// A run metric's recent aggregate moves against the window before it
    /// (projects only).
    #[serde(rename = "RUN_METRIC_CHANGE")]
    RunMetricChange {
        /// The condition.
        metric: MetricChangeSpec,
        /// Which runs count.
        #[serde(default)]
        run_filters: RunFilters,
    },
    /// A team's webhook was switched off (teams only).
    #[serde(rename = "WEBHOOK_DISABLED")]
    WebhookDisabled {},
    /// A delivery to a team's webhook failed for good (teams only).
    #[serde(rename = "DELIVERY_EXHAUSTED")]
    DeliveryExhausted {},
    /// A team's webhook's circuit opened (teams only).
    #[serde(rename = "WEBHOOK_CIRCUIT_OPENED")]
    WebhookCircuitOpened {},
    /// A team's webhook recovered: its circuit closed (teams only).
    #[serde(rename = "WEBHOOK_RECOVERED")]
    WebhookRecovered {},
    /// A run metric's latest value lies far from its recent mean (projects
    /// only).
    #[serde(rename = "RUN_METRIC_ZSCORE")]
    RunMetricZscore {
        /// The condition.
        metric: MetricZscoreSpec,
        /// Which runs count.
        #[serde(default)]
        run_filters: RunFilters,
    },
}

impl EventConfig {
    /// The event type it listens for.
    pub fn event_type(&self) -> EventType {
        match self {
            EventConfig::CreateArtifact { .. } => EventType::CreateArtifact,
            EventConfig::AddArtifactAlias { .. } => EventType::AddArtifactAlias,
            EventConfig::UpdateArtifactAlias { .. } => EventType::UpdateArtifactAlias,
            EventConfig::AddArtifactTag { .. } => EventType::AddArtifactTag,
            EventConfig::LinkArtifact {} => EventType::LinkArtifact,
            EventConfig::RunMetricThreshold { .. } => EventType::RunMetricThreshold,
            EventConfig::RunState { .. } => EventType::RunState,
            EventConfig::RunMetricChange { .. } => EventType::RunMetricChange,
            EventConfig::RunMetricZscore { .. } => EventType::RunMetricZscore,
            EventConfig::WebhookDisabled {} => EventType::WebhookDisabled,
            EventConfig::DeliveryExhausted {} => EventType::DeliveryExhausted,
            EventConfig::WebhookCircuitOpened {} => EventType::WebhookCircuitOpened,
            EventConfig::WebhookRecovered {} => EventType::WebhookRecovered,
        }
    }

    /// The run filters of a run event; `None` for artifact events.
    pub fn run_filters(&self) -> Option<&RunFilters> {
        match self {
            EventConfig::RunState { run_filters, .. }
            | EventConfig::RunMetricThreshold { run_filters, .. }
            | EventConfig::RunMetricChange { run_filters, .. }
            | EventConfig::RunMetricZscore { run_filters, .. } => Some(run_filters),
            _ => None,
        }
    }
}

/// A run-metric threshold: `aggregation(last window values) comparison threshold`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricSpec {
    /// Metric name.
    pub name: String,
    /// How many recent values; 5 unless given.
    #[serde(default = "default_window")]
    pub window: u32,
    /// `average`, `min` or `max`.
    #[serde(default = "default_aggregation")]
    pub aggregation: String,
    /// `>`, `>=`, `<`, `<=`, `==` or `!=`.
    pub comparison: String,
    /// The threshold.
    pub threshold: f64,
}

fn default_window() -> u32 {
    5
}

/// W&B's `RUN_METRIC_CHANGE`: `aggregation(last window values)` against
/// `aggregation(the prior_window values before them)`, as an absolute
/// difference or a fraction of the prior aggregate.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricChangeSpec {
    /// Metric name.
    pub name: String,
    /// `average`, `min` or `max`.
    #[serde(default = "default_aggregation")]
    pub aggregation: String,
    /// How many recent values make the current window; 10 unless given.
    #[serde(default = "default_change_window")]
    pub window: u32,
    /// How many values before them make the prior window; 50 unless given.
    #[serde(default = "default_prior_window")]
    pub prior_window: u32,
    /// `absolute` or `relative` (a fraction: 0.1 is 10%).
    pub change_type: String,
    /// `increase`, `decrease` or `any`; `any` unless given.
    #[serde(default = "default_direction")]
    pub direction: String,
    /// How far it must move; above 0.
    pub amount: f64,
}

/// W&B's `RUN_METRIC_ZSCORE`: the latest value's z-score against the mean
/// and standard deviation of the last `window` values.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricZscoreSpec {
    /// Metric name.
    pub name: String,
    /// How many recent values; 30 unless given.
    #[serde(default = "default_zscore_window")]
    pub window: u32,
    /// `above`, `below` or `any`; `any` unless given.
    #[serde(default = "default_direction")]
    pub direction: String,
    /// How many standard deviations; above 0, 3 unless given.
    #[serde(default = "default_zscore_threshold")]
    pub threshold: f64,
}

fn default_change_window() -> u32 {
    10
}

fn default_prior_window() -> u32 {
    50
}

fn default_zscore_window() -> u32 {
    30
}

fn default_zscore_threshold() -> f64 {
    3.0
}

fn default_direction() -> String {
    "any".into()
}

fn default_aggregation() -> String {
    "average".into()
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

/// A webhook, named by its owning team and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// An automation as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// No firing within this many seconds of the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_s: Option<u64>,
    /// At most this many firings in any 60 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_hour: Option<u32>,
    /// Who last saved it.
    pub updated_by: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds.
    pub updated_at: u64,
}

impl Automation {
    /// Its cooldown and rate limit.
    pub fn throttle(&self) -> Throttle {
        Throttle {
            cooldown_s: self.cooldown_s,
            max_per_hour: self.max_per_hour,
        }
    }

    /// Its place: scope and name.
    pub fn handle(&self) -> Handle {
        Handle {
            scope: self.scope.clone(),
            name: self.name.clone(),
        }
    }
}

/// An automation's place: its scope and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// How often an automation may fire: W&B's cooldown and rate limit. A
/// firing they hold back is recorded as a `Skipped` execution and sends
/// nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttle {
    /// No firing within this many seconds of the last one.
    pub cooldown_s: Option<u64>,
    /// At most this many firings in any 60 minutes.
    pub max_per_hour: Option<u32>,
}

impl Throttle {
    /// Whether it holds anything back.
    pub fn is_set(&self) -> bool {
        self.cooldown_s.is_some() || self.max_per_hour.is_some()
    }
}

/// Why a firing was held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Within `cooldown_s` of the last firing.
    Cooldown,
    /// `max_per_hour` firings in the last hour already.
    RateLimit,
}

impl SkipReason {
    /// `cooldown` or `rate_limit`, as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Cooldown => "cooldown",
            SkipReason::RateLimit => "rate_limit",
        }
    }
}

/// A firing held back, and why, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// `cooldown` or `rate_limit`.
    pub reason: SkipReason,
    /// What the automation did and what its limit is.
    pub message: String,
}
