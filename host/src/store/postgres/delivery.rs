//! The delivery path: the event inbox, the outbox, executions and their attempts.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{
    EXECUTION_COLUMNS, delivery, execution, get, i, scope_key, status_text, to_json, u,
};
use crate::model::{Delivery, Event, Execution, Handle};
use crate::store::Result;
use crate::store::records::*;

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

    async fn take_event(&self, id: &str) -> Result<bool> {
        Ok(self
            .execute(sqlx::query("DELETE FROM event_inbox WHERE id = $1").bind(id))
            .await?
            > 0)
    }

    async fn insert_delivery(&self, d: &Delivery) -> Result<()> {
        // Held by this host from the start: it sends the delivery at once.
        let lease_until = crate::ids::now_ms().saturating_add(self.shared.lease_ms);
        self.execute(sqlx::query(
            "INSERT INTO outbox (id, scope, automation, execution_id, webhook_team, webhook_name, \
             body_sealed, attempts, due_ms, lease_owner, lease_until_ms, event_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (id) DO UPDATE SET attempts = excluded.attempts, \
             due_ms = excluded.due_ms, lease_owner = excluded.lease_owner, \
             lease_until_ms = excluded.lease_until_ms",
        )
        .bind(&d.id)
        .bind(scope_key(&d.execution.scope))
        .bind(&d.execution.name)
        .bind(&d.execution_id)
        .bind(&d.webhook.team)
        .bind(&d.webhook.name)
        .bind(&d.body_sealed)
        .bind(i32::try_from(d.attempts).unwrap_or(i32::MAX))
        .bind(i(d.due_ms))
        .bind(&self.shared.host_id)
        .bind(i(lease_until))
        .bind(i(d.event_at_ms))).await?;
        Ok(())
    }

    async fn due_deliveries(&self, now_ms: u64, limit: usize, _skip: Skip<'_>) -> Result<Due> {
        // This host's deliveries in flight hold live leases, so the claim
        // below never returns them.
        let mut c = self.conn().await?;
        // Claims what is due and not held by a live lease; a host that died
        // holding deliveries lets them go when its leases run out.
        let rows = sqlx::query(
            "UPDATE outbox SET lease_owner = $1, lease_until_ms = $2 + $3 \
             WHERE id IN (SELECT id FROM outbox WHERE due_ms <= $2 \
             AND (lease_until_ms IS NULL OR lease_until_ms < $2) \
             ORDER BY due_ms LIMIT $4 FOR UPDATE SKIP LOCKED) \
             RETURNING *",
        )
        .bind(&self.shared.host_id)
        .bind(i(now_ms))
        .bind(i(self.shared.lease_ms))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT min(greatest(due_ms, coalesce(lease_until_ms, 0))) FROM outbox \
             WHERE lease_owner IS DISTINCT FROM $1 OR lease_until_ms < $2",
        )
        .bind(&self.shared.host_id)
        .bind(i(now_ms))
        .fetch_one(&mut *c)
        .await
        .db(self)?;
        let due = rows.iter().map(delivery).collect::<Result<Vec<_>>>()?;
        Ok((due, next.map(u)))
    }

    async fn delivery_waits(&self, d: &Delivery) -> Result<bool> {
        let mut c = self.conn().await?;
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM outbox WHERE id = $1 AND due_ms = $2 AND attempts = $3)",
        )
        .bind(&d.id)
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
                .bind(&d.id)
                .bind(&self.shared.host_id)
                .bind(i(until)),
        )
        .await?;
        Ok(())
    }

    async fn finish_delivery(&self, d: &Delivery, next: Option<&Delivery>) -> Result<()> {
        let mut c = self.conn().await?;
        match next {
            Some(next) => {
                sqlx::query(
                    "UPDATE outbox SET attempts = $2, due_ms = $3, lease_owner = NULL, \
                     lease_until_ms = NULL WHERE id = $1",
                )
                .bind(&d.id)
                .bind(i32::try_from(next.attempts).unwrap_or(i32::MAX))
                .bind(i(next.due_ms))
                .execute(&mut *c)
                .await
                .db(self)?;
            }
            None => {
                sqlx::query("DELETE FROM outbox WHERE id = $1")
                    .bind(&d.id)
                    .execute(&mut *c)
                    .await
                    .db(self)?;
            }
        }
        Ok(())
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

    async fn put_execution(&self, e: &Execution) -> Result<()> {
        self.execute(
            sqlx::query(
                "INSERT INTO executions (scope, automation, id, delivery_id, webhook_team, \
                 webhook_name, status, error, event, payload, attempts, body_sealed, created_at_ms, \
                 updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11::jsonb, \
                 $12, $13, $14) ON CONFLICT (scope, automation, id) DO UPDATE SET \
                 status = excluded.status, error = excluded.error, payload = excluded.payload, \
                 attempts = excluded.attempts, body_sealed = excluded.body_sealed, \
                 updated_at_ms = excluded.updated_at_ms",
            )
            .bind(scope_key(&e.automation.scope))
            .bind(&e.automation.name)
            .bind(&e.id)
            .bind(&e.delivery_id)
            .bind(&e.webhook.team)
            .bind(&e.webhook.name)
            .bind(status_text(e.status))
            .bind(&e.error)
            .bind(to_json(&e.event)?)
            .bind(&e.payload)
            .bind(to_json(&e.attempts)?)
            .bind(&e.body_sealed)
            .bind(i(e.created_at_ms))
            .bind(i(e.updated_at_ms)),
        )
        .await?;
        Ok(())
    }

    async fn execution(&self, automation: &Handle, id: &str) -> Result<Option<Execution>> {
        self.optional(
            sqlx::query(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions \
                 WHERE scope = $1 AND automation = $2 AND id = $3"
            ))
            .bind(scope_key(&automation.scope))
            .bind(&automation.name)
            .bind(id),
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

    async fn record_attempt(&self, new: AttemptFor<'_>) -> Result<bool> {
        Ok(self
            .execute(
                sqlx::query(
                    "UPDATE executions SET status = $4, error = $5, \
                     attempts = attempts || jsonb_build_array($6::jsonb), updated_at_ms = $7 \
                     WHERE scope = $1 AND automation = $2 AND id = $3",
                )
                .bind(scope_key(&new.automation.scope))
                .bind(&new.automation.name)
                .bind(new.execution_id)
                .bind(status_text(new.status))
                .bind(new.error)
                .bind(to_json(new.attempt)?)
                .bind(i(crate::ids::now_ms())),
            )
            .await?
            > 0)
    }
}
