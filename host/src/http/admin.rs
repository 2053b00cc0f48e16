//! `/v1/admin/plugins`: operators load, list, replace, remove and try plugins.

use super::{Reply, ReplyWith};
use std::sync::Arc;

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Json;
use super::json::{WasmBody, parse};
use super::query::{Force, Query};
use super::scope::Operator;
use crate::app::App;
use crate::automation::uploads;
use crate::error::{Error, Result};
use crate::plugin::HOST;
use crate::plugin::Spec;
use crate::plugin::{FilterInput, TemplateInput};
use crate::plugin::{Kind, Plugin, Source};
use crate::plugin::{LimitOverrides, validate_name, validate_version};

/// What the API shows of a plugin.
#[derive(serde::Serialize)]
pub struct PluginShown {
    pub(super) name: String,
    pub(super) kind: Kind,
    pub(super) version: String,
    pub(super) sha256: String,
    pub(super) source: Source,
    pub(super) loaded_at: u64,
    pub(super) size_bytes: usize,
    pub(super) limits: crate::plugin::Limits,
    pub(super) calls: u64,
    pub(super) failures: u64,
    /// Median call time, once there are calls.
    pub(super) p50_us: Option<u32>,
    /// A model backend's models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) models: Option<Vec<String>>,
    /// For an upload that replaced a plugin: what it replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) replaced: Option<Replaced>,
}

/// The plugin an upload replaced.
#[derive(serde::Serialize)]
pub struct Replaced {
    pub(super) version: String,
    pub(super) sha256: String,
}

/// What the API shows of a plugin.
pub fn describe(plugin: &Plugin) -> PluginShown {
    let stats = plugin.stats();
    PluginShown {
        name: plugin.name.clone(),
        kind: plugin.kind,
        version: plugin.version.clone(),
        sha256: plugin.sha256.clone(),
        source: plugin.source,
        loaded_at: plugin.loaded_at,
        size_bytes: plugin.size_bytes,
        limits: plugin.limits,
        calls: stats.calls(),
        failures: stats.failures(),
        p50_us: stats.p50_us(),
        models: (plugin.served()).map(|s| s.model_ids().into_iter().map(String::from).collect()),
        replaced: None,
    }
}

pub async fn list(op: Operator) -> Reply<Value> {
    let data: Vec<PluginShown> = op.app.plugins.list().iter().map(|p| describe(p)).collect();
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "directory_errors": op.app.watcher.errors(),
    })))
}

pub async fn show(op: Operator, Path(name): Path<String>) -> Reply<PluginShown> {
    let plugin = find(&op.app, &name)?;
    Ok(axum::Json(describe(&plugin)))
}

fn find(app: &App, name: &str) -> Result<Arc<Plugin>> {
    app.plugins.get(name).ok_or_else(|| {
        Error::NotFound(format!(
            "no plugin named '{name}' is loaded; GET /v1/admin/plugins lists them"
        ))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    kind: String,
    version: String,
    // Listed, not flattened: flatten makes the query parser see numbers as strings.
    memory_mb: Option<u64>,
    cpu_ms: Option<u64>,
    timeout_ms: Option<u64>,
    /// Model backends: `host:port` authorities, comma-separated.
    allow_hosts: Option<String>,
    /// Model backends: the host variable holding the upstream credential.
    api_key_env: Option<String>,
    /// Model backends: a fresh instance per call.
    per_call: Option<bool>,
}

impl Upload {
    /// Parses the query: the fields above, and `env.NAME=value` pairs, which
    /// are a model backend's environment.
    fn parse(query: &str) -> Result<(Upload, BTreeMap<String, String>)> {
        let (env, rest): (Vec<_>, Vec<_>) = url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .partition(|(key, _)| key.starts_with("env."));
        let rest = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(rest)
            .finish();
        let upload = serde_urlencoded::from_str(&rest).map_err(|e| Error::InvalidRequest {
            message: format!("invalid query parameters: {e}"),
            param: None,
        })?;
        let env = env
            .into_iter()
            .map(|(key, value)| (key["env.".len()..].to_string(), value))
            .collect();
        Ok((upload, env))
    }
}

/// `PUT /v1/admin/plugins/{name}?kind=…&version=…[&memory_mb=…&cpu_ms=…&timeout_ms=…]`
/// with the component as an `application/wasm` body; a model backend also
/// takes `allow_hosts`, `api_key_env`, `per_call` and `env.NAME=value`, as in
/// a manifest's `[backend]`. The component is compiled and checked before it
/// replaces anything; on failure the old version keeps serving.
pub async fn upload(
    op: Operator,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    WasmBody(bytes): WasmBody,
) -> ReplyWith<PluginShown> {
    let (params, env) = Upload::parse(query.as_deref().unwrap_or_default())?;
    validate_name(&name).map_err(|m| Error::invalid("name", m))?;
    validate_version(&params.version).map_err(|m| Error::invalid("version", m))?;
    let kind: Kind = params
        .kind
        .parse()
        .map_err(|m: String| Error::invalid("kind", m))?;
    let grant = uploads::grant_of(
        kind,
        env,
        params.allow_hosts.as_deref(),
        params.api_key_env,
        params.per_call,
    )?;
    let spec = Spec {
        name,
        kind,
        version: params.version,
        limits: Some(
            LimitOverrides {
                memory_mb: params.memory_mb,
                cpu_ms: params.cpu_ms,
                timeout_ms: params.timeout_ms,
            }
            .apply(kind),
        ),
        source: Source::Upload,
        grant,
        bytes: bytes.to_vec(),
    };
    let (plugin, previous) = uploads::install(&op.app.store, &op.app.plugins, spec).await?;
    let mut body = describe(&plugin);
    let status = match previous {
        Some(old) => {
            body.replaced = Some(Replaced {
                version: old.version.clone(),
                sha256: old.sha256.clone(),
            });
            StatusCode::OK
        }
        None => StatusCode::CREATED,
    };
    Ok((status, axum::Json(body)))
}

/// Removing a template that automations use is refused, naming them, unless
/// `?force=true`, which disables them.
pub async fn remove(
    op: Operator,
    Path(name): Path<String>,
    Query(Force { force }): Query<Force>,
) -> Result<StatusCode> {
    uploads::remove(&op.app.store, &op.app.plugins, &name, force).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/admin/plugins/{name}/invoke`: runs the plugin on sample input,
/// through the plugin work queue and under its limits, like production calls.
/// A payload template takes `{"template", "variables"}`; an event filter
/// takes `{"config", "event"}`.
pub async fn invoke(
    op: Operator,
    Path(name): Path<String>,
    Json(input): Json<Value>,
) -> Reply<Value> {
    let plugin = find(&op.app, &name)?;
    let bytes = input.to_string().into_bytes();
    match plugin.kind {
        Kind::PayloadTemplate => {
            let input: TemplateInput = parse(&bytes)?;
            input.check().map_err(|m| Error::invalid("template", m))?;
            let vars = input.variables();
            let template = input.template.clone();
            let rendered = op
                .app
                .plugins
                .render(&name, HOST, input.template, vars)
                .await
                .map_err(|e| e.on_input(Some("template"), Some(&template)))?;
            let output: Value = serde_json::from_str(&rendered).map_err(anyhow::Error::from)?;
            Ok(axum::Json(json!({"output": output, "rendered": rendered})))
        }
        Kind::EventFilter => {
            let input: FilterInput = parse(&bytes)?;
            input
                .config
                .check()
                .map_err(|m| Error::invalid("config", m))?;
            let matches = op
                .app
                .plugins
                .matches(&name, HOST, input.config, input.event)
                .await
                .map_err(|e| e.on_input(Some("config"), None))?;
            Ok(axum::Json(
                json!({"matches": matches.matched(), "fired": matches.fired()}),
            ))
        }
        Kind::ModelBackend => Err(Error::invalid(
            "name",
            format!(
                "'{name}' is a model backend: chat with its models through POST /v1/chat/completions"
            ),
        )),
    }
}
