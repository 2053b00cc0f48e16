//! The delivery path: the event inbox, the outbox, executions and their attempts.

use std::sync::LazyLock;

use async_trait::async_trait;

use super::Postgres;
use super::rows;
use super::shared::Db;
use super::shared::{
    EXECUTION_SELECT, answered, delivery, execution, get, i, scope_key, to_json, u,
};
use crate::model::{Delivery, Event, Execution, ExecutionId, Handle, WebhookRef};
use crate::store::Result;
use crate::store::records::*;

/// The first place in each FIFO webhook's line, one index probe a line (a
/// skip scan of `outbox_fifo_line`, which holds FIFO deliveries only): a
/// claim then costs the same however long the lines are, and one probe
/// when no webhook is FIFO.
const FIFO_HEADS: &str = "WITH RECURSIVE heads AS ( \
     (SELECT webhook_team, webhook_name, fifo FROM outbox WHERE fifo IS NOT NULL \
      ORDER BY webhook_team, webhook_name, fifo LIMIT 1) \
     UNION ALL \
     SELECT n.webhook_team, n.webhook_name, n.fifo FROM heads h, LATERAL ( \
      SELECT webhook_team, webhook_name, fifo FROM outbox WHERE fifo IS NOT NULL \
      AND (webhook_team, webhook_name) > (h.webhook_team, h.webhook_name) \
      ORDER BY webhook_team, webhook_name, fifo LIMIT 1) n)";

/// Row `o` is the FIFO delivery first in line `h` (one of `heads`): one
/// index probe a line. (The one in flight stays first until its attempt
/// takes it out, invisible while leased, so nothing behind it goes
/// meanwhile.)
const FIRST_IN_LINE: &str = "o.fifo IS NOT NULL AND o.webhook_team = h.webhook_team \
     AND o.webhook_name = h.webhook_name AND o.fifo = h.fifo";

/// Claims up to $4 deliveries visible at $2 for host $1, for $3 ms: those
/// first in a FIFO line (a few: one a line), then the parallel ones from
/// the start of `outbox_visible` (what is in flight is further on,
/// invisible until its lease ends). A body written with its execution is
/// read from there.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{FIFO_HEADS}, \
         fifo AS (SELECT f.id FROM heads h, LATERAL (SELECT o.id FROM outbox o \
          WHERE {FIRST_IN_LINE} AND o.visible_at <= $2 FOR UPDATE SKIP LOCKED) f LIMIT $4), \
         parallel AS (SELECT id FROM outbox WHERE fifo IS NULL AND visible_at <= $2 \
          ORDER BY visible_at LIMIT $4 FOR UPDATE SKIP LOCKED), \
         claimed AS (UPDATE outbox SET lease_owner = $1, visible_at = $2 + $3 \
          WHERE id IN (SELECT id FROM fifo UNION ALL SELECT id FROM parallel LIMIT $4) \
          RETURNING *) \
         SELECT c.id, c.scope, c.automation, c.execution_id, c.webhook_team, c.webhook_name, \
          coalesce(c.body_sealed, e.body_sealed, ''::bytea) AS body_sealed, c.attempts, \
          c.due_ms, c.event_at_ms, c.fifo, c.trace \
         FROM claimed c LEFT JOIN executions e ON e.scope = c.scope \
          AND e.automation = c.automation AND e.id = c.execution_id"
    )
});

/// When the next delivery becomes visible: the first entry of
/// `outbox_visible`, or a FIFO line's first. (`LIMIT 1` keeps the probe
/// per line, where the planner would otherwise hash every FIFO row.)
static NEXT_VISIBLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{FIFO_HEADS} SELECT least( \
         (SELECT visible_at FROM outbox WHERE fifo IS NULL ORDER BY visible_at LIMIT 1), \
         (SELECT min(f.visible_at) FROM heads h, LATERAL (SELECT o.visible_at FROM outbox o \
          WHERE {FIRST_IN_LINE} LIMIT 1) f))"
    )
});

#[async_trait]
impl DeliveryRecords for Postgres {
    async fn insert_events(&self, events: &[Event]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let bodies = events.iter().map(to_json).collect::<Result<Vec<_>>>()?;
        self.execute(
            sqlx::query(
                "INSERT INTO event_inbox (id, event) \
                 SELECT id, event::jsonb FROM unnest($1::text[], $2::text[]) AS e (id, event)",
            )
            .bind(&ids)
            .bind(&bodies),
        )
        .await?;
        Ok(())
    }

    async fn inbox(&self) -> Result<Vec<Event>> {
        let rows = {
            let mut c = self.conn().await?;
            sqlx::query("SELECT id, event::text AS event FROM event_inbox ORDER BY id")
                .fetch_all(&mut *c)
                .await
                .db(self)?
        };
        let mut out = Vec::new();
        for row in rows {
            let (id, text): (String, String) = (get(&row, "id")?, get(&row, "event")?);
            match serde_json::from_str(&text) {
                Ok(event) => out.push(event),
                Err(e) => {
                    self.quarantine("event_inbox", &id, &text, &e.to_string())
                        .await?;
                    self.take_event(&id).await?;
                }
            }
        }
        Ok(out)
    }

    async fn take_events(&self, ids: &[&str]) -> Result<Vec<bool>> {
        let mut c = self.conn().await?;
        let taken: Vec<String> =
            sqlx::query_scalar("DELETE FROM event_inbox WHERE id = ANY($1) RETURNING id")
                .bind(ids)
                .fetch_all(&mut *c)
                .await
                .db(self)?;
        let taken: std::collections::HashSet<&str> = taken.iter().map(String::as_str).collect();
        Ok(ids.iter().map(|id| taken.contains(id)).collect())
    }

    async fn insert_deliveries(&self, deliveries: &[Delivery]) -> Result<()> {
        if deliveries.is_empty() {
            return Ok(());
        }
        let lease_until = crate::ids::now_ms().saturating_add(self.shared.lease_ms);
        static SQL: LazyLock<String> = LazyLock::new(|| rows::outbox_insert(1, ""));
        let lease = (self.shared.host_id.as_str(), lease_until);
        let with = (deliveries, rows::Body::Here);
        let insert = rows::bind_deliveries(sqlx::query(&SQL), with, Vec::new(), lease);
        self.execute(insert).await?;
        Ok(())
    }

    async fn due_deliveries(&self, now_ms: u64, limit: usize, _skip: Skip<'_>) -> Result<Due> {
        // This host's deliveries in flight hold live leases, invisible to
        // the claim; a host that died holding deliveries lets them go when
        // its leases run out.
        let mut c = self.conn().await?;
        let rows = sqlx::query(&CLAIM)
            .bind(&self.shared.host_id)
            .bind(i(now_ms))
            .bind(i(self.shared.lease_ms))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        let next: Option<i64> = sqlx::query_scalar(&NEXT_VISIBLE)
            .fetch_one(&mut *c)
            .await
            .db(self)?;
        drop(c);
        let mut due = Vec::with_capacity(rows.len());
        for row in &rows {
            match delivery(row) {
                Ok(d) => due.push(d),
                // One bad record must not hold back the rest.
                Err(e) => {
                    let id: String = get(row, "id")?;
                    self.quarantine_row("outbox", &id, &e.to_string()).await?;
                }
            }
        }
        Ok((due, next.map(u)))
    }

    async fn delivery_waits(&self, d: &Delivery) -> Result<bool> {
        let mut c = self.conn().await?;
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM outbox WHERE id = $1 AND due_ms = $2 AND attempts = $3)",
        )
        .bind(d.id.as_str())
        .bind(i(d.due_ms))
        .bind(i32::try_from(d.attempts).unwrap_or(i32::MAX))
        .fetch_one(&mut *c)
        .await
        .db(self)
    }

    async fn renew_lease(&self, d: &Delivery) -> Result<()> {
        let until = crate::ids::now_ms().saturating_add(self.shared.lease_ms);
        self.execute(
            sqlx::query("UPDATE outbox SET visible_at = $3 WHERE id = $1 AND lease_owner = $2")
                .bind(d.id.as_str())
                .bind(&self.shared.host_id)
                .bind(i(until)),
        )
        .await?;
        Ok(())
    }

    async fn finish_deliveries(&self, finished: &[Finished<'_>]) -> Result<()> {
        if finished.is_empty() {
            return Ok(());
        }
        static SQL: LazyLock<String> = LazyLock::new(|| {
            let (done, retried) = rows::finish(1);
            format!("WITH done AS ({done}) {retried}")
        });
        self.execute(rows::bind_finish(sqlx::query(&SQL), finished))
            .await?;
        Ok(())
    }

    async fn release_deliveries(&self, webhook: &WebhookRef, now_ms: u64) -> Result<usize> {
        // Not what a host holds: its lease is live (owned, not yet visible).
        let sql = "UPDATE outbox SET due_ms = $3, visible_at = $3 \
                   WHERE webhook_team = $1 AND webhook_name = $2 AND due_ms > $3 \
                   AND (lease_owner IS NULL OR visible_at < $3)";
        let release = sqlx::query(sql)
            .bind(&webhook.team)
            .bind(&webhook.name)
            .bind(i(now_ms));
        Ok(self.execute(release).await? as usize)
    }

    async fn pending_deliveries(&self) -> Result<usize> {
        self.count("outbox").await
    }

    async fn first_due(&self) -> Result<Option<u64>> {
        let mut c = self.conn().await?;
        let first: Option<i64> = sqlx::query_scalar("SELECT min(due_ms) FROM outbox")
            .fetch_one(&mut *c)
            .await
            .db(self)?;
        Ok(first.map(u))
    }

    async fn put_executions(&self, executions: &[Execution]) -> Result<()> {
        if executions.is_empty() {
            return Ok(());
        }
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "WITH ex AS ({}) {}",
                rows::executions_insert(1, ""),
                rows::carried_attempts_insert(1 + rows::EXECUTION_PARAMS)
            )
        });
        let insert = rows::bind_executions(sqlx::query(&SQL), executions, Vec::new())?;
        self.execute(rows::bind_carried(insert, executions)?)
            .await?;
        Ok(())
    }

    async fn execution(&self, automation: &Handle, id: &ExecutionId) -> Result<Option<Execution>> {
        self.optional(
            sqlx::query(&format!(
                "{EXECUTION_SELECT} WHERE e.scope = $1 AND e.automation = $2 AND e.id = $3"
            ))
            .bind(scope_key(&automation.scope))
            .bind(&automation.name)
            .bind(id.as_str()),
            execution,
        )
        .await
    }

    async fn executions(&self, automation: &Handle, limit: usize) -> Result<Vec<Execution>> {
        let rows = {
            let mut c = self.conn().await?;
            sqlx::query(&format!(
                "{EXECUTION_SELECT} WHERE e.scope = $1 AND e.automation = $2 \
                 ORDER BY e.id DESC LIMIT $3"
            ))
            .bind(scope_key(&automation.scope))
            .bind(&automation.name)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *c)
            .await
            .db(self)?
        };
        let mut out = Vec::new();
        for row in rows {
            match execution(&row) {
                Ok(e) => out.push(e),
                Err(e) => {
                    let id: String = get(&row, "id")?;
                    let text: String = get(&row, "event")?;
                    self.quarantine("executions", &id, &text, &e.to_string())
                        .await?;
                    let mut c = self.conn().await?;
                    sqlx::query(
                        "WITH gone AS (DELETE FROM attempts \
                         WHERE scope = $1 AND automation = $2 AND execution_id = $3) \
                         DELETE FROM executions WHERE scope = $1 AND automation = $2 AND id = $3",
                    )
                    .bind(scope_key(&automation.scope))
                    .bind(&automation.name)
                    .bind(&id)
                    .execute(&mut *c)
                    .await
                    .db(self)?;
                }
            }
        }
        Ok(out)
    }

    async fn record_attempts(&self, attempts: &[AttemptFor<'_>]) -> Result<Vec<bool>> {
        if attempts.is_empty() {
            return Ok(Vec::new());
        }
        static SQL: LazyLock<String> = LazyLock::new(|| rows::attempts_insert(1));
        let update = rows::bind_attempts(sqlx::query(&SQL), attempts, crate::ids::now_ms())?;
        let mut c = self.conn().await?;
        let found = update.fetch_all(&mut *c).await.db(self)?;
        answered(&found, attempts.iter().map(|a| a.execution_id.as_str()))
    }
}
