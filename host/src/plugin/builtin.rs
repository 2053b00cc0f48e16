//! The plugins embedded in the binary. They carry the host's version.

use super::Kind;
use super::registry::{Source, Spec};

/// The default payload template plugin.
pub const TEMPLATE_DEFAULT: &str = "template-default";
/// The default event filter plugin.
pub const FILTER_DEFAULT: &str = "filter-default";

const TEMPLATE_DEFAULT_WASM: &[u8] = include_bytes!(concat!(
    env!("SWITCHYARD_PLUGIN_BUILD_DIR"),
    "/template_default.wasm"
));
const FILTER_DEFAULT_WASM: &[u8] = include_bytes!(concat!(
    env!("SWITCHYARD_PLUGIN_BUILD_DIR"),
    "/filter_default.wasm"
));

/// Whether `name` is a built-in (built-ins can be replaced but not removed).
pub fn is_builtin(name: &str) -> bool {
    name == TEMPLATE_DEFAULT || name == FILTER_DEFAULT
}

/// Load specifications for every built-in.
pub fn specs() -> Vec<Spec> {
    [
        (
            TEMPLATE_DEFAULT,
            Kind::PayloadTemplate,
            TEMPLATE_DEFAULT_WASM,
        ),
        (FILTER_DEFAULT, Kind::EventFilter, FILTER_DEFAULT_WASM),
    ]
    .into_iter()
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
