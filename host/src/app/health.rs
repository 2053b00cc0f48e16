//! The system check: is the API up, does the store work, do the queues run jobs?
//!
//! Every check reports `{success, duration_ms, errors}`: `duration_ms` is a
//! float in milliseconds, `errors` a list of messages (empty on success).
//! Each probe is bounded by `health.probe_timeout_ms`.

use std::future::Future;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::app::App;
use crate::store::StoreError;

/// The outcome of one check.
#[cfg_attr(test, derive(serde::Deserialize))]
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Whether the check passed.
    pub success: bool,
    /// How long it took, in milliseconds.
    pub duration_ms: f64,
    /// What went wrong; empty on success.
    pub errors: Vec<String>,
}

/// The body of `GET /v1/system-check`.
#[cfg_attr(test, derive(serde::Deserialize))]
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always true: the API answered.
    pub api: bool,
    /// A write, read and delete in the store.
    pub database: Check,
    /// A real render by `template-default`, through the plugin work queue.
    pub cpu_queue: Check,
    /// A probe job through the inference queue.
    pub gpu_queue: Check,
    /// Stored records that could not be read and were set aside (see the
    /// store's quarantine); anything above zero needs an operator's look.
    pub quarantined_records: usize,
}

impl Report {
    /// The failing checks and their errors, as one line for the log:
    /// `database: …; gpu_queue: …`.
    pub fn failures(&self) -> String {
        [
            ("database", &self.database),
            ("cpu_queue", &self.cpu_queue),
            ("gpu_queue", &self.gpu_queue),
        ]
        .iter()
        .filter(|(_, check)| !check.success)
        .map(|(name, check)| format!("{name}: {}", check.errors.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
    }

    /// True when every check passed.
    pub fn healthy(&self) -> bool {
        self.database.success && self.cpu_queue.success && self.gpu_queue.success
    }
}

/// Runs every check concurrently; the whole check answers within the
/// probe timeout, whatever the store does.
pub async fn system_check(app: &App) -> Report {
    let limit = Duration::from_millis(app.cfg.health.probe_timeout_ms);
    let store = &app.store;
    // Read inside the timed probe: a stalled store must not hold the answer.
    let mut quarantined = 0;
    let database = check(limit, async {
        store.round_trip().await.map_err(explain)?;
        quarantined = store.quarantined().await.map_err(explain)?;
        if store.full() {
            anyhow::bail!(
                "the disk holding the store is full (store_full): writes are refused until it has room again"
            );
        }
        Ok(())
    });
    let (database, cpu_queue, gpu_queue) = tokio::join!(
        database,
        check(limit, render_probe(app.plugins.clone())),
        check(limit, app.inference.probe()),
    );
    Report {
        api: true,
        database,
        cpu_queue,
        gpu_queue,
        quarantined_records: quarantined,
    }
}

/// A store failure as the check reports it: where the store is and why it
/// cannot be reached are in the host's log, never in this open answer.
fn explain(e: StoreError) -> anyhow::Error {
    match e {
        StoreError::Unavailable => anyhow::anyhow!(
            "the store is unavailable (store_unavailable); the host's log says where and why"
        ),
        other => other.into(),
    }
}

async fn check(limit: Duration, probe: impl Future<Output = anyhow::Result<()>>) -> Check {
    let start = Instant::now();
    let errors = match tokio::time::timeout(limit, probe).await {
        Ok(Ok(())) => vec![],
        Ok(Err(e)) => vec![format!("{e:#}")],
        Err(_) => vec![format!(
            "the probe did not finish within {} ms",
            limit.as_millis()
        )],
    };
    Check {
        success: errors.is_empty(),
        duration_ms: (start.elapsed().as_secs_f64() * 1e6).round() / 1e3,
        errors,
    }
}

/// Renders a known template through the plugin work queue and checks the answer.
async fn render_probe(plugins: std::sync::Arc<crate::plugin::Plugins>) -> anyhow::Result<()> {
    use crate::plugin::{TEMPLATE_DEFAULT, Variable};
    let (workers, waiting) = (plugins.queue.workers(), plugins.queue.waiting());
    let vars = vec![Variable {
        name: "event_type".into(),
        value: "\"PROBE\"".into(),
    }];
    let out = plugins
        .render(
            TEMPLATE_DEFAULT,
            crate::plugin::HOST,
            r#"{"probe": "${event_type}"}"#.into(),
            vars,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e} (workers: {workers}, waiting: {waiting})"))?;
    anyhow::ensure!(
        out == r#"{"probe": "PROBE"}"#,
        "the probe render returned {out}"
    );
    Ok(())
}
