//! The delivery path: the event inbox, the outbox, executions and their
//! attempts, all in the journal (`journal/mod.rs`). Writes are buffered on
//! the transaction and appended at its commit, under the writer lock, so a
//! check made here ("is the event still in the inbox?") holds until then.

use async_trait::async_trait;

use super::journal::{Entry, Unreadable};
use super::shared::{execution_key, scoped};
use super::{Sled, T, quarantine_record};
use crate::model::{Delivery, DeliveryId, Event, Execution, ExecutionId, Handle, WebhookRef};
use crate::store::records::*;
use crate::store::{Engine, Result};

#[async_trait]
impl DeliveryRecords for Sled {
    async fn insert_events(&self, events: &[Event]) -> Result<()> {
        let w = self.writer().await;
        for event in events {
            w.log(Entry::Event {
                event: Box::new(event.clone()),
            });
        }
        w.finish()
    }

    async fn inbox(&self) -> Result<Vec<Event>> {
        Ok(self.journal().inbox())
    }

    async fn take_events(&self, ids: &[&str]) -> Result<Vec<bool>> {
        let w = self.writer().await;
        let mut taken = Vec::with_capacity(ids.len());
        for id in ids {
            let there = w.journal().has_event(id) && !w.took(id);
            if there {
                w.log(Entry::Taken { id: id.to_string() });
            }
            taken.push(there);
        }
        w.finish()?;
        Ok(taken)
    }

    async fn insert_deliveries(&self, deliveries: &[Delivery]) -> Result<()> {
        let w = self.writer().await;
        for delivery in deliveries {
            w.log(Entry::Queued {
                delivery: delivery.clone(),
                body: None,
            });
        }
        w.finish()
    }

    async fn due_deliveries(&self, now_ms: u64, limit: usize, skip: Skip<'_>) -> Result<Due> {
        // Only what is durable goes out (`Journal::due`): what was written
        // and not yet synced is synced first, sharing the group commit.
        let (written, synced) = self.journal().marks();
        if synced < written {
            self.durable_to(written).await?;
        }
        let (due, unreadable) = self.journal().due(now_ms, limit, skip)?;
        if !unreadable.is_empty() {
            self.quarantine_deliveries(&unreadable).await?;
        }
        Ok(due)
    }

    async fn delivery_waits(&self, delivery: &Delivery) -> Result<bool> {
        Ok(self.journal().waits(&delivery.id, delivery.due_ms))
    }

    async fn renew_lease(&self, _delivery: &Delivery) -> Result<()> {
        Ok(())
    }

    async fn finish_deliveries(&self, finished: &[Finished<'_>]) -> Result<()> {
        let w = self.writer().await;
        for (delivery, next) in finished {
            w.log(Entry::Settled {
                id: delivery.id.clone(),
            });
            if let Some(next) = next {
                w.log(Entry::Queued {
                    delivery: (*next).clone(),
                    body: None,
                });
            }
        }
        w.finish()
    }

    async fn release_deliveries(&self, webhook: &WebhookRef, now_ms: u64) -> Result<usize> {
        let w = self.writer().await;
        let later = w.journal().waiting_for(webhook, now_ms);
        let released = later.len();
        for delivery in later {
            w.log(Entry::Settled {
                id: delivery.id.clone(),
            });
            // Without its body: the journal finds it where it waits.
            w.log(Entry::Queued {
                delivery: Delivery {
                    due_ms: now_ms,
                    ..delivery
                },
                body: None,
            });
        }
        w.finish()?;
        Ok(released)
    }

    async fn pending_deliveries(&self) -> Result<usize> {
        Ok(self.journal().pending())
    }

    async fn first_due(&self) -> Result<Option<u64>> {
        Ok(self.journal().first_due())
    }

    async fn put_executions(&self, executions: &[Execution]) -> Result<()> {
        let w = self.writer().await;
        for execution in executions {
            w.log(Entry::Execution {
                execution: Box::new(execution.clone()),
                body: false,
            });
        }
        w.finish()
    }

    async fn execution(&self, automation: &Handle, id: &ExecutionId) -> Result<Option<Execution>> {
        self.journal()
            .execution(execution_key(automation, id.as_str()).as_ref())
    }

    async fn executions(&self, automation: &Handle, limit: usize) -> Result<Vec<Execution>> {
        let prefix = scoped(&automation.scope, &[&automation.name]);
        self.journal().executions(prefix.as_ref(), limit)
    }

    async fn record_attempts(&self, attempts: &[AttemptFor<'_>]) -> Result<Vec<bool>> {
        let w = self.writer().await;
        let now = crate::ids::now_ms();
        let mut recorded = Vec::with_capacity(attempts.len());
        let settling = w.settling();
        for new in attempts {
            let key = execution_key(new.automation, new.execution_id.as_str());
            let there = w.wrote(new)
                || settling.contains(key.as_ref() as &[u8])
                || w.journal().has_execution(key.as_ref())?;
            if there {
                w.log(Entry::Attempt {
                    automation: new.automation.clone(),
                    execution_id: new.execution_id.clone(),
                    status: new.status,
                    error: new.error.map(str::to_string),
                    attempt: new.attempt.clone(),
                    at_ms: now,
                });
            }
            recorded.push(there);
        }
        w.finish()?;
        Ok(recorded)
    }
}

impl Sled {
    /// Sets deliveries whose records cannot be read aside in the
    /// quarantine, with why, and out of the outbox, in one commit.
    async fn quarantine_deliveries(&self, unreadable: &Unreadable) -> Result<()> {
        let w = self.writer().await;
        for (delivery, why) in unreadable {
            let record = serde_json::to_vec(delivery)?;
            let (key, value) = quarantine_record(T::Outbox, delivery.id.as_bytes(), &record, why)?;
            w.put(T::Quarantine, key, value);
            w.log(Entry::Settled {
                id: delivery.id.clone(),
            });
        }
        w.finish()
    }

    /// Whether this transaction took the event `id` already.
    fn took(&self, id: &str) -> bool {
        self.logged()
            .iter()
            .any(|e| matches!(e, Entry::Taken { id: taken } if taken == id))
    }

    /// The execution keys of the deliveries this transaction settles,
    /// which wait until it commits: their executions are there (expiry
    /// keeps those of waiting deliveries), and finding one so costs no
    /// walk through the history (slow for a delivery made long ago).
    fn settling(&self) -> std::collections::HashSet<Vec<u8>> {
        let ids: Vec<DeliveryId> = (self.logged().iter())
            .filter_map(|e| match e {
                Entry::Settled { id } => Some(id.clone()),
                _ => None,
            })
            .collect();
        self.journal().executions_waiting(&ids)
    }

    /// Whether this transaction wrote the execution `new` is for.
    fn wrote(&self, new: &AttemptFor<'_>) -> bool {
        self.logged().iter().any(|e| {
            matches!(e, Entry::Execution { execution, .. }
                if &execution.id == new.execution_id && &execution.automation == new.automation)
        })
    }
}
