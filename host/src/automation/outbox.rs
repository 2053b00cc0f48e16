//! The durable outbox and the execution history.
//!
//! A [`Delivery`] waits in the outbox until the endpoint acknowledges it or
//! it fails for good. Its body is sealed: a rendered payload may contain
//! secrets. Each delivery belongs to an [`Execution`], the user-visible
//! record of one automation firing: the triggering event, the payload with
//! secrets redacted, and every attempt.

use crate::error::{Error, Result};
pub use crate::model::{Attempt, Delivery, Execution, Status};
use crate::model::{ExecutionId, Handle};
use crate::store::Store;
use crate::tasks::{Stage, Tasks};

/// The status named `text`, in any case: `Pending`, `Finished`, `Failed`
/// or `Skipped`.
pub fn parse_status(text: &str) -> Result<Status> {
    [
        Status::Pending,
        Status::Finished,
        Status::Failed,
        Status::Skipped,
    ]
    .into_iter()
    .find(|s| format!("{s:?}").eq_ignore_ascii_case(text))
    .ok_or_else(|| {
        Error::invalid(
            "status",
            format!("status '{text}' is not one of Pending, Finished, Failed, Skipped"),
        )
    })
}

/// One execution of an automation.
pub async fn execution(store: &Store, handle: &Handle, id: &ExecutionId) -> Result<Execution> {
    store
        .execution(handle, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("{} has no execution '{id}'", handle.describe())))
}

/// An automation's executions, newest first, at most `limit`.
pub async fn executions(store: &Store, handle: &Handle, limit: usize) -> Result<Vec<Execution>> {
    Ok(store.executions(handle, limit).await?)
}

/// Queues an execution's payload again, same delivery id, first attempt due
/// now; the execution is Pending again and keeps its earlier attempts.
/// Returns the execution and the delivery, for the dispatcher once durable.
pub async fn replay(
    store: &Store,
    handle: &Handle,
    id: &ExecutionId,
) -> Result<(Execution, Delivery)> {
    let tx = store.begin().await?;
    let mut execution = tx
        .execution(handle, id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("{} has no execution '{id}'", handle.describe())))?;
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
    let now = crate::ids::now_ms();
    execution.status = Status::Pending;
    execution.error = None;
    execution.updated_at_ms = now;
    let mut delivery = Delivery::first(&execution, body_sealed, now, now);
    let webhook = tx
        .webhook(&execution.webhook.team, &execution.webhook.name)
        .await?;
    if webhook.is_some_and(|w| w.ordering == crate::model::Ordering::Fifo) {
        // At the back of the line, as a new event would be.
        delivery = delivery.in_line(crate::ids::ordered_id());
    }
    tx.put_execution(&execution).await?;
    tx.insert_delivery(&delivery).await?;
    tx.commit().await?;
    Ok((execution, delivery))
}

/// Queues again every failed execution of `handle` created since
/// `since_ms` that rendered a payload. Returns their ids and deliveries.
pub async fn replay_failed(
    store: &Store,
    handle: &Handle,
    since_ms: u64,
) -> Result<(Vec<ExecutionId>, Vec<Delivery>)> {
    let mut replayed = Vec::new();
    let mut deliveries = Vec::new();
    for e in executions(store, handle, usize::MAX).await? {
        if e.status == Status::Failed && e.created_at_ms >= since_ms && e.body_sealed.is_some() {
            let (execution, delivery) = replay(store, handle, &e.id).await?;
            replayed.push(execution.id);
            deliveries.push(delivery);
        }
    }
    Ok((replayed, deliveries))
}

/// Removes the history older than `keep`, at start and then every quarter
/// of it (at most hourly), for as long as the process runs.
pub fn spawn_expiry(tasks: &Tasks, store: Store, keep: std::time::Duration) {
    let every = (keep / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(3600),
    );
    tasks.spawn(Stage::Upkeep, async move {
        loop {
            match store.expire_history(keep).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(executions = n, "removed history past its lifetime"),
                Err(e) => tracing::error!(error = %e, "removing history past its lifetime failed"),
            }
            tokio::time::sleep(every).await;
        }
    });
}
