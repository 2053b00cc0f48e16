//! What every part of the plugin runtime shares, and the rest of the host
//! sees: the kinds of plugin and the errors of loading and calling one.
//! It imports nothing else of `plugin/`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The kinds of plugin, one WIT world each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `payload-template`: renders webhook payloads.
    PayloadTemplate,
    /// `event-filter`: decides whether an event fires an automation.
    EventFilter,
    /// `model-backend`: serves chat models behind the OpenAI-compatible API.
    ModelBackend,
}

impl Kind {
    /// The name used in manifests, the API and WIT.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PayloadTemplate => "payload-template",
            Kind::EventFilter => "event-filter",
            Kind::ModelBackend => "model-backend",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Kind, String> {
        match s {
            "payload-template" => Ok(Kind::PayloadTemplate),
            "event-filter" => Ok(Kind::EventFilter),
            "model-backend" => Ok(Kind::ModelBackend),
            other => Err(format!(
                "unknown plugin kind '{other}'; expected payload-template, event-filter or model-backend"
            )),
        }
    }
}

/// Why a component could not be loaded, worded for its author: the
/// sentence follows "cannot load plugin name@version: ".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a WebAssembly component.
    #[error("it is not a valid WebAssembly component: {0}")]
    NotAComponent(String),
    /// A core module where a component was expected.
    #[error(
        "it is a core WebAssembly module, not a component; build it as a component \
         (cargo build --target wasm32-wasip2, or wasm-tools component new)"
    )]
    CoreModule,
    /// It imports what its kind may not have (checked before compiling).
    #[error(
        "plugins of kind {kind} may not import {}; remove those imports ({}){}",
        imports.join(", "),
        why_refused(*kind),
        hint(*kind, imports)
    )]
    Refused {
        /// Its kind.
        kind: Kind,
        /// The imports refused.
        imports: Vec<String>,
    },
    /// A model backend imports `wasi:http` but was granted no hosts.
    #[error(
        "it imports {} but is granted no network; list the hosts it may call in allow_hosts",
        .0.join(", ")
    )]
    NoNetworkGranted(Vec<String>),
    /// Its grant's proxy is not a URI.
    #[error("its proxy '{0}' is not a URI; set [delivery] proxy to http://host:port")]
    BadProxy(String),
    /// The linker cannot satisfy its imports.
    #[error("its imports cannot be satisfied: {0}")]
    Unlinkable(String),
    /// It does not export its kind's world.
    #[error("it does not implement the {kind} world of switchyard:plugin@{versions}: {detail}")]
    WrongWorld {
        /// The kind it was loaded as.
        kind: Kind,
        /// The WIT versions accepted, e.g. "0.2.0 or @0.1.0".
        versions: &'static str,
        /// wasmtime's words.
        detail: String,
    },
    /// Its limits are out of range.
    #[error("{0}")]
    Limits(String),
    /// Its grant names a credential the host does not have.
    #[error("the environment variable {0} (api_key_env) is not set on the host")]
    MissingCredential(String),
    /// A model backend that failed to start or to list its models.
    #[error("{0}")]
    DidNotStart(String),
    /// A model backend that serves no models.
    #[error("it lists no models; list-models must return at least one")]
    NoModels,
    /// The host failed while compiling it: a bug or a broken engine.
    #[error("{0}")]
    Host(String),
}

/// Why a plugin could not be loaded or called. Every message names the plugin
/// and its version.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PluginError {
    /// The plugin ran and reported an error about its input.
    #[error("{plugin}: {message}")]
    Reported {
        /// `name@version`.
        plugin: String,
        /// The plugin's error code, e.g. `unknown-variable`.
        code: String,
        /// Its message.
        message: String,
        /// Byte offset into the input, when known.
        position: Option<u32>,
    },
    /// The plugin failed: a trap, or a limit was hit.
    #[error("{plugin} {what}")]
    Failed {
        /// `name@version`.
        plugin: String,
        /// What happened, e.g. "exceeded its CPU budget of 100 ms".
        what: String,
    },
    /// No plugin of that name and kind is loaded.
    #[error("no {kind} plugin named '{name}' is loaded")]
    NotLoaded {
        /// The name asked for.
        name: String,
        /// The kind needed.
        kind: Kind,
    },
    /// The component could not be loaded.
    #[error("cannot load plugin {plugin}: {why}")]
    Load {
        /// `name@version`.
        plugin: String,
        /// Why.
        why: LoadError,
    },
    /// The plugin would clash with what is already served.
    #[error("{0}")]
    Conflict(String),
    /// The plugin work queue refused or lost the job.
    #[error("{0}")]
    Queue(String),
}

impl PluginError {
    /// Whether the same call may succeed later: the work queue refused or
    /// lost it. Anything else is the plugin's answer to this input.
    pub fn is_transient(&self) -> bool {
        matches!(self, PluginError::Queue(_))
    }
}

/// Why a kind may not have what it was refused.
pub fn why_refused(kind: Kind) -> &'static str {
    match kind {
        Kind::PayloadTemplate | Kind::EventFilter => {
            "they get no network (sockets are linked but every use is denied) and no host access beyond WASI basics"
        }
        Kind::ModelBackend => "they reach the network only through wasi:http, to the hosts granted",
    }
}

/// How to build without `refused`, where we know.
pub fn hint(kind: Kind, refused: &[String]) -> &'static str {
    // StarlingMonkey links wasi:http for fetch() unless told not to.
    if kind != Kind::ModelBackend && refused.iter().any(|i| i.starts_with("wasi:http/")) {
        "; a JavaScript component built by jco: add `--disable http fetch-event` to `jco componentize`"
    } else {
        ""
    }
}
