//! `$NAME` and `${NAME}`: references to a webhook's secrets in a payload.
//!
//! The spec writes a secret in a payload as its name preceded by `$`; the
//! template language writes every variable as `${name}`. Both forms mean the
//! same in a webhook test's payload and in an automation's template, so both
//! paths read references here. A reference to a secret the webhook does not
//! carry (another of the team's secrets, or `ACCESS_TOKEN` on a webhook
//! without one) is an error that names it: sending the literal text instead
//! would hide the mistake. Any other `$word` is ordinary text.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;

use super::variables::ACCESS_TOKEN;
use crate::store::Store;

static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)").expect("static regex")
});

/// How a reference to a carried secret is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// With the secret's value, escaped for the inside of a JSON string: a
    /// test payload, which no template plugin renders.
    Value,
    /// As the template variable `${NAME}`, which the template plugin fills:
    /// an automation's template.
    Variable,
}

/// A reference to a secret the webhook does not carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the payload references ${name} at byte {at}, but webhook '{webhook}' {why}; \
     set it as the webhook's access_token_secret or signing_secret, or remove the reference"
)]
pub struct Uncarried {
    /// The secret's name.
    pub name: String,
    /// Byte offset of the `$` in the payload.
    pub at: usize,
    /// The webhook.
    pub webhook: String,
    why: &'static str,
}

/// Rewrites every reference in `text` to a secret in `carried` (variable
/// name to value; `ACCESS_TOKEN` included when the webhook has a token).
/// A name in `team_secrets` (the names of the team's secrets) that is not
/// in `carried` is an [`Uncarried`] error.
pub fn resolve(
    text: &str,
    webhook: &str,
    carried: &BTreeMap<String, String>,
    team_secrets: &BTreeSet<String>,
    rewrite: Rewrite,
) -> Result<String, Uncarried> {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (whole, name) in references(text) {
        out.push_str(&text[last..whole.start()]);
        last = whole.end();
        let uncarried = |why| Uncarried {
            name: name.to_string(),
            at: whole.start(),
            webhook: webhook.to_string(),
            why,
        };
        match (carried.get(name), rewrite) {
            (Some(value), Rewrite::Value) => out.push_str(&json_escape(value)),
            (Some(_), Rewrite::Variable) => out.push_str(&format!("${{{name}}}")),
            (None, _) if name == ACCESS_TOKEN => {
                return Err(uncarried("has no access token"));
            }
            (None, _) if team_secrets.contains(name) => {
                return Err(uncarried("does not carry that secret"));
            }
            // `${other}` is the template's business (an event variable, or an
            // unknown name it reports); `$other` is plain text.
            (None, _) => out.push_str(whole.as_str()),
        }
    }
    out.push_str(&text[last..]);
    Ok(out)
}

/// Most distinct names one payload may reference: past it the payload is
/// refused before any lookup, so no payload costs more than one read.
pub const MAX_NAMES: usize = 1_000;

/// [`resolve`], after finding out in one store read which of the names the
/// webhook does not carry are the team's secrets (no read when it carries
/// them all). A payload with more than [`MAX_NAMES`] distinct names is a
/// 400 about `payload`.
pub async fn resolve_in_team(
    store: &Store,
    team: &str,
    text: &str,
    webhook: &str,
    carried: &BTreeMap<String, String>,
    rewrite: Rewrite,
) -> crate::error::Result<Result<String, Uncarried>> {
    let lacking = uncarried(text, carried)?;
    let team_secrets = if lacking.is_empty() {
        BTreeSet::new()
    } else {
        crate::domain::secrets::among(store, team, &lacking).await?
    };
    Ok(resolve(text, webhook, carried, &team_secrets, rewrite))
}

/// The distinct names `text` references that `carried` lacks,
/// `ACCESS_TOKEN` aside: the only ones [`resolve`] needs to know are team
/// secrets or not.
fn uncarried<'a>(
    text: &'a str,
    carried: &BTreeMap<String, String>,
) -> crate::error::Result<BTreeSet<&'a str>> {
    let mut names = BTreeSet::new();
    for (_, name) in references(text) {
        names.insert(name);
        if names.len() > MAX_NAMES {
            return Err(crate::error::Error::invalid(
                "payload",
                format!(
                    "the payload references more than {MAX_NAMES} distinct $NAMEs; at most \
                     {MAX_NAMES} are allowed, so reference fewer secrets or variables"
                ),
            ));
        }
    }
    names.retain(|name| *name != ACCESS_TOKEN && !carried.contains_key(*name));
    Ok(names)
}

/// Every reference in `text` and the name it names; `$$` escapes one
/// (`$${NAME}` is the text `${NAME}` to the template).
pub(super) fn references(text: &str) -> impl Iterator<Item = (regex::Match<'_>, &str)> {
    REFERENCE.captures_iter(text).filter_map(move |caps| {
        let whole = caps.get(0).expect("group 0 always matches");
        if text[..whole.start()].ends_with('$') {
            return None;
        }
        let name = caps
            .get(1)
            .or_else(|| caps.get(2))
            .expect("one group matches");
        Some((whole, name.as_str()))
    })
}

fn json_escape(value: &str) -> String {
    let quoted = serde_json::to_string(value).expect("strings always serialise");
    quoted[1..quoted.len() - 1].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carried() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("ACCESS_TOKEN".to_string(), "t\"1".to_string()),
            ("TOKEN".to_string(), "t\"1".to_string()),
            ("SIGN".to_string(), "s-1".to_string()),
        ])
    }

    fn run(text: &str, rewrite: Rewrite) -> Result<String, Uncarried> {
        let team = BTreeSet::from(["OTHER".to_string(), "SIGN".to_string()]);
        resolve(text, "ci", &carried(), &team, rewrite)
    }

    #[test]
    fn both_forms_become_values_escaped_for_json_strings() {
        assert_eq!(
            run(
                r#"{"a":"$SIGN","b":"${TOKEN}","c":"x $ACCESS_TOKEN"}"#,
                Rewrite::Value
            )
            .unwrap(),
            r#"{"a":"s-1","b":"t\"1","c":"x t\"1"}"#
        );
    }

    #[test]
    fn both_forms_become_template_variables() {
        assert_eq!(
            run(
                r#"{"a":"$SIGN","b":${TOKEN},"c":"${project_name}"}"#,
                Rewrite::Variable
            )
            .unwrap(),
            r#"{"a":"${SIGN}","b":${TOKEN},"c":"${project_name}"}"#
        );
    }

    #[test]
    fn other_words_and_escaped_references_stay_as_they_are() {
        let text = r#"{"price":"$5","x":"$name","y":"${run_name}","z":"$${SIGN}","w":"$$OTHER"}"#;
        assert_eq!(run(text, Rewrite::Value).unwrap(), text);
    }

    #[test]
    fn an_uncarried_team_secret_is_named_with_its_position() {
        let e = run(r#"{"a": "$OTHER"}"#, Rewrite::Variable).unwrap_err();
        assert_eq!((e.name.as_str(), e.at), ("OTHER", 7));
        assert!(e.to_string().contains("$OTHER at byte 7"), "{e}");
        let e = run(r#"{"a": "${OTHER}"}"#, Rewrite::Value).unwrap_err();
        assert_eq!(e.name, "OTHER");
    }

    #[test]
    fn only_references_the_webhook_lacks_need_a_lookup() {
        let text =
            r#"{"a":"$SIGN","b":"${OTHER}","c":"$ACCESS_TOKEN","d":"$${NOPE}","e":"$x","f":"$x"}"#;
        let lacking: Vec<&str> = uncarried(text, &carried()).unwrap().into_iter().collect();
        assert_eq!(lacking, ["OTHER", "x"]);
    }

    #[test]
    fn a_name_repeated_counts_once_and_too_many_names_are_refused() {
        let repeated = "$NOPE ".repeat(50_000);
        assert_eq!(uncarried(&repeated, &carried()).unwrap().len(), 1);
        let at_limit: String = (0..MAX_NAMES).map(|i| format!("$N{i} ")).collect();
        assert_eq!(uncarried(&at_limit, &carried()).unwrap().len(), MAX_NAMES);
        let over = format!("{at_limit} $ONE_MORE");
        let e = uncarried(&over, &carried()).unwrap_err();
        assert_eq!(e.param(), Some("payload"));
        assert!(e.to_string().contains("more than 1000 distinct"), "{e}");
    }

    #[test]
    fn access_token_without_a_token_is_an_error() {
        let e = resolve(
            "\"$ACCESS_TOKEN\"",
            "ci",
            &BTreeMap::new(),
            &BTreeSet::new(),
            Rewrite::Value,
        )
        .unwrap_err();
        assert!(e.to_string().contains("has no access token"), "{e}");
    }
}
