//! The delivery path: the event inbox, the outbox, executions and their attempts.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{
    EXECUTION_COLUMNS, delivery, execution, get, i, scope_key, status_text, to_json, u,
};
use crate::model::{Delivery, Event, Execution, ExecutionId, Handle, WebhookRef};
use crate::store::Result;
use crate::store::records::*;

/// The first place in each FIFO webhook's line, one index probe a line (a
/// skip scan of `outbox_fifo_line`): a claim then costs the same however
/// long the lines are. (A subquery per waiting row made a claim cost the
/// line's length, dead rows included: 31 ms with 2,000 waiting.)
const FIFO_HEADS: &str = "WITH RECURSIVE heads AS ( \
     (SELECT webhook_team, webhook_name, fifo FROM outbox WHERE fifo IS NOT NULL \
      ORDER BY webhook_team, webhook_name, fifo LIMIT 1) \
     UNION ALL \
     SELECT n.webhook_team, n.webhook_name, n.fifo FROM heads h, LATERAL ( \
      SELECT webhook_team, webhook_name, fifo FROM outbox WHERE fifo IS NOT NULL \
      AND (webhook_team, webhook_name) > (h.webhook_team, h.webhook_name) \
      ORDER BY webhook_team, webhook_name, fifo LIMIT 1) n)";

/// Row `o` may go: not in a FIFO line, or first in its line. (The one in
/// flight stays first until its attempt takes it out, so nothing behind it
/// goes meanwhile.)
const FIRST_IN_LINE: &str =
    "(o.fifo IS NULL OR (o.webhook_team, o.webhook_name, o.fifo) IN (SELECT * FROM heads))";

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
        // Held by this host from the start: it sends them at once. Not a
        // FIFO webhook's, which wait for their turn in the scan's claim.
        let lease_until = crate::ids::now_ms().saturating_add(self.shared.lease_ms);
        let column = |f: fn(&Delivery) -> String| deliveries.iter().map(f).collect::<Vec<_>>();
        let number =
            |f: fn(&Delivery) -> u64| deliveries.iter().map(|d| i(f(d))).collect::<Vec<_>>();
        let attempts: Vec<i32> = deliveries
            .iter()
            .map(|d| i32::try_from(d.attempts).unwrap_or(i32::MAX))
            .collect();
        self.execute(
            sqlx::query(
                "INSERT INTO outbox (id, scope, automation, execution_id, webhook_team, \
                 webhook_name, body_sealed, attempts, due_ms, lease_owner, lease_until_ms, \
                 event_at_ms, fifo, trace) \
                 SELECT d.id, d.scope, d.automation, d.execution_id, d.webhook_team, \
                 d.webhook_name, d.body_sealed, d.attempts, d.due_ms, \
                 CASE WHEN d.fifo IS NULL THEN $10 END, CASE WHEN d.fifo IS NULL THEN $11 END, \
                 d.event_at_ms, d.fifo, d.trace \
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
                 $6::text[], $7::text[], $8::int[], $9::bigint[], $12::bigint[], $13::text[], \
                 $14::text[]) \
                 AS d (id, scope, automation, execution_id, webhook_team, webhook_name, \
                 body_sealed, attempts, due_ms, event_at_ms, fifo, trace) \
                 ON CONFLICT (id) DO UPDATE SET attempts = excluded.attempts, \
                 due_ms = excluded.due_ms, lease_owner = excluded.lease_owner, \
                 lease_until_ms = excluded.lease_until_ms, fifo = excluded.fifo",
            )
            .bind(column(|d| d.id.to_string()))
            .bind(column(|d| scope_key(&d.automation.scope)))
            .bind(column(|d| d.automation.name.clone()))
            .bind(column(|d| d.execution_id.to_string()))
            .bind(column(|d| d.webhook.team.clone()))
            .bind(column(|d| d.webhook.name.clone()))
            .bind(column(|d| d.body_sealed.to_hex()))
            .bind(attempts)
            .bind(number(|d| d.due_ms))
            .bind(&self.shared.host_id)
            .bind(i(lease_until))
            .bind(number(|d| d.event_at_ms))
            .bind(
                deliveries
                    .iter()
                    .map(|d| d.fifo.clone())
                    .collect::<Vec<_>>(),
            )
            .bind(
                deliveries
                    .iter()
                    .map(|d| d.trace.clone())
                    .collect::<Vec<_>>(),
            ),
        )
        .await?;
        Ok(())
    }

    async fn due_deliveries(&self, now_ms: u64, limit: usize, _skip: Skip<'_>) -> Result<Due> {
        // This host's deliveries in flight hold live leases, so the claim
        // below never returns them.
        let mut c = self.conn().await?;
        // Claims what is due and not held by a live lease; a host that died
        // holding deliveries lets them go when its leases run out.
        let rows = sqlx::query(&format!(
            "{FIFO_HEADS} UPDATE outbox SET lease_owner = $1, lease_until_ms = $2 + $3 \
                 WHERE id IN (SELECT id FROM outbox o WHERE due_ms <= $2 \
                 AND (lease_until_ms IS NULL OR lease_until_ms < $2) AND {FIRST_IN_LINE} \
                 ORDER BY due_ms LIMIT $4 FOR UPDATE SKIP LOCKED) \
                 RETURNING *"
        ))
        .bind(&self.shared.host_id)
        .bind(i(now_ms))
        .bind(i(self.shared.lease_ms))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        let next: Option<i64> = sqlx::query_scalar(&format!(
            "{FIFO_HEADS} SELECT min(greatest(due_ms, coalesce(lease_until_ms, 0))) \
                 FROM outbox o WHERE (lease_owner IS DISTINCT FROM $1 OR lease_until_ms < $2) \
                 AND {FIRST_IN_LINE}"
        ))
        .bind(&self.shared.host_id)
        .bind(i(now_ms))
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
            sqlx::query("UPDATE outbox SET lease_until_ms = $3 WHERE id = $1 AND lease_owner = $2")
                .bind(d.id.as_str())
                .bind(&self.shared.host_id)
                .bind(i(until)),
        )
        .await?;
        Ok(())
    }

    async fn finish_deliveries(&self, finished: &[Finished<'_>]) -> Result<()> {
        let done: Vec<&str> = finished
            .iter()
            .filter(|(_, next)| next.is_none())
            .map(|(d, _)| d.id.as_str())
            .collect();
        let retried: Vec<&Delivery> = finished.iter().filter_map(|(_, next)| *next).collect();
        if !done.is_empty() {
            self.execute(sqlx::query("DELETE FROM outbox WHERE id = ANY($1)").bind(done))
                .await?;
        }
        if !retried.is_empty() {
            let ids: Vec<&str> = retried.iter().map(|d| d.id.as_str()).collect();
            let attempts: Vec<i32> = retried
                .iter()
                .map(|d| i32::try_from(d.attempts).unwrap_or(i32::MAX))
                .collect();
            let due: Vec<i64> = retried.iter().map(|d| i(d.due_ms)).collect();
            let sql = "UPDATE outbox o SET attempts = r.attempts, due_ms = r.due_ms, \
                       lease_owner = NULL, lease_until_ms = NULL \
                       FROM unnest($1::text[], $2::int[], $3::bigint[]) AS r (id, attempts, due_ms) \
                       WHERE o.id = r.id";
            let retry = sqlx::query(sql).bind(ids).bind(attempts).bind(due);
            self.execute(retry).await?;
        }
        Ok(())
    }

    async fn release_deliveries(&self, webhook: &WebhookRef, now_ms: u64) -> Result<usize> {
        let sql = "UPDATE outbox SET due_ms = $3 \
                   WHERE webhook_team = $1 AND webhook_name = $2 AND due_ms > $3 \
                   AND (lease_until_ms IS NULL OR lease_until_ms < $3)";
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
        let rows: Vec<serde_json::Value> = executions
            .iter()
            .map(|e| {
                serde_json::json!({
                    "scope": scope_key(&e.automation.scope), "automation": e.automation.name,
                    "id": e.id, "delivery_id": e.delivery_id, "webhook_team": e.webhook.team,
                    "webhook_name": e.webhook.name, "status": status_text(e.status),
                    "error": e.error, "skipped": e.skipped, "event": e.event, "payload": e.payload,
                    "attempts": e.attempts, "body_sealed": e.body_sealed,
                    "created_at_ms": e.created_at_ms, "updated_at_ms": e.updated_at_ms,
                })
            })
            .collect();
        self.execute(
            sqlx::query(
                "INSERT INTO executions SELECT * FROM json_populate_recordset(NULL::executions, $1::json) \
                 ON CONFLICT (scope, automation, id) DO UPDATE SET \
                 status = excluded.status, error = excluded.error, skipped = excluded.skipped, payload = excluded.payload, \
                 attempts = excluded.attempts, body_sealed = excluded.body_sealed, \
                 updated_at_ms = excluded.updated_at_ms",
            )
            .bind(serde_json::Value::Array(rows).to_string()),
        )
        .await?;
        Ok(())
    }

    async fn execution(&self, automation: &Handle, id: &ExecutionId) -> Result<Option<Execution>> {
        self.optional(
            sqlx::query(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions \
                 WHERE scope = $1 AND automation = $2 AND id = $3"
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
                "SELECT {EXECUTION_COLUMNS} FROM executions \
                 WHERE scope = $1 AND automation = $2 ORDER BY id DESC LIMIT $3"
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
                        "DELETE FROM executions WHERE scope = $1 AND automation = $2 AND id = $3",
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
        let scopes: Vec<String> = attempts
            .iter()
            .map(|a| scope_key(&a.automation.scope))
            .collect();
        let names: Vec<&str> = attempts
            .iter()
            .map(|a| a.automation.name.as_str())
            .collect();
        let ids: Vec<&str> = attempts.iter().map(|a| a.execution_id.as_str()).collect();
        let statuses: Vec<&str> = attempts.iter().map(|a| status_text(a.status)).collect();
        let errors: Vec<Option<&str>> = attempts.iter().map(|a| a.error).collect();
        let added = attempts
            .iter()
            .map(|a| to_json(a.attempt))
            .collect::<Result<Vec<_>>>()?;
        let mut c = self.conn().await?;
        let updated: Vec<String> = sqlx::query_scalar(
            "UPDATE executions e SET status = a.status, error = a.error, \
             attempts = e.attempts || jsonb_build_array(a.attempt::jsonb), updated_at_ms = $7 \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) \
             AS a (scope, automation, id, status, error, attempt) \
             WHERE e.scope = a.scope AND e.automation = a.automation AND e.id = a.id \
             RETURNING e.id",
        )
        .bind(scopes)
        .bind(names)
        .bind(&ids)
        .bind(statuses)
        .bind(errors)
        .bind(added)
        .bind(i(crate::ids::now_ms()))
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        let updated: std::collections::HashSet<&str> = updated.iter().map(String::as_str).collect();
        Ok(ids.iter().map(|id| updated.contains(id)).collect())
    }
}
