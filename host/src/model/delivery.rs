//! Deliveries waiting in the outbox, and executions: the user-visible record
//! of one automation firing.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::automation::{Handle, Skipped, WebhookRef};
use super::event::Event;
use super::id::{DeliveryId, ExecutionId};

/// Where an execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Waiting for (another) attempt.
    Pending,
    /// The endpoint acknowledged it (2xx).
    Finished,
    /// Given up: a permanent error, or retries exhausted.
    Failed,
    /// Held back by the automation's cooldown or rate limit; nothing sent.
    Skipped,
}

/// One try at sending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// Ordered by time.
    pub id: ExecutionId,
    /// Sent as `X-Service-Delivery` on every attempt.
    pub delivery_id: DeliveryId,
    /// The automation.
    pub automation: Handle,
    /// The webhook called.
    pub webhook: WebhookRef,
    /// Pending, Finished, Failed or Skipped.
    pub status: Status,
    /// Why it failed, or what the last attempt hit.
    pub error: Option<String>,
    /// Why it was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<Skipped>,
    /// The triggering event.
    pub event: Event,
    /// The payload sent, with secret values replaced by `[REDACTED]`.
    pub payload: Option<String>,
    /// Every attempt, oldest first.
    pub attempts: Vec<Attempt>,
    /// The body sent, sealed under the delivery id, for replays. Never shown.
    #[serde(default)]
    pub body_sealed: Option<SealedBody>,
    /// Unix milliseconds.
    pub created_at_ms: u64,
    /// Unix milliseconds.
    pub updated_at_ms: u64,
}

/// A delivery waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The delivery id.
    pub id: DeliveryId,
    /// The automation whose execution it belongs to. (Stored under its
    /// old name.)
    #[serde(rename = "execution")]
    pub automation: Handle,
    /// Its execution id.
    pub execution_id: ExecutionId,
    /// The webhook to call.
    pub webhook: WebhookRef,
    /// The body, sealed under the delivery id.
    pub body_sealed: SealedBody,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it is due (unix ms).
    pub due_ms: u64,
    /// When the event (or the replay) that queued it was accepted (unix
    /// ms): the start of its delivery time.
    #[serde(default)]
    pub event_at_ms: u64,
    /// To a FIFO webhook: its place in the webhook's line. It goes once
    /// every delivery with a smaller place has left the outbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fifo: Option<String>,
    /// The W3C `traceparent` its attempts continue: the matching that
    /// queued it, in the trace of the request that caused its event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

impl Execution {
    /// `automation` fired on `event` at `now_ms`, to `webhook`: pending
    /// until its payload is rendered and its delivery written. `id` orders
    /// it; `delivery_id` goes with every attempt.
    pub fn pending(
        (id, delivery_id): (ExecutionId, DeliveryId),
        automation: Handle,
        webhook: WebhookRef,
        event: Event,
        now_ms: u64,
    ) -> Execution {
        Execution {
            id,
            delivery_id,
            automation,
            webhook,
            status: Status::Pending,
            error: None,
            skipped: None,
            created_at_ms: event.at_ms,
            event,
            payload: None,
            attempts: Vec::new(),
            body_sealed: None,
            updated_at_ms: now_ms,
        }
    }

    /// Given up before anything was sent, saying why.
    pub fn failed(self, why: String) -> Execution {
        Execution {
            status: Status::Failed,
            error: Some(why),
            ..self
        }
    }
}

impl Delivery {
    /// The first attempt of `execution`'s delivery, of the body it sealed,
    /// due at `due_ms`; its delivery time runs from `since_ms` (the event's
    /// acceptance, or a replay's).
    pub fn first(
        execution: &Execution,
        body_sealed: SealedBody,
        due_ms: u64,
        since_ms: u64,
    ) -> Delivery {
        Delivery {
            id: execution.delivery_id.clone(),
            automation: execution.automation.clone(),
            execution_id: execution.id.clone(),
            webhook: execution.webhook.clone(),
            body_sealed,
            attempts: 0,
            due_ms,
            event_at_ms: since_ms,
            fifo: None,
            trace: None,
        }
    }

    /// The same delivery, in place `place` of its FIFO webhook's line.
    pub fn in_line(self, place: String) -> Delivery {
        Delivery {
            fifo: Some(place),
            ..self
        }
    }

    /// The next attempt after a failed one, due at `due_ms`.
    pub fn retried(&self, due_ms: u64) -> Delivery {
        Delivery {
            attempts: self.attempts + 1,
            due_ms,
            ..self.clone()
        }
    }

    /// The same attempt held back unsent until `due_ms` (its webhook's
    /// circuit is open): its attempt count stays.
    pub fn held(&self, due_ms: u64) -> Delivery {
        Delivery {
            due_ms,
            ..self.clone()
        }
    }
}

/// A payload sealed under its delivery id: bytes, shared by an execution
/// and its delivery without a copy, and opened for each attempt without a
/// decode; hex only where a record is stored as text.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct SealedBody(Arc<[u8]>);

impl SealedBody {
    /// The sealed bytes.
    pub fn new(bytes: Vec<u8>) -> SealedBody {
        SealedBody(bytes.into())
    }

    /// As sealed.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// As hex, the form records hold as text.
    pub fn to_hex(&self) -> String {
        hex::encode(&self.0)
    }

    /// From [`SealedBody::to_hex`]'s form.
    pub fn from_hex(text: &str) -> Result<SealedBody, hex::FromHexError> {
        hex::decode(text).map(SealedBody::new)
    }
}

/// Its length only: a sealed body says nothing useful in a log.
impl std::fmt::Debug for SealedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealedBody({} bytes)", self.0.len())
    }
}

impl Serialize for SealedBody {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for SealedBody {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SealedBody, D::Error> {
        let text = String::deserialize(deserializer)?;
        SealedBody::from_hex(&text).map_err(serde::de::Error::custom)
    }
}
