//! What the product's users act on, beside automations: accounts and keys,
//! teams and registries with their roles, projects, secrets, artifacts and
//! runs (the event sources), and uploaded plugins.
//!
//! Every rule lives here once, for the API and the console alike: who may
//! do what ([`access::Access::authorize`], over [`groups::require`]), what a valid name is ([`names`]), and
//! what each action writes to the store, in one transaction. An action that
//! causes events hands them on itself, once they are committed, through
//! [`Matching`]: no caller can forget to.

pub mod access;
pub mod artifacts;
pub mod auth;
pub mod groups;
pub mod idempotency;
pub mod names;
pub mod projects;
pub mod runs;
pub mod seal;
pub mod secrets;

/// Where an action hands the events it committed: automation matching
/// (`automation::matcher::Matcher`). It returns once the deliveries the
/// events caused are durable, so the action's answer means they will go.
#[async_trait::async_trait]
pub trait Matching: Send + Sync {
    /// Matches `events`, which the caller has committed.
    async fn match_committed(&self, events: &[crate::model::Event]) -> crate::error::Result<()>;
}
