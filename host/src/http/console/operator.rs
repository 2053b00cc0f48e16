//! The operator's page: the system check, the loaded plugins with their
//! call figures, and the users. Operators only; others get the API's 403.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;

use super::{Failed, Nav, Shown, Viewer, page};
use crate::app::App;
use crate::error::Error;
use crate::health::{self, Check};

/// A plugin as listed.
struct PluginRow {
    name: String,
    kind: &'static str,
    version: String,
    source: String,
    calls: u64,
    failures: u64,
    p50: String,
}

#[derive(Template)]
#[template(path = "console/operator.html")]
struct OperatorPage {
    nav: Option<Nav>,
    healthy: bool,
    checks: Vec<(&'static str, Check)>,
    quarantined: usize,
    plugins: Vec<PluginRow>,
    users: Vec<(String, bool, String)>,
}

/// `GET /operator`.
pub async fn show(State(app): State<App>, viewer: Viewer) -> Shown {
    if !viewer.user.operator {
        let error = Error::PermissionDenied("only an operator may see the operator page".into());
        return Err(Failed::new(error, &viewer));
    }
    let report = health::system_check(&app).await;
    let users = crate::auth::list_users(&app.store)
        .await
        .map_err(|e| Failed::new(e, &viewer))?;
    let mut plugins: Vec<PluginRow> = app
        .plugins
        .list()
        .iter()
        .map(|p| PluginRow {
            name: p.name.clone(),
            kind: p.kind.as_str(),
            version: p.version.clone(),
            source: format!("{:?}", p.source).to_lowercase(),
            calls: p.stats().calls(),
            failures: p.stats().failures(),
            p50: p
                .stats()
                .p50_us()
                .map_or("-".into(), |us| format!("{us} µs")),
        })
        .collect();
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(page(
        StatusCode::OK,
        &OperatorPage {
            nav: Some(viewer.nav()),
            healthy: report.healthy(),
            quarantined: report.quarantined_records,
            checks: vec![
                ("database", report.database),
                ("cpu_queue", report.cpu_queue),
                ("gpu_queue", report.gpu_queue),
            ],
            plugins,
            users: users
                .into_iter()
                .map(|u| (u.name, u.operator, super::teams::date(u.created_at)))
                .collect(),
        },
    ))
}
