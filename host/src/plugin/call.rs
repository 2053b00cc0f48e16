//! Running one plugin call under its limits.

use std::time::Instant;

use wasmtime::component::Component;
use wasmtime::{Store, Trap, UpdateDeadline};

use super::engine::Runtime;
use super::registry::Plugin;
use super::state::State;
use super::{Kind, PluginError};

/// A fresh store for one call of `plugin`, with its memory cap and CPU budget.
/// Each CPU tick also yields to the async executor, so a busy plugin cannot
/// starve the host's other work.
pub fn new_store(runtime: &Runtime, plugin: &Plugin) -> Store<State> {
    let mut store = Store::new(&runtime.engine, State::new(plugin.limits.memory_bytes));
    store.limiter(|state| &mut state.limiter);
    let budget = plugin.limits.cpu_ticks();
    let mut used = 0;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        used += 1;
        Ok(if used >= budget {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    store
}

/// Runs `f` against a fresh store, under the plugin's wall-clock timeout, and
/// turns traps and exhausted limits into errors that name the plugin.
pub async fn call<R, F>(runtime: &Runtime, plugin: &Plugin, f: F) -> Result<R, PluginError>
where
    F: AsyncFnOnce(&mut Store<State>) -> wasmtime::Result<Result<R, PluginError>>,
{
    let mut store = new_store(runtime, plugin);
    let started = Instant::now();
    let ticking = super::engine::Ticking::start();
    let outcome = tokio::time::timeout(plugin.limits.timeout(), f(&mut store)).await;
    drop(ticking);
    log_output(plugin, store.data());
    let result = match outcome {
        Err(_) => Err(plugin.failed(format!(
            "did not finish within {} ms",
            plugin.limits.timeout_ms
        ))),
        Ok(Err(trap)) => Err(with_stderr(
            classify(plugin, &trap, store.data().limiter.exceeded),
            &store.data().stderr.contents(),
        )),
        Ok(Ok(result)) => result,
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

fn classify(plugin: &Plugin, error: &wasmtime::Error, memory_exceeded: bool) -> PluginError {
    if memory_exceeded {
        return plugin.failed(format!(
            "exceeded its memory cap of {} MiB",
            plugin.limits.memory_bytes >> 20
        ));
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => plugin.failed(format!(
            "exceeded its CPU budget of {} ms",
            plugin.limits.cpu_ms
        )),
        Some(trap) => plugin.failed(format!("trapped: {trap}")),
        None => plugin.failed(format!("failed: {error:#}")),
    }
}

/// How much of a failed call's stderr its error carries.
const STDERR_TAIL: usize = 2048;

/// A failure with the end of what the plugin wrote to stderr, so that a
/// panic's message or a Python traceback reaches its author.
fn with_stderr(error: PluginError, stderr: &[u8]) -> PluginError {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim_end();
    match error {
        PluginError::Failed { plugin, what } if !text.is_empty() => {
            let start = text.len().saturating_sub(STDERR_TAIL);
            let start = (start..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            let cut = if start > 0 { "…" } else { "" };
            PluginError::Failed {
                plugin,
                what: format!("{what}; its stderr ended with: {cut}{}", &text[start..]),
            }
        }
        other => other,
    }
}

fn log_output(plugin: &Plugin, state: &State) {
    for (stream, pipe) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
        let text = pipe.contents();
        if !text.is_empty() {
            tracing::info!(plugin = %plugin.id(), stream, output = %String::from_utf8_lossy(&text).trim_end(), "plugin output");
        }
    }
}

/// Checks a compiled component against its kind's world (its imports were
/// checked before compiling). Returns the pre-instantiated form ready to call.
pub fn prepare(
    runtime: &Runtime,
    kind: Kind,
    component: &Component,
) -> Result<super::registry::Pre, String> {
    use super::bindings::v0_1_0::{filter, template};
    use super::registry::Pre;
    let instance_pre = runtime
        .linker
        .instantiate_pre(component)
        .map_err(|e| format!("its imports cannot be satisfied: {e:#}"))?;
    let world = |e: wasmtime::Error| {
        format!("it does not implement the {kind} world of switchyard:plugin@0.1.0: {e:#}")
    };
    Ok(match kind {
        Kind::PayloadTemplate => {
            Pre::Template(template::PayloadTemplatePre::new(instance_pre).map_err(world)?)
        }
        Kind::EventFilter => Pre::Filter(filter::EventFilterPre::new(instance_pre).map_err(world)?),
        Kind::ModelBackend => {
            return Err("model backends are loaded by the inference service".into());
        }
    })
}
