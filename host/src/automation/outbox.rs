//! The durable outbox and the execution history.
//!
//! A [`Delivery`] waits in the `outbox` tree, keyed by when it is due, until
//! the endpoint acknowledges it or it fails for good. Its body is sealed: a
//! rendered payload may contain secrets. Each delivery belongs to an
//! [`Execution`], the user-visible record of one automation firing: the
//! triggering event, the payload with secrets redacted, and every attempt.

use serde::{Deserialize, Serialize};

use super::automations::{Handle, Scope, WebhookRef};
use super::events::Event;
use crate::error::{Error, Result};
use crate::store::{self, Store, keys};

/// Where an execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Waiting for (another) attempt.
    Pending,
    /// The endpoint acknowledged it (2xx).
    Finished,
    /// Given up: a permanent error, or retries exhausted.
    Failed,
}

/// One try at sending.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    /// Unix milliseconds.
    pub at_ms: u64,
    /// The endpoint's status, when it answered.
    pub status: Option<u16>,
    /// Milliseconds until the answer (or the failure).
    pub latency_ms: f64,
    /// What went wrong.
    pub error: Option<String>,
    /// When the next attempt is due, if there will be one.
    pub next_attempt_at_ms: Option<u64>,
}

/// One firing of an automation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Execution {
    /// Ordered by time.
    pub id: String,
    /// Sent as `X-Service-Delivery` on every attempt.
    pub delivery_id: String,
    /// The automation.
    pub automation: Handle,
    /// The webhook called.
    pub webhook: WebhookRef,
    /// Pending, Finished or Failed.
    pub status: Status,
    /// Why it failed, or what the last attempt hit.
    pub error: Option<String>,
    /// The triggering event.
    pub event: Event,
    /// The payload sent, with secret values replaced by `[REDACTED]`.
    pub payload: Option<String>,
    /// Every attempt, oldest first.
    pub attempts: Vec<Attempt>,
    /// The body sent, sealed under the delivery id, for replays. Never shown.
    #[serde(default)]
    pub body_sealed: Option<String>,
    /// Unix milliseconds.
    pub created_at_ms: u64,
    /// Unix milliseconds.
    pub updated_at_ms: u64,
}

/// A delivery waiting in the outbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    /// The delivery id.
    pub id: String,
    /// The execution it belongs to.
    pub execution: Handle,
    /// Its execution id.
    pub execution_id: String,
    /// The webhook to call.
    pub webhook: WebhookRef,
    /// The body, sealed (hex) under the delivery id.
    pub body_sealed: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it is due (unix ms); part of its key.
    pub due_ms: u64,
}

impl Delivery {
    /// Its key in the outbox: due time first, so a range scan finds what is due.
    pub fn key(&self) -> Vec<u8> {
        keys::Key::new()
            .num(self.due_ms)
            .text(&self.id)
            .into_bytes()
    }
}

/// The key of an execution.
pub fn execution_key(handle: &Handle, id: &str) -> keys::Key {
    handle.scope.key(&[&handle.name, id])
}

/// One execution of an automation.
pub fn execution(store: &Store, handle: &Handle, id: &str) -> Result<Execution> {
    store::get_json(&store.trees.executions, execution_key(handle, id))?
        .ok_or_else(|| Error::NotFound(format!("{} has no execution '{id}'", handle.describe())))
}

/// An automation's executions, newest first, at most `limit`.
pub fn executions(
    store: &Store,
    scope: &Scope,
    automation: &str,
    limit: usize,
) -> Result<Vec<Execution>> {
    let tree = &store.trees.executions;
    let mut out = Vec::new();
    for item in tree.scan_prefix(scope.key(&[automation])).rev() {
        if out.len() == limit {
            break;
        }
        let (key, value) = item.map_err(anyhow::Error::from)?;
        match serde_json::from_slice(&value) {
            Ok(execution) => out.push(execution),
            Err(e) => store.quarantine(tree, &key, &e.to_string())?,
        }
    }
    Ok(out)
}

/// How many deliveries wait in the outbox.
pub fn pending(store: &Store) -> usize {
    store.trees.outbox.len()
}

/// Queues an execution's payload again, same delivery id, first attempt due
/// now; the execution is Pending again and keeps its earlier attempts.
pub fn replay(store: &Store, handle: &Handle, id: &str) -> Result<Execution> {
    use sled::Transactional;
    let mut execution = execution(store, handle, id)?;
    let Some(body_sealed) = execution.body_sealed.clone() else {
        return Err(Error::Conflict(format!(
            "execution '{id}' never rendered a payload ({}); fix the automation instead",
            execution.error.as_deref().unwrap_or("no payload")
        )));
    };
    if execution.status == Status::Pending {
        return Err(Error::Conflict(format!(
            "execution '{id}' is still pending; wait for it to finish or fail"
        )));
    }
    execution.status = Status::Pending;
    execution.error = None;
    execution.updated_at_ms = crate::ids::now_ms();
    let delivery = Delivery {
        id: execution.delivery_id.clone(),
        execution: handle.clone(),
        execution_id: execution.id.clone(),
        webhook: execution.webhook.clone(),
        body_sealed,
        attempts: 0,
        due_ms: crate::ids::now_ms(),
    };
    let exec_key = execution_key(handle, id);
    let t = &store.trees;
    let result = (&t.executions, &t.outbox).transaction(|(executions, out)| {
        executions.insert(exec_key.as_ref(), crate::store::tx::encode(&execution)?)?;
        out.insert(delivery.key(), crate::store::tx::encode(&delivery)?)?;
        Ok(())
    });
    crate::store::tx::finish(result)?;
    Ok(execution)
}
