//! `GET /v1/system-check`: no auth; 200 when healthy, 503 with the same body otherwise.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::app::App;
use crate::app::health;

pub async fn system_check(State(app): State<App>) -> Response {
    let report = health::system_check(&app).await;
    let status = if report.healthy() {
        StatusCode::OK
    } else {
        tracing::warn!(failing = %report.failures(), "system check failed");
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(report)).into_response()
}
