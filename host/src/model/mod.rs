//! The records Switchyard keeps, as plain data: users and keys, teams and
//! registries, projects, secrets, webhooks, automations, artifacts, runs,
//! events, deliveries and executions, usage.
//!
//! Nothing here does I/O or applies a rule. The store persists these types
//! (whatever its engine), the domain modules apply the rules to them, and the
//! HTTP layer shows them; all three depend on this module, and it on none of
//! them.

pub mod access;
pub mod artifact;
pub mod automation;
pub mod delivery;
pub mod event;
pub mod id;
pub mod idempotency;
pub mod plugin;
pub mod run;
pub mod scope;
pub mod team;
pub mod usage;

pub use access::{ApiKey, Group, GroupKind, Member, RateLimits, Role, Session, User};
pub use artifact::{Collection, LabelledVersion, Source, Version};
pub use automation::{
    Action, Automation, EventConfig, Handle, MetricChangeSpec, MetricSpec, MetricZscoreSpec,
    RunFilters, SkipReason, Skipped, State, Throttle, WebhookRef,
};
pub use delivery::{Attempt, Delivery, Execution, SealedBody, Status};
pub use event::{ArtifactRef, Event, EventType, RunRef, WebhookEventRef};
pub use id::{DeliveryId, ExecutionId};
pub use idempotency::Idempotent;
pub use plugin::StoredPlugin;
pub use run::{Run, RunState};
pub use scope::Scope;
pub use team::{
    BreakerSettings, Circuit, Health, Ordering, Project, Secret, Webhook, WebhookAuth, WebhookTls,
};
pub use usage::{Totals, UsageRow};
