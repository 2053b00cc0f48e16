//! `template-default`: renders a JSON payload template with `${name}` variables.
//!
//! Substitution is JSON-aware, so no value can break out of its place:
//! - inside a string literal, the value is inserted as text and JSON-escaped;
//! - a string literal that is exactly one variable (`"${artifact_version}"`)
//!   becomes the variable's JSON value (an object stays an object);
//! - outside string literals, the variable's JSON value is inserted as is.
//!
//! `$${` writes a literal `${`. `${artifact_metadata.KEY}` reads the top-level
//! key `KEY` of the `artifact_metadata` object (a missing key is null/empty).
//! The output is parsed as JSON before it is returned.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod arena;
mod render;

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "../../wit/v0.1.0", world: "payload-template" });

    use exports::switchyard::plugin::template::{Guest, Variable};
    use switchyard::plugin::types::PluginError;

    struct TemplateDefault;

    impl Guest for TemplateDefault {
        fn validate(template: String, known: Vec<String>) -> Result<Vec<String>, PluginError> {
            crate::render::validate(&template, &known).map_err(into_wit)
        }

        fn render(template: String, variables: Vec<Variable>) -> Result<String, PluginError> {
            let vars: Vec<(String, String)> =
                variables.into_iter().map(|v| (v.name, v.value)).collect();
            crate::render::render(&template, &vars).map_err(into_wit)
        }
    }

    fn into_wit(e: crate::render::Error) -> PluginError {
        PluginError {
            code: e.code.into(),
            message: e.message,
            position: e.position,
        }
    }

    export!(TemplateDefault);
}

pub use render::{Error, render, validate};
