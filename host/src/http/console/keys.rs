//! The viewer's API keys: created (shown once) and revoked here, and their
//! usage without a project.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect};

use super::session::{optional_number, optional_usd};
use super::usage::Chart;
use super::{Dated, Failed, Nav, Posted, Shown, Viewer};
use crate::app::App;
use crate::domain::auth::{self, ApiKey};
use crate::error::Error;
use crate::inference::usage;

#[derive(Template)]
#[template(path = "console/keys.html")]
struct KeysPage {
    nav: Option<Nav>,
    csrf: String,
    /// Never a key's value: only its record.
    keys: Vec<Dated<ApiKey>>,
    /// A key just created: its name and value, shown this once.
    new_key: Option<(String, String)>,
    error: Option<String>,
    chart: Chart,
}

/// `GET /keys`.
pub async fn list(State(app): State<App>, viewer: Viewer) -> Shown {
    keys_page(&app, &viewer, None, None).await
}

async fn keys_page(
    app: &App,
    viewer: &Viewer,
    new_key: Option<auth::NewKey>,
    error: Option<Error>,
) -> Shown {
    let failed = |e| Failed::new(e, viewer);
    let keys = auth::list_keys(&app.store, &viewer.user)
        .await
        .map_err(failed)?;
    let scope = usage::personal_scope(&viewer.user.name);
    let rows = usage::rows(&app.store, &scope).await.map_err(failed)?;
    super::ok(&KeysPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        keys: keys
            .into_iter()
            .map(|k| Dated::new(k, |k| k.created_at))
            .collect(),
        new_key: new_key.map(|k| (k.record.name, k.key)),
        error: error.map(|e| e.to_string()),
        chart: Chart::of(&rows, None),
    })
}

/// The form as a key spec: lists comma-separated, the expiry in days.
fn spec(posted: &Posted) -> Result<auth::KeySpec, Error> {
    let list = |field: &str| {
        let items: Vec<String> = posted
            .field(field)
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        (!items.is_empty()).then_some(items)
    };
    let days: Option<u64> = optional_number("expires_in_days", posted.field("expires_in_days"))?;
    Ok(auth::KeySpec {
        name: posted.field("name").to_string(),
        models: list("models"),
        projects: list("projects"),
        expires_at: days.map(|d| crate::ids::now().saturating_add(d.saturating_mul(86_400))),
        rpm: optional_number("rpm", posted.field("rpm"))?,
        tpm: optional_number("tpm", posted.field("tpm"))?,
        tokens_per_day: optional_number("tokens_per_day", posted.field("tokens_per_day"))?,
        usd_per_day: optional_usd("usd_per_day", posted.field("usd_per_day"))?,
        usd_per_month: optional_usd("usd_per_month", posted.field("usd_per_month"))?,
    })
}

/// `POST /keys`: creates a key and shows it once.
pub async fn create(State(app): State<App>, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    let created = match spec(&posted) {
        Ok(spec) => auth::create_key(&app.store, &viewer.user, &spec).await,
        Err(e) => Err(e),
    };
    match created {
        Ok(key) => {
            tracing::info!(user = %viewer.user.name, key_id = %key.record.id, "API key created");
            keys_page(&app, viewer, Some(key), None).await
        }
        Err(e @ Error::InvalidRequest { .. }) => keys_page(&app, viewer, None, Some(e)).await,
        Err(e) => Err(Failed::new(e, viewer)),
    }
}

/// `POST /keys/{id}/revoke`.
pub async fn revoke(State(app): State<App>, Path(id): Path<String>, posted: Posted) -> Shown {
    let viewer = &posted.viewer;
    auth::revoke_key(&app.store, &viewer.user, &id)
        .await
        .map_err(|e| Failed::new(e, viewer))?;
    tracing::info!(user = %viewer.user.name, key_id = %id, "API key revoked");
    Ok(Redirect::to("/keys").into_response())
}
