//! Running one plugin call under its limits, on a warm instance of the
//! caller's team or a fresh one.

use std::time::Instant;

use wasmtime::Store;

use super::bindings::{FilterPre, TemplatePre};
use super::engine::Runtime;
use super::loaded::{Bound, Instance, Plugin, Prepared};
use super::state::{Pace, State, arm};
use super::{Kind, LoadError, PluginError};

/// A store for an instance of `plugin`, with its memory cap and CPU budget.
pub fn instance_store(runtime: &Runtime, plugin: &Plugin) -> Store<State> {
    let state = State::new(plugin.limits.memory_bytes);
    super::state::new_store(&runtime.engine, state, pace(plugin))
}

fn pace(plugin: &Plugin) -> Pace {
    Pace::Budget(plugin.limits.cpu_ticks())
}

async fn instantiate(plugin: &Plugin, store: &mut Store<State>) -> wasmtime::Result<Bound> {
    Ok(match &plugin.pre {
        Prepared::Template(pre) => Bound::Template(pre.instantiate_async(store).await?),
        Prepared::Filter(pre) => Bound::Filter(pre.instantiate(store).await?),
        Prepared::Backend(_) => wasmtime::bail!("{} is a model backend", plugin.id()),
    })
}

/// Runs `f` for `team` on a warm instance of that team or a fresh one, under
/// the plugin's limits and wall-clock timeout, and turns traps and exhausted
/// limits into errors that name the plugin. The instance is kept for the
/// team's next call unless the call failed.
pub async fn call<R, F>(
    runtime: &Runtime,
    plugin: &Plugin,
    team: &str,
    f: F,
) -> Result<R, PluginError>
where
    F: AsyncFnOnce(&mut Store<State>, &Bound) -> wasmtime::Result<Result<R, PluginError>>,
{
    let started = Instant::now();
    let (mut store, mut bound, calls) = match plugin.warm.take(team) {
        Some((Instance { mut store, bound }, calls)) => {
            arm(&mut store, pace(plugin));
            (store, Some(bound), calls)
        }
        None => (instance_store(runtime, plugin), None, 0),
    };
    let ticking = super::engine::Ticking::start();
    let outcome = tokio::time::timeout(plugin.limits.timeout(), async {
        let bound = match &mut bound {
            Some(bound) => bound,
            none => none.insert(instantiate(plugin, &mut store).await?),
        };
        f(&mut store, bound).await
    })
    .await;
    drop(ticking);
    let stderr = super::failure::log_output(&plugin.id(), store.data());
    let result = match outcome {
        Err(_) => Err(plugin.failed(format!(
            "did not finish within {} ms",
            plugin.limits.timeout_ms
        ))),
        Ok(Err(trap)) => Err(plugin.failed(super::failure::failure(
            &trap,
            store.data(),
            &plugin.limits,
            &stderr,
        ))),
        Ok(Ok(result)) => {
            if let Some(bound) = bound {
                plugin.warm.keep(team, Instance { store, bound }, calls + 1);
            }
            result
        }
    };
    let failed = matches!(result, Err(PluginError::Failed { .. }));
    plugin.stats.record(started.elapsed(), failed);
    crate::telemetry::plugin_call(
        &plugin.name,
        plugin.kind.as_str(),
        failed,
        started.elapsed(),
    );
    if let Err(PluginError::Failed { .. }) = &result {
        tracing::warn!(plugin = %plugin.id(), error = %result.as_ref().err().unwrap(), "plugin call failed");
    }
    result
}

/// Checks a compiled component against its kind's world (its imports were
/// checked before compiling). Returns the pre-instantiated form ready to call.
pub fn prepare(
    runtime: &Runtime,
    kind: Kind,
    component: &wasmtime::component::Component,
) -> Result<Prepared, LoadError> {
    let instance_pre = runtime
        .linker
        .instantiate_pre(component)
        .map_err(|e| LoadError::Unlinkable(format!("{e:#}")))?;
    let world = |e: wasmtime::Error| LoadError::WrongWorld {
        kind,
        versions: "0.1.0",
        detail: format!("{e:#}"),
    };
    Ok(match kind {
        Kind::PayloadTemplate => Prepared::Template(TemplatePre::new(instance_pre).map_err(world)?),
        // The newest version the component exports.
        Kind::EventFilter => {
            Prepared::Filter(
                FilterPre::new(instance_pre).map_err(|e| LoadError::WrongWorld {
                    kind,
                    versions: "0.1.0 or 0.2.0",
                    detail: format!("{e:#}"),
                })?,
            )
        }
        Kind::ModelBackend => {
            return Err(LoadError::Host(
                "model backends are loaded by the inference service".into(),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(runtime: &Runtime, name: &str) -> wasmtime::component::Component {
        let path = format!("{}/{name}.wasm", switchyard_components::DIR);
        runtime.compile(&std::fs::read(path).unwrap()).unwrap()
    }

    /// Filters are prepared at the newest interface they export: the
    /// built-in one at 0.2.0 (a 0.1.0 one, as `plugin new` makes, loads
    /// as before: tests/it/scaffolds.rs), and what exports neither is
    /// refused naming both.
    #[test]
    fn a_filter_is_prepared_at_the_newest_version_it_exports() {
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(cache.path()).unwrap();
        let filter = compiled(&runtime, "filter_default");
        let prepared = prepare(&runtime, Kind::EventFilter, &filter).unwrap();
        assert!(matches!(prepared, Prepared::Filter(FilterPre::V0_2_0(_))));
        let template = compiled(&runtime, "template_default");
        let Err(refused) = prepare(&runtime, Kind::EventFilter, &template) else {
            panic!("a template is not a filter");
        };
        assert!(refused.to_string().contains("0.1.0 or 0.2.0"), "{refused}");
    }
}
