//! Running one plugin call under its limits, on a warm instance of the
//! caller's team or a fresh one.

use std::time::Instant;

use wasmtime::{Store, Trap};

use super::bindings::v0_1_0::{filter, template};
use super::engine::Runtime;
use super::registry::{Plugin, Pre};
use super::state::{Pace, State, arm};
use super::{Kind, Limits, LoadError, PluginError};

/// An instance of a template or filter plugin, with its store.
pub struct Live {
    store: Store<State>,
    bound: Bound,
}

/// The exports of an instance, by kind.
pub enum Bound {
    /// A `payload-template`'s.
    Template(template::PayloadTemplate),
    /// An `event-filter`'s.
    Filter(filter::EventFilter),
}

/// A store for an instance of `plugin`, with its memory cap and CPU budget.
pub fn new_store(runtime: &Runtime, plugin: &Plugin) -> Store<State> {
    let state = State::new(plugin.limits.memory_bytes);
    super::state::new_store(&runtime.engine, state, pace(plugin))
}

fn pace(plugin: &Plugin) -> Pace {
    Pace::Budget(plugin.limits.cpu_ticks())
}

async fn instantiate(plugin: &Plugin, store: &mut Store<State>) -> wasmtime::Result<Bound> {
    Ok(match &plugin.pre {
        Pre::Template(pre) => Bound::Template(pre.instantiate_async(store).await?),
        Pre::Filter(pre) => Bound::Filter(pre.instantiate_async(store).await?),
        Pre::Backend(_) => wasmtime::bail!("{} is a model backend", plugin.id()),
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
        Some((Live { mut store, bound }, calls)) => {
            arm(&mut store, pace(plugin));
            (store, Some(bound), calls)
        }
        None => (new_store(runtime, plugin), None, 0),
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
    let stderr = log_output(&plugin.id(), store.data());
    let result = match outcome {
        Err(_) => Err(plugin.failed(format!(
            "did not finish within {} ms",
            plugin.limits.timeout_ms
        ))),
        Ok(Err(trap)) => Err(plugin.failed(failure(&trap, store.data(), &plugin.limits, &stderr))),
        Ok(Ok(result)) => {
            if let Some(bound) = bound {
                plugin.warm.keep(team, Live { store, bound }, calls + 1);
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

/// What went wrong in a call that ended with `error`, in words for the
/// plugin's author: a limit it hit (`memory_exceeded` says the limiter
/// refused it memory), a trap, or another failure. Every kind's calls
/// describe failures through here.
pub fn what_failed(error: &wasmtime::Error, memory_exceeded: bool, limits: &Limits) -> String {
    if memory_exceeded {
        return format!(
            "exceeded its memory cap of {} MiB",
            limits.memory_bytes >> 20
        );
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => format!("exceeded its CPU budget of {} ms", limits.cpu_ms),
        Some(trap) => format!("trapped: {trap}"),
        None => format!("failed: {error:#}"),
    }
}

/// How much of a failed call's stderr its error carries.
const STDERR_TAIL: usize = 2048;

/// What went wrong in a call of an instance with `state` that ended with
/// `error`, followed by the end of its `stderr` so that a panic's message or
/// a Python traceback reaches its author.
pub fn failure(error: &wasmtime::Error, state: &State, limits: &Limits, stderr: &[u8]) -> String {
    with_stderr_tail(what_failed(error, state.limiter.exceeded, limits), stderr)
}

/// `what`, followed by the end of `stderr` when there is any.
fn with_stderr_tail(what: String, stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim_end();
    if text.is_empty() {
        return what;
    }
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    let cut = if start > 0 { "…" } else { "" };
    format!("{what}; its stderr ended with: {cut}{}", &text[start..])
}

/// Logs what a call of `plugin` (`name@version`) printed, under its name;
/// returns its stderr. Every plugin kind's output goes through here.
pub fn log_output(plugin: &str, state: &State) -> Vec<u8> {
    let (stdout, stderr) = (state.stdout.take(), state.stderr.take());
    for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        if !text.is_empty() {
            tracing::info!(plugin = %plugin, stream, output = %String::from_utf8_lossy(text).trim_end(), "plugin output");
        }
    }
    stderr
}

/// Checks a compiled component against its kind's world (its imports were
/// checked before compiling). Returns the pre-instantiated form ready to call.
pub fn prepare(
    runtime: &Runtime,
    kind: Kind,
    component: &wasmtime::component::Component,
) -> Result<Pre, LoadError> {
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
        Kind::PayloadTemplate => {
            Pre::Template(template::PayloadTemplatePre::new(instance_pre).map_err(world)?)
        }
        Kind::EventFilter => Pre::Filter(filter::EventFilterPre::new(instance_pre).map_err(world)?),
        Kind::ModelBackend => {
            return Err(LoadError::Host(
                "model backends are loaded by the inference service".into(),
            ));
        }
    })
}
