//! Automations, indexed by trigger (scope and event type) and by webhook.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{automation, get, i, parse_scope, q, scope_key, to_json, u};
use crate::model::{Automation, EventType, Handle, Scope, Skipped};
use crate::store::records::*;
use crate::store::{Result, changes};
use sqlx::postgres::PgRow;

#[async_trait]
impl AutomationRecords for Postgres {
    async fn save_automation(&self, replacing: Option<&str>, a: &Automation) -> Result<bool> {
        let scope = scope_key(&a.scope);
        let mut c = self.conn().await?;
        let mut t = sqlx::Connection::begin(&mut *c).await.db(self)?;
        if let Some(old) = replacing {
            sqlx::query("DELETE FROM automations WHERE scope = $1 AND name = $2")
                .bind(&scope)
                .bind(old)
                .execute(&mut *t)
                .await
                .db(self)?;
        }
        let state = match a.state {
            crate::model::State::Active => "active",
            crate::model::State::Disabled => "disabled",
        };
        let done = sqlx::query(
            "INSERT INTO automations (scope, name, event_type, webhook_team, webhook_name, state, \
             record) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT DO NOTHING",
        )
        .bind(&scope)
        .bind(&a.name)
        .bind(a.event.event_type().as_str())
        .bind(&a.webhook.team)
        .bind(&a.webhook.name)
        .bind(state)
        .bind(to_json(a)?)
        .execute(&mut *t)
        .await
        .db(self)?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        t.commit().await.db(self)?;
        self.changed(changes::path("automations", &[&scope]));
        Ok(true)
    }

    async fn automation(&self, scope: &Scope, name: &str) -> Result<Option<Automation>> {
        let sql = "SELECT record::text AS record FROM automations WHERE scope = $1 AND name = $2";
        let scope = scope_key(scope);
        self.optional(q(sql, &[&scope, name]), automation).await
    }

    async fn automations(&self, scope: &Scope) -> Result<Vec<Automation>> {
        let sql = "SELECT record::text AS record FROM automations WHERE scope = $1 ORDER BY name";
        self.all(q(sql, &[&scope_key(scope)]), automation).await
    }

    async fn all_automations(&self) -> Result<Vec<Automation>> {
        let mut c = self.conn().await?;
        let rows =
            sqlx::query("SELECT record::text AS record FROM automations ORDER BY scope, name")
                .fetch_all(&mut *c)
                .await
                .db(self)?;
        rows.iter().map(automation).collect()
    }

    async fn triggered(&self, scope: &Scope, event: EventType) -> Result<Vec<Automation>> {
        let sql = "SELECT record::text AS record FROM automations \
                 WHERE scope = $1 AND event_type = $2 AND state = 'active' ORDER BY name";
        let scope = scope_key(scope);
        self.all(q(sql, &[&scope, event.as_str()]), automation)
            .await
    }

    async fn listens(&self, scope: &Scope, event: EventType) -> Result<bool> {
        let mut c = self.conn().await?;
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM automations WHERE scope = $1 AND event_type = $2)",
        )
        .bind(scope_key(scope))
        .bind(event.as_str())
        .fetch_one(&mut *c)
        .await
        .db(self)
    }

    async fn automations_using(&self, team: &str, webhook: &str) -> Result<Vec<Handle>> {
        let sql = "SELECT scope, name FROM automations WHERE webhook_team = $1 \
                   AND webhook_name = $2 ORDER BY scope, name";
        let handle = |r: &PgRow| {
            let scope = parse_scope(&get::<String>(r, "scope")?)?;
            Ok(Handle {
                scope,
                name: get(r, "name")?,
            })
        };
        self.all(q(sql, &[team, webhook]), handle).await
    }

    async fn delete_automation(&self, scope: &Scope, name: &str) -> Result<bool> {
        let scope = scope_key(scope);
        let sql = "DELETE FROM automations WHERE scope = $1 AND name = $2";
        let deleted = self.execute(q(sql, &[&scope, name])).await? > 0;
        self.changed(changes::path("automations", &[&scope]));
        Ok(deleted)
    }

    async fn fires(&self, automation: &Handle) -> Result<Vec<u64>> {
        let mut c = self.conn().await?;
        let fires: Option<Vec<i64>> = sqlx::query_scalar(
            "SELECT fires FROM automation_fires WHERE scope = $1 AND automation = $2",
        )
        .bind(scope_key(&automation.scope))
        .bind(&automation.name)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(fires.unwrap_or_default().into_iter().map(u).collect())
    }

    async fn admit_fire(&self, automation: &Handle, admit: Admit<'_>) -> Result<Option<Skipped>> {
        // On a connection of its own, outside the batch's transaction: the
        // row is locked for one statement, not until the batch commits, so
        // hosts firing one automation do not wait for each other's batches.
        let scope = scope_key(&automation.scope);
        let mut c = self
            .shared
            .pool
            .acquire()
            .await
            .map_err(|e| self.shared.unavailable(e))?;
        loop {
            let fires: Option<Vec<i64>> = sqlx::query_scalar(
                "SELECT fires FROM automation_fires WHERE scope = $1 AND automation = $2",
            )
            .bind(&scope)
            .bind(&automation.name)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
            let mut next: Vec<u64> = fires.iter().flatten().map(|f| u(*f)).collect();
            if let Err(skipped) = admit(&mut next) {
                return Ok(Some(skipped));
            }
            let next: Vec<i64> = next.into_iter().map(i).collect();
            // Written only if no host admitted a firing since the read;
            // otherwise decided again on what that host wrote.
            let written = sqlx::query(
                "INSERT INTO automation_fires AS f (scope, automation, fires) VALUES ($1, $2, $3) \
                 ON CONFLICT (scope, automation) DO UPDATE SET fires = excluded.fires \
                 WHERE f.fires = $4",
            )
            .bind(&scope)
            .bind(&automation.name)
            .bind(&next)
            .bind(fires.unwrap_or_else(|| vec![i64::MIN]))
            .execute(&mut *c)
            .await
            .db(self)?;
            if written.rows_affected() == 1 {
                return Ok(None);
            }
        }
    }
}
