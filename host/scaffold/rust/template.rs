//! A Switchyard payload-template plugin.
//!
//! Each `${name}` in the template becomes that variable's value as JSON (a
//! string keeps its quotes), and the result must be JSON. Change `render` to
//! build any payload you like; `eprintln!` goes to the host's log.

wit_bindgen::generate!({ path: "wit", world: "payload-template" });

use exports::switchyard::plugin::template::{Guest, Variable};
use switchyard::plugin::types::PluginError;

struct Plugin;

/// Each `${name}` in `text`: its byte offset and the name.
fn variables(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.match_indices("${").filter_map(|(at, _)| {
        let rest = &text[at + 2..];
        let end = rest.find('}')?;
        let name = &rest[..end];
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        valid.then_some((at, name))
    })
}

fn error(code: &str, message: String, position: Option<usize>) -> PluginError {
    PluginError {
        code: code.into(),
        message,
        position: position.and_then(|p| u32::try_from(p).ok()),
    }
}

impl Guest for Plugin {
    fn validate(template: String, known: Vec<String>) -> Result<Vec<String>, PluginError> {
        let mut used = Vec::new();
        for (at, name) in variables(&template) {
            if !known.iter().any(|k| k == name) {
                let mut names = known.clone();
                names.sort();
                let message = format!("unknown variable ${{{name}}}; use one of: {}", names.join(", "));
                return Err(error("unknown-variable", message, Some(at)));
            }
            used.push(name.to_string());
        }
        Ok(used)
    }

    fn render(template: String, variables_given: Vec<Variable>) -> Result<String, PluginError> {
        let mut rendered = String::with_capacity(template.len());
        let mut copied = 0;
        for (at, name) in variables(&template) {
            rendered.push_str(&template[copied..at]);
            let value = variables_given.iter().find(|v| v.name == name);
            rendered.push_str(value.map_or("null", |v| v.value.as_str()));
            copied = at + name.len() + 3;
        }
        rendered.push_str(&template[copied..]);
        serde_json::from_str::<serde_json::Value>(&rendered).map_err(|e| {
            error("invalid-json", format!("the rendered payload is not JSON: {e}"), None)
        })?;
        Ok(rendered)
    }
}

export!(Plugin);
