//! Webhook automations: webhooks and their SSRF guard. Matching, rendering and
//! the delivery outbox arrive with the event sources.

pub mod ssrf;
pub mod webhooks;
