//! Webhook automations: webhooks, automations, and sending signed requests.
//!
//! - [`webhooks`]: team webhooks and the secrets they carry.
//! - [`automations`]: event bindings, checked through the plugins.
//! - [`variables`], [`secret_refs`]: the payload variables, and `$NAME` secrets.
//! - [`catalog`]: every event type with the schema of its default payload.
//! - [`send`], [`signature`], [`ssrf`]: one signed POST, under the SSRF guard.
//! - [`oauth`]: tokens from a receiver's authorization server.
//! - [`webhook_test`]: the admin's test request.
//! - [`events`]: what happened, written with the action that caused it.
//! - [`matcher`]: event → filter → render → executions and deliveries.
//! - [`throttle`]: an automation's cooldown and rate limit.
//! - [`outbox`]: durable deliveries and the execution history.
//! - [`worker`]: the dispatcher that sends, retries and records.
//! - [`breaker`]: each webhook's circuit breaker, which rests a failing
//!   endpoint.
//! - [`uploads`]: plugins uploaded by operators, refused when they would
//!   break the automations that call them.

/// How often the inbox sweep, the outbox scan and the plugin sync look
/// for work nobody told them of: what another host sharing the store left
/// when it stopped. Otherwise they wait to be told, so an idle host reads
/// nothing.
pub const SAFETY_POLL: std::time::Duration = std::time::Duration::from_secs(30);

pub mod automations;
pub mod breaker;
pub mod catalog;
pub mod config;
pub mod events;
pub mod headers;
pub mod matcher;
pub mod oauth;
pub mod outbox;
pub mod secret_refs;
pub mod send;
pub mod signature;
pub mod ssrf;
pub mod throttle;
pub mod uploads;
pub mod variables;
pub mod webhook_test;
pub mod webhooks;
pub mod worker;
