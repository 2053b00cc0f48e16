//! The delivery path: the event inbox, the outbox, executions and their attempts.

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::io;
use super::shared::{execution_key, outbox_key, scoped};
use crate::model::{Delivery, Event, Execution, Handle};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl DeliveryRecords for Sled {
    async fn insert_events(&self, events: &[Event]) -> Result<()> {
        let w = self.writer().await;
        for event in events {
            w.put_json(T::EventInbox, event.id.as_bytes(), event)?;
        }
        w.finish()
    }

    async fn inbox(&self) -> Result<Vec<Event>> {
        self.scan_readable(T::EventInbox, &[], false, usize::MAX)
            .await
    }

    async fn take_events(&self, ids: &[&str]) -> Result<Vec<bool>> {
        let w = self.writer().await;
        let mut taken = Vec::with_capacity(ids.len());
        for id in ids {
            let there = w.get(T::EventInbox, id.as_bytes())?.is_some();
            if there {
                w.delete(T::EventInbox, id.as_bytes());
            }
            taken.push(there);
        }
        w.finish()?;
        Ok(taken)
    }

    async fn insert_deliveries(&self, deliveries: &[Delivery]) -> Result<()> {
        let w = self.writer().await;
        for delivery in deliveries {
            w.put_json(T::Outbox, outbox_key(delivery), delivery)?;
        }
        w.finish()
    }

    async fn due_deliveries(&self, now_ms: u64, limit: usize, skip: Skip<'_>) -> Result<Due> {
        // Keys start with the due time, so the first one not due ends the scan.
        let mut due = Vec::new();
        let mut unreadable = Vec::new();
        let mut next = None;
        for item in self.tree(T::Outbox).iter() {
            let (key, value) = item.map_err(io)?;
            let due_ms = key
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes);
            if due_ms.is_some_and(|d| d > now_ms) {
                next = due_ms;
                break;
            }
            // `due ms` then `id \0`: an id in flight is left unread.
            let id = key.get(8..key.len().saturating_sub(1)).unwrap_or_default();
            if skip(std::str::from_utf8(id).unwrap_or_default()) {
                continue;
            }
            match serde_json::from_slice::<Delivery>(&value) {
                Err(e) => unreadable.push((key.to_vec(), value.to_vec(), e.to_string())),
                Ok(delivery) if delivery.due_ms > now_ms => {
                    next = Some(delivery.due_ms);
                    break;
                }
                Ok(_) if due.len() == limit => {
                    next = Some(now_ms);
                    break;
                }
                Ok(delivery) => due.push(delivery),
            }
        }
        self.quarantine_all(T::Outbox, unreadable).await?;
        Ok((due, next))
    }

    async fn delivery_waits(&self, delivery: &Delivery) -> Result<bool> {
        Ok(self.get(T::Outbox, &outbox_key(delivery))?.is_some())
    }

    async fn renew_lease(&self, _delivery: &Delivery) -> Result<()> {
        Ok(())
    }

    async fn finish_deliveries(&self, finished: &[Finished<'_>]) -> Result<()> {
        let w = self.writer().await;
        for (delivery, next) in finished {
            w.delete(T::Outbox, outbox_key(delivery));
            if let Some(next) = next {
                w.put_json(T::Outbox, outbox_key(next), next)?;
            }
        }
        w.finish()
    }

    async fn pending_deliveries(&self) -> Result<usize> {
        Ok(self.tree(T::Outbox).len())
    }

    async fn first_due(&self) -> Result<Option<u64>> {
        // Keys start with the due time, big-endian.
        let first = self.tree(T::Outbox).first().map_err(io)?;
        Ok(first.and_then(|(key, _)| Some(u64::from_be_bytes(key.get(..8)?.try_into().ok()?))))
    }

    async fn put_executions(&self, executions: &[Execution]) -> Result<()> {
        let w = self.writer().await;
        for execution in executions {
            let key = execution_key(&execution.automation, &execution.id);
            w.put_json(T::Executions, key, execution)?;
        }
        w.finish()
    }

    async fn execution(&self, automation: &Handle, id: &str) -> Result<Option<Execution>> {
        self.get_json(T::Executions, execution_key(automation, id).as_ref())
    }

    async fn executions(&self, automation: &Handle, limit: usize) -> Result<Vec<Execution>> {
        let prefix = scoped(&automation.scope, &[&automation.name]);
        self.scan_readable(T::Executions, prefix.as_ref(), true, limit)
            .await
    }

    async fn record_attempts(&self, attempts: &[AttemptFor<'_>]) -> Result<Vec<bool>> {
        let w = self.writer().await;
        let mut recorded = Vec::with_capacity(attempts.len());
        for new in attempts {
            recorded.push(add_attempt(&w, new)?);
        }
        w.finish()?;
        Ok(recorded)
    }
}

/// Adds one attempt to its execution, on the writer `w`.
fn add_attempt(w: &Sled, new: &AttemptFor<'_>) -> Result<bool> {
    let key = execution_key(new.automation, new.execution_id).into_bytes();
    let Some(bytes) = w.get(T::Executions, &key)? else {
        return Ok(false);
    };
    let mut execution: Execution = match serde_json::from_slice(&bytes) {
        Ok(execution) => execution,
        Err(e) => {
            w.quarantine(T::Executions, &key, &bytes, &e.to_string())?;
            return Ok(false);
        }
    };
    execution.status = new.status;
    execution.error = new.error.map(str::to_string);
    execution.attempts.push(new.attempt.clone());
    execution.updated_at_ms = crate::ids::now_ms();
    w.put_json(T::Executions, key, &execution)?;
    Ok(true)
}
