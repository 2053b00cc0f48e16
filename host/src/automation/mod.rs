//! Webhook automations: webhooks, automations, and sending signed requests.
//!
//! - [`webhooks`]: team webhooks and the secrets they carry.
//! - [`automations`]: event bindings, checked through the plugins.
//! - [`variables`]: the payload variables.
//! - [`send`], [`signature`], [`ssrf`]: one signed POST, under the SSRF guard.
//! - [`webhook_test`]: the admin's test request.

pub mod automations;
pub mod send;
pub mod signature;
pub mod ssrf;
pub mod variables;
pub mod webhook_test;
pub mod webhooks;
