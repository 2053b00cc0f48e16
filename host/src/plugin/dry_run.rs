//! `switchyard plugin check`: validates a component and, given input, runs it
//! once, on the same build and call path as a loaded plugin.

use super::warm::HOST;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::input::{FilterInput, TemplateInput};
use super::loaded::{Source, Spec};
use super::manifest::Manifest;
use super::registry::Plugins;
use super::{Kind, PluginError};
use crate::cfg::QueueConfig;

/// Checks the component at `wasm`, as `kind` (or whichever kind it
/// implements), with limits from `manifest`, and runs it on `input` if given.
pub async fn check(
    wasm: &Path,
    kind: Option<Kind>,
    manifest: Option<&Path>,
    input: Option<&Path>,
    cache_dir: &Path,
) -> anyhow::Result<Value> {
    let bytes = std::fs::read(wasm).with_context(|| format!("cannot read {}", wasm.display()))?;
    let manifest = manifest.map(read_manifest).transpose()?;
    let kind = match (kind, &manifest) {
        (Some(kind), _) => Some(kind),
        (None, Some(m)) => Some(m.kind().map_err(anyhow::Error::msg)?),
        (None, None) => None,
    };
    let name = wasm
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin")
        .to_string();
    let queue = QueueConfig {
        workers: 1,
        capacity: 1,
    };
    let plugins = Plugins::new(cache_dir, &queue).await?;
    let candidates = kind.map_or_else(
        || vec![Kind::PayloadTemplate, Kind::EventFilter, Kind::ModelBackend],
        |k| vec![k],
    );
    let mut failures = Vec::new();
    for kind in candidates {
        let spec = Spec {
            name: name.clone(),
            kind,
            version: manifest
                .as_ref()
                .map_or("dev".into(), |m| m.version.clone()),
            limits: manifest.as_ref().map(|m| m.limits.apply(kind)),
            source: Source::Directory,
            grant: manifest.as_ref().and_then(|m| m.backend.clone()),
            bytes: bytes.clone(),
        };
        match plugins.check(spec).await {
            Ok(plugin) => return report(&plugins, &plugin, input).await,
            Err(e) => failures.push(e.to_string()),
        }
    }
    bail!("{}", failures.join("\n"))
}

fn read_manifest(path: &Path) -> anyhow::Result<Manifest> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Manifest::parse(&text).map_err(|e| anyhow::anyhow!("invalid manifest {}: {e}", path.display()))
}

/// What `check` says of a component that loaded: its name, kind, digest,
/// limits and models, and what it made of `input` if given.
async fn report(
    plugins: &Plugins,
    plugin: &super::Plugin,
    input: Option<&Path>,
) -> anyhow::Result<Value> {
    let mut report = json!({
        "ok": true,
        "name": plugin.name,
        "kind": plugin.kind,
        "sha256": plugin.sha256,
        "limits": plugin.limits,
    });
    if let Some(served) = plugin.served() {
        report["models"] = json!(served.model_ids());
    }
    if let Some(input) = input {
        report["result"] = run(plugins, plugin, input).await?;
    }
    Ok(report)
}

async fn run(plugins: &Plugins, plugin: &super::Plugin, input: &Path) -> anyhow::Result<Value> {
    let bytes = std::fs::read(input).with_context(|| format!("cannot read {}", input.display()))?;
    let failed = |e: PluginError| anyhow::anyhow!("{e}");
    match plugin.kind {
        Kind::PayloadTemplate => {
            let input: TemplateInput = serde_json::from_slice(&bytes)
                .context("input is not {\"template\", \"variables\"}")?;
            input.check().map_err(anyhow::Error::msg)?;
            let rendered = plugins
                .render_with(plugin, HOST, &input.template, &input.variables())
                .await
                .map_err(failed)?;
            Ok(serde_json::from_str(&rendered)?)
        }
        Kind::EventFilter => {
            let input: FilterInput =
                serde_json::from_slice(&bytes).context("input is not {\"config\", \"event\"}")?;
            input.config.check().map_err(anyhow::Error::msg)?;
            let matches = plugins
                .matches_with(plugin, HOST, &input.config, &input.event)
                .await
                .map_err(failed)?;
            Ok(json!({"matches": matches.matched(), "fired": matches.fired()}))
        }
        Kind::ModelBackend => bail!(
            "a model backend takes no input here: check lists its models; load it and call /v1/chat/completions to chat"
        ),
    }
}
