//! The operator's page: the system check, the loaded plugins with their
//! call figures (upload, replace and remove templates and filters, through
//! the same checks as the operator API), and the users. Operators only;
//! others get the API's 403.

use askama::Template;
use axum::extract::State;

use axum::extract::Multipart;

use super::{Failed, Nav, Posted, Shown, Viewer};
use crate::app::App;
use crate::app::health::{self, Check};
use crate::automation::uploads;
use crate::error::Error;
use crate::plugin::Spec;
use crate::plugin::{Kind, Limits, Source};
use crate::plugin::{validate_name, validate_version};

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
    csrf: String,
    note: Option<String>,
    error: Option<String>,
    healthy: bool,
    checks: Vec<(&'static str, Check)>,
    quarantined: usize,
    plugins: Vec<PluginRow>,
    users: Vec<(String, bool, String)>,
}

/// `GET /operator`.
pub async fn show(State(app): State<App>, viewer: Viewer) -> Shown {
    operator_page(&app, &viewer, None, None).await
}

/// Fails unless `viewer` is an operator, as the operator API does.
fn require_operator(viewer: &Viewer) -> Result<(), Failed> {
    if viewer.user.operator {
        return Ok(());
    }
    let error = Error::PermissionDenied("only an operator may manage this host".into());
    Err(Failed::new(error, viewer))
}

async fn operator_page(
    app: &App,
    viewer: &Viewer,
    note: Option<String>,
    error: Option<Error>,
) -> Shown {
    require_operator(viewer)?;
    let report = health::system_check(app).await;
    let users = crate::domain::auth::list_users(&app.store)
        .await
        .map_err(|e| Failed::new(e, viewer))?;
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
    super::ok(&OperatorPage {
        nav: Some(viewer.nav()),
        csrf: viewer.csrf().to_string(),
        note,
        error: error.map(|e| e.to_string()),
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
            .map(|u| (u.name, u.operator, super::when(u.created_at * 1000)))
            .collect(),
    })
}

/// `POST /operator/plugins` (multipart): uploads or replaces a plugin
/// through the same checks as the operator API; a model backend with its
/// grant (hosts, credential variable, environment, per-call instances).
pub async fn upload(State(app): State<App>, viewer: Viewer, form: Multipart) -> Shown {
    require_operator(&viewer)?;
    let installed = async {
        let fields = read_upload(form, viewer.csrf()).await?;
        let field = |name: &str| {
            fields
                .get(name)
                .map(|v| String::from_utf8_lossy(v).trim().to_string())
                .unwrap_or_default()
        };
        let name = field("name");
        validate_name(&name).map_err(|m| Error::invalid("name", m))?;
        let version = field("version");
        validate_version(&version).map_err(|m| Error::invalid("version", m))?;
        let kind: Kind = field("kind")
            .parse()
            .map_err(|m: String| Error::invalid("kind", m))?;
        let given = |name: &str| Some(field(name)).filter(|v| !v.is_empty());
        let grant = uploads::grant_of(
            kind,
            env_lines(&field("env"))?,
            given("allow_hosts").as_deref(),
            given("api_key_env"),
            given("per_call").map(|_| true),
        )?;
        let spec = Spec {
            name,
            kind,
            version,
            limits: Some(Limits::default_for(kind)),
            source: Source::Upload,
            grant,
            bytes: fields.get("file").cloned().unwrap_or_default(),
        };
        uploads::install(&app.store, &app.plugins, spec).await
    };
    match installed.await {
        Ok((plugin, previous)) => {
            tracing::info!(plugin = %plugin.id(), by = %viewer.user.name, "plugin uploaded from the console");
            let note = match previous {
                Some(old) => format!("{} replaced version {}.", plugin.id(), old.version),
                None => format!("{} is loaded.", plugin.id()),
            };
            operator_page(&app, &viewer, Some(note), None).await
        }
        Err(e @ Error::PermissionDenied(_)) => Err(Failed::new(e, &viewer)),
        Err(
            e @ (Error::InvalidRequest { .. } | Error::Conflict(_) | Error::PluginRefused { .. }),
        ) => operator_page(&app, &viewer, None, Some(e)).await,
        Err(e) => Err(Failed::new(e, &viewer)),
    }
}

/// A backend's environment as the form gives it: `NAME=value` lines.
fn env_lines(text: &str) -> Result<std::collections::BTreeMap<String, String>, Error> {
    let mut env = std::collections::BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            return Err(Error::invalid(
                "env",
                format!(
                    "line {} ('{line}') is not NAME=value; write one variable per line",
                    n + 1
                ),
            ));
        };
        env.insert(name.trim().to_string(), value.trim().to_string());
    }
    Ok(env)
}

/// The fields of the upload form, its CSRF token checked first.
async fn read_upload(
    mut form: Multipart,
    csrf: &str,
) -> Result<std::collections::HashMap<String, Vec<u8>>, Error> {
    let unreadable = |e: axum::extract::multipart::MultipartError| {
        Error::invalid("file", format!("the upload could not be read: {e}"))
    };
    let mut fields = std::collections::HashMap::new();
    while let Some(field) = form.next_field().await.map_err(unreadable)? {
        let name = field.name().unwrap_or_default().to_string();
        let bytes = field.bytes().await.map_err(unreadable)?;
        if name == "csrf" && bytes.as_ref() != csrf.as_bytes() {
            break;
        }
        fields.insert(name, bytes.to_vec());
    }
    if fields.get("csrf").map(Vec::as_slice) != Some(csrf.as_bytes()) {
        return Err(Error::PermissionDenied(
            "the form's CSRF token is missing or stale; reload the page and submit it again".into(),
        ));
    }
    Ok(fields)
}

/// `POST /operator/plugins/{name}/remove`: refused, naming them, while
/// automations use it.
pub async fn remove(
    State(app): State<App>,
    axum::extract::Path(name): axum::extract::Path<String>,
    posted: Posted,
) -> Shown {
    let viewer = &posted.viewer;
    require_operator(viewer)?;
    match uploads::remove(&app.store, &app.plugins, &name, false).await {
        Ok(()) => {
            let note = format!("{name} is removed.");
            operator_page(&app, viewer, Some(note), None).await
        }
        Err(e @ Error::Conflict(_)) => operator_page(&app, viewer, None, Some(e)).await,
        Err(e) => Err(Failed::new(e, viewer)),
    }
}
