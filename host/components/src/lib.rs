//! The WebAssembly components the host embeds, built from `plugins/` by this
//! crate's build script. A crate of its own so that the plugins build starts
//! with the host's build instead of after its dependencies (see build.rs).

/// The directory holding every component built, the tests' fixtures too.
pub const DIR: &str = env!("SWITCHYARD_PLUGIN_BUILD_DIR");

/// A component in [`DIR`], embedded.
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

/// The default payload template.
pub const TEMPLATE_DEFAULT: &[u8] = component!("template_default");
/// The default event filter.
pub const FILTER_DEFAULT: &[u8] = component!("filter_default");
/// The embedded model's backend.
pub const MODEL_SMOLLM: &[u8] = component!("model_smollm");
/// The OpenAI-compatible upstream proxy backend.
pub const MODEL_OPENAI: &[u8] = component!("model_openai");
/// The target adapters (payload templates).
pub const TARGET_SLACK: &[u8] = component!("target_slack");
/// See [`TARGET_SLACK`].
pub const TARGET_TEAMS: &[u8] = component!("target_teams");
/// See [`TARGET_SLACK`].
pub const TARGET_GITHUB: &[u8] = component!("target_github");
/// See [`TARGET_SLACK`].
pub const TARGET_DISCORD: &[u8] = component!("target_discord");
