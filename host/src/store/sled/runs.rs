//! Runs, their metrics, and run automations' firings.

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::decode;
use super::keys::prefix;
use super::shared::{last_segment, scoped};
use crate::model::{Handle, Run, RunState};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl RunRecords for Sled {
    async fn insert_run(&self, team: &str, project: &str, run: &Run) -> Result<()> {
        self.replace(T::Runs, prefix(&[team, project, &run.id]), run)
            .await
    }

    async fn run(&self, team: &str, project: &str, id: &str) -> Result<Option<Run>> {
        self.get_json(T::Runs, prefix(&[team, project, id]).as_ref())
    }

    async fn runs(&self, team: &str, project: &str) -> Result<Vec<Run>> {
        self.scan_json(T::Runs, prefix(&[team, project]).as_ref())
    }

    async fn push_metric(&self, at: MetricAt<'_>, value: f64, keep: usize) -> Result<Vec<f64>> {
        let key = prefix(&[at.team, at.project, at.run, at.metric]).into_bytes();
        let w = self.writer().await;
        let mut values: Vec<f64> = w.get_json(T::Metrics, &key)?.unwrap_or_default();
        values.push(value);
        if values.len() > keep {
            values.drain(..values.len() - keep);
        }
        w.put_json(T::Metrics, key, &values)?;
        w.finish()?;
        Ok(values)
    }

    async fn metrics(&self, team: &str, project: &str, run: &str) -> Result<Metrics> {
        self.scan(T::Metrics, prefix(&[team, project, run]).as_ref())?
            .into_iter()
            .map(|(key, value)| Ok((last_segment(&key).to_string(), decode(T::Metrics, &value)?)))
            .collect()
    }

    async fn set_run_state(&self, run: RunAt<'_>, from: RunState, to: RunState) -> Result<bool> {
        let key = prefix(&[run.team, run.project, run.id]).into_bytes();
        let w = self.writer().await;
        let Some(mut stored) = w.get_json::<Run>(T::Runs, &key)? else {
            return Ok(false);
        };
        if stored.state != from {
            return Ok(false);
        }
        stored.state = to;
        w.put_json(T::Runs, key, &stored)?;
        w.finish()?;
        Ok(true)
    }

    async fn run_fires(&self, automation: &Handle) -> Result<Vec<(String, u64)>> {
        let prefix = scoped(&automation.scope, &[&automation.name]);
        Ok(self
            .scan(T::RunFired, prefix.as_ref())?
            .into_iter()
            .filter_map(|(key, value)| {
                let at = u64::from_be_bytes(value.as_slice().try_into().ok()?);
                Some((last_segment(&key).to_string(), at))
            })
            .collect())
    }

    async fn claim_run_fire(&self, fire: (&Handle, &str), now: u64, window: u64) -> Result<bool> {
        let (automation, run) = fire;
        let key = scoped(&automation.scope, &[&automation.name, run]).into_bytes();
        let w = self.writer().await;
        let last = w
            .get(T::RunFired, &key)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map(u64::from_be_bytes);
        if last.is_some_and(|at| now.saturating_sub(at) < window) {
            return Ok(false);
        }
        w.put(T::RunFired, key, now.to_be_bytes().to_vec());
        w.finish()?;
        Ok(true)
    }
}
