//! Runs, their metrics, and run automations' firings.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{i, q, run, scope_key, u};
use crate::model::{Handle, Run, RunState};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl RunRecords for Postgres {
    async fn insert_run(&self, team: &str, project: &str, r: &Run) -> Result<()> {
        let keys = [("team", team), ("project", project)];
        self.insert("runs", &keys, r, "").await.map(drop)
    }

    async fn run(&self, team: &str, project: &str, id: &str) -> Result<Option<Run>> {
        let sql = "SELECT * FROM runs WHERE team = $1 AND project = $2 AND id = $3";
        self.optional(q(sql, &[team, project, id]), run).await
    }

    async fn runs(&self, team: &str, project: &str) -> Result<Vec<Run>> {
        let sql = "SELECT * FROM runs WHERE team = $1 AND project = $2 ORDER BY id";
        self.all(q(sql, &[team, project]), run).await
    }

    async fn push_metric(&self, at: MetricAt<'_>, value: f64, keep: usize) -> Result<Vec<f64>> {
        let mut c = self.conn().await?;
        sqlx::query_scalar(
            "INSERT INTO run_metrics (team, project, run, metric, vals) \
             VALUES ($1, $2, $3, $4, ARRAY[$5::double precision]) \
             ON CONFLICT (team, project, run, metric) DO UPDATE SET vals = \
             (run_metrics.vals || $5::double precision)\
             [greatest(1, cardinality(run_metrics.vals) + 2 - $6):] \
             RETURNING vals",
        )
        .bind(at.team)
        .bind(at.project)
        .bind(at.run)
        .bind(at.metric)
        .bind(value)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .fetch_one(&mut *c)
        .await
        .db(self)
    }

    async fn metrics(&self, team: &str, project: &str, run: &str) -> Result<Metrics> {
        let mut c = self.conn().await?;
        sqlx::query_as(
            "SELECT metric, vals FROM run_metrics WHERE team = $1 AND project = $2 AND run = $3 \
             ORDER BY metric",
        )
        .bind(team)
        .bind(project)
        .bind(run)
        .fetch_all(&mut *c)
        .await
        .db(self)
    }

    async fn set_run_state(&self, run: RunAt<'_>, from: RunState, to: RunState) -> Result<bool> {
        let sql = "UPDATE runs SET state = $5 WHERE team = $1 AND project = $2 AND id = $3 AND state = $4";
        let changed = self
            .execute(q(
                sql,
                &[run.team, run.project, run.id, from.as_str(), to.as_str()],
            ))
            .await?;
        Ok(changed == 1)
    }

    async fn run_fires(&self, automation: &Handle) -> Result<Vec<(String, u64)>> {
        let mut c = self.conn().await?;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT run, at_ms FROM run_fired WHERE scope = $1 AND automation = $2 ORDER BY run",
        )
        .bind(scope_key(&automation.scope))
        .bind(&automation.name)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        Ok(rows.into_iter().map(|(run, at)| (run, u(at))).collect())
    }

    async fn claim_run_fire(&self, fire: (&Handle, &str), now: u64, window: u64) -> Result<bool> {
        let (automation, run) = fire;
        let mut c = self.conn().await?;
        let claimed: Option<i32> = sqlx::query_scalar(
            "INSERT INTO run_fired (scope, automation, run, at_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, automation, run) DO UPDATE SET at_ms = excluded.at_ms \
             WHERE run_fired.at_ms <= excluded.at_ms - $5 RETURNING 1",
        )
        .bind(scope_key(&automation.scope))
        .bind(&automation.name)
        .bind(run)
        .bind(i(now))
        .bind(i(window))
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(claimed.is_some())
    }
}
