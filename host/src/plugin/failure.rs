//! How a failed call is told: the limit it hit or its trap, with the end
//! of what it wrote to stderr, and what it printed, logged under its name.
//! Every kind's calls go through here.

use wasmtime::Trap;

use super::limits::Limits;
use super::state::State;

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
