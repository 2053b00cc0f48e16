//! The plugins embedded in the binary. They carry the host's version.
//!
//! The binary embeds them (crate `switchyard-components`) and hands them to
//! the library with [`provide`] before anything starts: the library does
//! not depend on them, so cargo compiles it while the plugins build.

use std::sync::OnceLock;

use super::loaded::{Source, Spec};
use super::types::Kind;

/// The default payload template plugin.
pub const TEMPLATE_DEFAULT: &str = "template-default";
/// The default event filter plugin.
pub const FILTER_DEFAULT: &str = "filter-default";
/// The target adapters: payload templates that shape a Slack, Teams,
/// GitHub (repository dispatch) or Discord message from the event.
pub const ADAPTERS: [&str; 4] = ["slack", "teams", "github", "discord"];

/// The components the binary embeds.
#[derive(Clone, Copy)]
pub struct Components {
    /// [`TEMPLATE_DEFAULT`].
    pub template_default: &'static [u8],
    /// [`FILTER_DEFAULT`].
    pub filter_default: &'static [u8],
    /// The embedded model's backend.
    pub model_smollm: &'static [u8],
    /// The upstream proxy backend.
    pub model_openai: &'static [u8],
    /// The [`ADAPTERS`], in their order.
    pub adapters: [&'static [u8]; 4],
}

static COMPONENTS: OnceLock<Components> = OnceLock::new();

/// Gives the library the binary's components; the first call counts.
pub fn provide(components: Components) {
    let _ = COMPONENTS.set(components);
}

/// The binary's components.
///
/// # Panics
/// If [`provide`] was not called first: a host without its built-in
/// plugins cannot serve, and `main` calls it before anything else.
pub fn components() -> &'static Components {
    COMPONENTS
        .get()
        .expect("the binary gives the library its components (plugin::provide) before starting")
}

/// Whether `name` is a built-in (built-ins can be replaced but not removed).
pub fn is_builtin(name: &str) -> bool {
    name == TEMPLATE_DEFAULT || name == FILTER_DEFAULT || ADAPTERS.contains(&name)
}

/// Load specifications for every built-in.
pub fn builtins() -> Vec<Spec> {
    let wasm = components();
    [
        (
            TEMPLATE_DEFAULT,
            Kind::PayloadTemplate,
            wasm.template_default,
        ),
        (FILTER_DEFAULT, Kind::EventFilter, wasm.filter_default),
    ]
    .into_iter()
    .chain(
        ADAPTERS
            .iter()
            .zip(wasm.adapters)
            .map(|(name, bytes)| (*name, Kind::PayloadTemplate, bytes)),
    )
    .map(|(name, kind, bytes)| Spec {
        name: name.to_string(),
        kind,
        version: env!("CARGO_PKG_VERSION").to_string(),
        limits: None,
        source: Source::Builtin,
        grant: None,
        bytes: bytes.to_vec(),
    })
    .collect()
}
