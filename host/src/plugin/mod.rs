//! The plugin runtime: WebAssembly components loaded under our own WIT
//! worlds. The rest of the host sees only what this file re-exports.
//!
//! - `types`: the kinds of plugin and the errors of loading and calling one
//!   (a leaf: it imports nothing else of `plugin/`).
//! - `engine`: the one wasmtime engine, epoch ticker and compile cache;
//!   `state`: the one store builder; `limits`; `capabilities`: what each
//!   kind may import; `failure`: how a failed call is told.
//! - `loaded`: a loaded plugin; `registry`: the loaded plugins by name,
//!   swapped atomically, with the built-ins handed to it at start;
//!   `call`: one call under its limits; `warm`: instances kept per team.
//! - `template`, `filter` and `model`: the typed calls of each kind;
//!   `backend`: a model backend's instances, its egress and its second
//!   instance, which inference calls.
//! - `builtin`, `manifest` and `watch`: where plugins come from; `input`:
//!   what clients send a plugin, checked.
//! - [`scaffold`] and [`dry_run`]: `switchyard plugin new` and `check`.

mod backend;
mod bindings;
mod builtin;
mod call;
mod capabilities;
pub mod dry_run;
mod engine;
mod failure;
mod filter;
mod input;
mod limits;
mod loaded;
mod manifest;
mod model;
mod registry;
pub mod scaffold;
mod state;
mod template;
mod types;
mod warm;
mod watch;

pub use backend::{
    Backend, CallError, ChatRequest, ChatResult, Endpoint, FinishReason, ForwardRequest,
    ForwardResult, Instances, Message, ModelInfo, Piece, Setup,
};
pub use builtin::{
    Components, FILTER_DEFAULT, TEMPLATE_DEFAULT, builtins, components, is_builtin, provide,
};
pub use engine::Runtime;
pub use filter::{MetricFired, Verdict};
pub use input::{EventSpec, FilterInput, FilterSpec, MetricTest, TemplateInput, check_template};
pub use limits::Limits;
pub use loaded::{Plugin, Source, Spec};
pub use manifest::{BackendGrant, LimitOverrides, validate_name, validate_version};
pub use registry::Plugins;
pub use template::Variable;
pub use types::{Kind, LoadError, PluginError};
pub use warm::HOST;
pub use watch::Watcher;

/// What `just bench-plugins` measures below the public calls.
#[doc(hidden)]
pub mod internals {
    pub use super::call::instance_store;
    pub use super::loaded::Prepared;
    pub use super::state::State;
}
