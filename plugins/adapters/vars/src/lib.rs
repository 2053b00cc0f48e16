//! What the built-in target adapters share: an event's variables (each
//! value is JSON text) read as plain text or as JSON, and the headline a
//! message starts with.

use serde_json::Value;

/// The variables every adapter's message shows.
pub const USED: &[&str] = &[
    "event_type",
    "event_author",
    "artifact_version_string",
    "artifact_collection_name",
    "artifact_version",
    "project_name",
    "entity_name",
    "alias",
    "tag",
    "webhook_name",
    "failure_reason",
    "attempts",
];

/// Declares a target adapter: the `payload-template` world, with `validate`
/// naming the variables of [`USED`] among those known and `render` calling
/// `$message(template, &Vars)` for the message. Used from each adapter's
/// crate root (the WIT path is relative to it).
#[macro_export]
macro_rules! adapter {
    ($name:ident, $message:path) => {
        wit_bindgen::generate!({ path: "../../../wit/v0.1.0", world: "payload-template" });

        struct $name;

        impl exports::switchyard::plugin::template::Guest for $name {
            fn validate(
                _template: String,
                known: Vec<String>,
            ) -> Result<Vec<String>, switchyard::plugin::types::PluginError> {
                Ok($crate::used(&known))
            }

            fn render(
                template: String,
                variables: Vec<exports::switchyard::plugin::template::Variable>,
            ) -> Result<String, switchyard::plugin::types::PluginError> {
                let vars = $crate::Vars::new(
                    variables
                        .iter()
                        .map(|x| (x.name.as_str(), x.value.as_str())),
                );
                Ok($message(&template, &vars).to_string())
            }
        }

        export!($name);
    };
}

/// The variables of [`USED`] among `known`.
pub fn used(known: &[String]) -> Vec<String> {
    USED.iter()
        .filter(|u| known.iter().any(|k| k == *u))
        .map(|u| u.to_string())
        .collect()
}

/// An event's variables.
pub struct Vars(Vec<(String, Value)>);

impl Vars {
    /// From (name, JSON text) pairs; a value that is not JSON is kept as text.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vars {
        Vars(
            pairs
                .into_iter()
                .map(|(name, text)| {
                    let value = serde_json::from_str(text).unwrap_or(Value::String(text.into()));
                    (name.to_string(), value)
                })
                .collect(),
        )
    }

    /// A variable as JSON (`null` when absent).
    pub fn value(&self, name: &str) -> Value {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or(Value::Null, |(_, v)| v.clone())
    }

    /// A variable as text (empty when absent).
    pub fn text(&self, name: &str) -> String {
        match self.value(name) {
            Value::String(s) => s,
            Value::Null => String::new(),
            other => other.to_string(),
        }
    }

    /// The automation's template as the message's headline, or what
    /// happened when the template is empty.
    pub fn headline(&self, template: &str) -> String {
        let template = template.trim();
        if template.is_empty() {
            format!(
                "{} by {}",
                self.text("event_type"),
                self.text("event_author")
            )
        } else {
            template.to_string()
        }
    }

    /// What the event was about, in a few words: the alias or tag added,
    /// and the version; for an event about a webhook, the webhook and
    /// what failed.
    pub fn detail(&self) -> String {
        let webhook = self.text("webhook_name");
        if !webhook.is_empty() {
            return match self.text("failure_reason") {
                reason if reason.is_empty() => format!("webhook {webhook} recovered"),
                reason => format!(
                    "webhook {webhook}: {reason} ({} attempts)",
                    self.text("attempts")
                ),
            };
        }
        let label = match (self.text("alias"), self.text("tag")) {
            (alias, _) if !alias.is_empty() => format!("alias {alias} on "),
            (_, tag) if !tag.is_empty() => format!("tag {tag} on "),
            _ => String::new(),
        };
        format!("{label}{}", self.text("artifact_version_string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_text_and_json() {
        let vars = Vars::new([
            ("event_type", "\"ADD_ARTIFACT_TAG\""),
            ("tag", "\"gold\""),
            ("n", "3"),
        ]);
        assert_eq!(vars.text("event_type"), "ADD_ARTIFACT_TAG");
        assert_eq!(vars.text("n"), "3");
        assert_eq!(vars.text("absent"), "");
        assert_eq!(vars.headline(""), "ADD_ARTIFACT_TAG by ");
        assert_eq!(vars.headline(" Promoted "), "Promoted");
        assert_eq!(vars.detail(), "tag gold on ");
        let failed = Vars::new([
            ("webhook_name", "\"ci\""),
            ("failure_reason", "\"the endpoint answered 503\""),
            ("attempts", "3"),
        ]);
        assert_eq!(
            failed.detail(),
            "webhook ci: the endpoint answered 503 (3 attempts)"
        );
    }
}
