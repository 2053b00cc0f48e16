//! The plugins embedded in the binary. They carry the host's version.

/// A component the host's build made, embedded.
macro_rules! component {
    ($file:literal) => {
        include_bytes!(concat!(
            env!("SWITCHYARD_PLUGIN_BUILD_DIR"),
            "/",
            $file,
            ".wasm"
        ))
    };
}
pub(crate) use component;

use super::loaded::{Source, Spec};
use super::types::Kind;

/// The default payload template plugin.
pub const TEMPLATE_DEFAULT: &str = "template-default";
/// The default event filter plugin.
pub const FILTER_DEFAULT: &str = "filter-default";
/// The target adapters: payload templates that shape a Slack, Teams,
/// GitHub (repository dispatch) or Discord message from the event.
pub const ADAPTERS: [(&str, &[u8]); 4] = [
    ("slack", component!("target_slack")),
    ("teams", component!("target_teams")),
    ("github", component!("target_github")),
    ("discord", component!("target_discord")),
];

const TEMPLATE_DEFAULT_WASM: &[u8] = component!("template_default");
const FILTER_DEFAULT_WASM: &[u8] = component!("filter_default");

/// Whether `name` is a built-in (built-ins can be replaced but not removed).
pub fn is_builtin(name: &str) -> bool {
    name == TEMPLATE_DEFAULT || name == FILTER_DEFAULT || ADAPTERS.iter().any(|(n, _)| *n == name)
}

/// Load specifications for every built-in.
pub fn builtins() -> Vec<Spec> {
    [
        (
            TEMPLATE_DEFAULT,
            Kind::PayloadTemplate,
            TEMPLATE_DEFAULT_WASM,
        ),
        (FILTER_DEFAULT, Kind::EventFilter, FILTER_DEFAULT_WASM),
    ]
    .into_iter()
    .chain(
        ADAPTERS
            .iter()
            .map(|(name, bytes)| (*name, Kind::PayloadTemplate, *bytes)),
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
