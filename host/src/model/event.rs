//! Events: what happened in a registry or project, the triggers of
//! automations.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::run::RunState;
use super::scope::Scope;

/// The kinds of event an automation can listen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    /// A new version was created in a collection (logged in a project, or
    /// linked into a registry).
    #[serde(rename = "CREATE_ARTIFACT")]
    CreateArtifact,
    /// An alias was added to an artifact version.
    #[serde(rename = "ADD_ARTIFACT_ALIAS")]
    AddArtifactAlias,
    /// An alias that another version held moved to this one.
    #[serde(rename = "UPDATE_ARTIFACT_ALIAS")]
    UpdateArtifactAlias,
    /// A tag was added to an artifact version.
    #[serde(rename = "ADD_ARTIFACT_TAG")]
    AddArtifactTag,
    /// A project version was linked into a registry collection.
    #[serde(rename = "LINK_ARTIFACT")]
    LinkArtifact,
    /// A run logged a metric.
    #[serde(rename = "RUN_METRIC_THRESHOLD")]
    RunMetricThreshold,
    /// A run ended: finished, failed or crashed.
    #[serde(rename = "RUN_STATE")]
    RunState,
    /// A run logged a metric, for change conditions.
    #[serde(rename = "RUN_METRIC_CHANGE")]
    RunMetricChange,
    /// A run logged a metric, for z-score conditions.
    #[serde(rename = "RUN_METRIC_ZSCORE")]
    RunMetricZscore,
    /// A team's webhook was switched off (it answered 410 Gone, or failed
    /// for its `disable_after_hours`).
    #[serde(rename = "WEBHOOK_DISABLED")]
    WebhookDisabled,
    /// A delivery's last attempt failed: nothing more will be tried.
    #[serde(rename = "DELIVERY_EXHAUSTED")]
    DeliveryExhausted,
    /// A team's webhook's circuit opened.
    #[serde(rename = "WEBHOOK_CIRCUIT_OPENED")]
    WebhookCircuitOpened,
    /// A team's webhook's circuit closed after a successful probe.
    #[serde(rename = "WEBHOOK_RECOVERED")]
    WebhookRecovered,
}

impl EventType {
    /// Every event type.
    pub const ALL: [EventType; 13] = [
        EventType::CreateArtifact,
        EventType::AddArtifactAlias,
        EventType::UpdateArtifactAlias,
        EventType::AddArtifactTag,
        EventType::LinkArtifact,
        EventType::RunMetricThreshold,
        EventType::RunState,
        EventType::RunMetricChange,
        EventType::RunMetricZscore,
        EventType::WebhookDisabled,
        EventType::DeliveryExhausted,
        EventType::WebhookCircuitOpened,
        EventType::WebhookRecovered,
    ];

    /// The event types a logged metric causes, one per kind of condition.
    pub const METRIC: [EventType; 3] = [
        EventType::RunMetricThreshold,
        EventType::RunMetricChange,
        EventType::RunMetricZscore,
    ];

    /// Whether it is about a team's own webhook (and so lives in teams
    /// only).
    pub fn is_operational(self) -> bool {
        matches!(
            self,
            EventType::WebhookDisabled
                | EventType::DeliveryExhausted
                | EventType::WebhookCircuitOpened
                | EventType::WebhookRecovered
        )
    }

    /// Whether it is about a run (and so lives in projects only).
    pub fn is_run(self) -> bool {
        self == EventType::RunState || self.is_metric()
    }

    /// Whether a logged metric causes it.
    pub fn is_metric(self) -> bool {
        EventType::METRIC.contains(&self)
    }

    /// Whether it is about an artifact version.
    pub fn is_artifact(self) -> bool {
        !self.is_run() && !self.is_operational()
    }

    /// The name, as `${event_type}` renders it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::CreateArtifact => "CREATE_ARTIFACT",
            EventType::AddArtifactAlias => "ADD_ARTIFACT_ALIAS",
            EventType::UpdateArtifactAlias => "UPDATE_ARTIFACT_ALIAS",
            EventType::AddArtifactTag => "ADD_ARTIFACT_TAG",
            EventType::LinkArtifact => "LINK_ARTIFACT",
            EventType::RunMetricThreshold => "RUN_METRIC_THRESHOLD",
            EventType::RunState => "RUN_STATE",
            EventType::RunMetricChange => "RUN_METRIC_CHANGE",
            EventType::RunMetricZscore => "RUN_METRIC_ZSCORE",
            EventType::WebhookDisabled => "WEBHOOK_DISABLED",
            EventType::DeliveryExhausted => "DELIVERY_EXHAUSTED",
            EventType::WebhookCircuitOpened => "WEBHOOK_CIRCUIT_OPENED",
            EventType::WebhookRecovered => "WEBHOOK_RECOVERED",
        }
    }

    /// What it means, for the event catalog.
    pub fn description(self) -> &'static str {
        match self {
            EventType::CreateArtifact => {
                "A new version was created in a collection (logged in a project, or linked into a registry)."
            }
            EventType::AddArtifactAlias => "An alias was added to an artifact version.",
            EventType::UpdateArtifactAlias => {
                "An alias that another version held moved to this one."
            }
            EventType::AddArtifactTag => "A tag was added to an artifact version.",
            EventType::LinkArtifact => "A project's version was linked into a registry collection.",
            EventType::RunMetricThreshold => {
                "A run logged a metric that crossed the automation's threshold."
            }
            EventType::RunState => {
                "A run ended in one of the automation's states: finished, failed or crashed."
            }
            EventType::RunMetricChange => {
                "A run's metric changed by the automation's amount between two windows."
            }
            EventType::RunMetricZscore => {
                "A run logged a metric the automation's number of standard deviations from its mean."
            }
            EventType::WebhookDisabled => {
                "A team's webhook was switched off: it answered 410 Gone, or every attempt failed for its disable_after_hours."
            }
            EventType::DeliveryExhausted => {
                "A delivery's last attempt failed: nothing more will be tried."
            }
            EventType::WebhookCircuitOpened => "A team's webhook's circuit opened.",
            EventType::WebhookRecovered => {
                "A team's webhook's circuit closed after a successful probe."
            }
        }
    }

    /// Where automations on it live: `team`, `project`, `registry` or
    /// `collection`.
    pub fn scopes(self) -> &'static [&'static str] {
        if self.is_operational() {
            &["team"]
        } else if self.is_run() {
            &["project"]
        } else {
            &["project", "registry", "collection"]
        }
    }

    /// The event type named `name`.
    pub fn parse(name: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Ordered by time.
    pub id: String,
    /// What happened.
    pub event_type: EventType,
    /// Where it happened.
    pub scope: Scope,
    /// Who did it.
    pub author: String,
    /// Unix milliseconds.
    pub at_ms: u64,
    /// The artifact version involved, when there is one. Shared: an
    /// event is copied into the inbox, each execution and each batch's
    /// events, and the version object was most of what a copy cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Arc<ArtifactRef>>,
    /// The alias added or moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// For a moved alias: the version that held it, as
    /// `artifact_version_string` writes versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_version_string: Option<String>,
    /// The tag added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The run involved, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRef>,
    /// The webhook an operational event is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookEventRef>,
    /// The W3C `traceparent` of the request (or delivery) that caused it:
    /// its matching and deliveries continue that trace, restarts included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// The webhook an operational event is about, and what happened to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookEventRef {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// What failed, in words (empty when it recovered).
    pub failure_reason: String,
    /// The attempts the delivery made (`DELIVERY_EXHAUSTED`), or the
    /// failed attempts that opened the circuit.
    pub attempts: u32,
}

/// The artifact version an event is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// The team or registry that owns the change.
    pub entity: String,
    /// The project that owns the change (empty in a registry).
    pub project: String,
    /// The collection.
    pub collection: String,
    /// `team/project/collection:v3`.
    pub version_string: String,
    /// The version as an object: index, aliases, tags, metadata, …
    pub version: Value,
    /// Its top-level metadata.
    pub metadata: BTreeMap<String, Value>,
}

/// The run a run event is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRef {
    /// The owning team.
    pub team: String,
    /// The project.
    pub project: String,
    /// Run id.
    pub id: String,
    /// Run name.
    pub name: String,
    /// Who created the run.
    pub creator: String,
    /// Its state (for `RUN_STATE`, the one it just took).
    #[serde(default)]
    pub state: RunState,
    /// The metric logged; empty for a state change.
    #[serde(default)]
    pub metric: String,
    /// Its recent values, oldest first (the newest is the one just
    /// logged); empty for a state change.
    #[serde(default)]
    pub values: Vec<f64>,
}
