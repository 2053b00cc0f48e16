//! `GET /metrics`: Prometheus metrics (see [`crate::telemetry`]).

use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::scope::Operator;
use crate::app::App;
use crate::error::Result;
use crate::telemetry::{self, Gauges};

/// The exposition, open to any caller.
pub async fn scrape(State(app): State<App>) -> Result<Response> {
    exposition(&app).await
}

/// The exposition, for operators only (`[metrics] require_key`).
pub async fn scrape_as_operator(op: Operator) -> Result<Response> {
    exposition(&op.app).await
}

async fn exposition(app: &App) -> Result<Response> {
    let first_due = app.store.first_due().await?;
    let now = crate::ids::now_ms();
    let gauges = Gauges {
        outbox_pending: app.store.pending_deliveries().await?,
        outbox_oldest_due: Duration::from_millis(
            first_due.map_or(0, |due| now.saturating_sub(due)),
        ),
        queues: vec![
            ("plugin", app.plugins.queue.waiting()),
            ("inference", app.inference.waiting()),
        ],
        quarantined: app.store.quarantined().await?,
    };
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        telemetry::render(gauges),
    )
        .into_response())
}
