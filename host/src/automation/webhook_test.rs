//! The webhook test: one signed, authorised POST, exactly like a delivery,
//! with a payload the admin supplies (or a sample). Nothing is stored.
//!
//! In the test payload `$NAME` (or `${NAME}`) stands for a secret the webhook
//! carries, and `$ACCESS_TOKEN` for its access token, as the spec describes.

use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;
use serde_json::{Value, json};

use super::send::{Answer, Outgoing, Sender};
use super::variables::ACCESS_TOKEN;
use super::webhooks::Webhook;
use crate::error::{Error, Result};
use crate::ids;
use crate::seal::Sealer;
use crate::secrets;
use crate::store::Store;

/// What the caller sees.
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// Whether the endpoint answered 2xx.
    pub success: bool,
    /// The delivery id sent, so the receiver's logs can be matched.
    pub delivery_id: String,
    /// What went wrong and what to fix, when not successful.
    pub error: Option<String>,
    /// The endpoint's answer, when there was one.
    pub response: Option<Answer>,
}

static REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)").expect("static regex")
});

/// Sends the test request.
pub async fn run(
    store: &Store,
    sealer: &Sealer,
    sender: &Sender,
    team: &str,
    webhook: &Webhook,
    payload: Option<&Value>,
) -> Result<Outcome> {
    let token = reveal(store, sealer, team, webhook, &webhook.access_token_secret)?;
    let signing = reveal(store, sealer, team, webhook, &webhook.signing_secret)?;
    let body = match payload {
        None => sample(team, webhook),
        Some(Value::String(text)) => substitute(store, team, webhook, text, &token, &signing)?,
        Some(other) => {
            let text = other.to_string();
            substitute(store, team, webhook, &text, &token, &signing)?
        }
    };
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&body) {
        return Err(Error::invalid(
            "payload",
            format!("the test payload is not valid JSON after substituting secrets: {e}"),
        ));
    }
    let delivery_id = format!("test_{}", ids::random_hex(12));
    let out = Outgoing {
        url: &webhook.url,
        body: body.as_bytes(),
        bearer: token.as_ref().map(|(_, v)| v.as_str()),
        signing_key: signing.as_ref().map(|(_, v)| v.as_bytes()),
        delivery_id: &delivery_id,
        standard: webhook.standard_webhooks,
    };
    Ok(match sender.send(&out).await {
        Ok(answer) => Outcome {
            success: (200..300).contains(&answer.status),
            error: explain(answer.status),
            delivery_id,
            response: Some(answer),
        },
        Err(failure) => Outcome {
            success: false,
            error: Some(failure.to_string()),
            delivery_id,
            response: None,
        },
    })
}

fn explain(status: u16) -> Option<String> {
    match status {
        200..=299 => None,
        401 | 403 => Some(format!(
            "the endpoint refused the request's credentials ({status}); check the webhook's access_token_secret and signing_secret"
        )),
        _ => Some(format!("the endpoint answered {status}")),
    }
}

fn reveal(
    store: &Store,
    sealer: &Sealer,
    team: &str,
    webhook: &Webhook,
    name: &Option<String>,
) -> Result<Option<(String, String)>> {
    let Some(name) = name else { return Ok(None) };
    match secrets::reveal(store, sealer, team, name) {
        Ok(value) => Ok(Some((name.clone(), value))),
        Err(Error::NotFound(_)) => Err(Error::Conflict(format!(
            "webhook '{}' uses secret '{name}', which no longer exists; create the secret or update the webhook",
            webhook.name
        ))),
        Err(e) => Err(e),
    }
}

fn sample(team: &str, webhook: &Webhook) -> String {
    json!({
        "event_type": "TEST",
        "entity_name": team,
        "webhook": webhook.name,
        "message": "Test delivery from Switchyard",
    })
    .to_string()
}

/// Replaces `$NAME` references to the webhook's secrets with their values,
/// escaped for a JSON string. A reference to a team secret the webhook does
/// not carry is an error; other `$words` are left as they are.
fn substitute(
    store: &Store,
    team: &str,
    webhook: &Webhook,
    text: &str,
    token: &Option<(String, String)>,
    signing: &Option<(String, String)>,
) -> Result<String> {
    let mut values: Vec<(&str, &str)> = Vec::new();
    if let Some((name, value)) = token {
        values.push((ACCESS_TOKEN, value));
        values.push((name, value));
    }
    if let Some((name, value)) = signing {
        values.push((name, value));
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for caps in REFERENCE.captures_iter(text) {
        let whole = caps.get(0).expect("group 0 always matches");
        let name = caps
            .get(1)
            .or_else(|| caps.get(2))
            .expect("one group matches")
            .as_str();
        out.push_str(&text[last..whole.start()]);
        match values.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => out.push_str(&json_escape(value)),
            None if secrets::exists(store, team, name)? => {
                return Err(Error::invalid(
                    "payload",
                    format!(
                        "the payload references ${name}, but webhook '{}' does not carry secret '{name}'; set it as the webhook's access_token_secret or signing_secret",
                        webhook.name
                    ),
                ));
            }
            None => out.push_str(whole.as_str()),
        }
        last = whole.end();
    }
    out.push_str(&text[last..]);
    Ok(out)
}

fn json_escape(value: &str) -> String {
    let quoted = serde_json::to_string(value).expect("strings always serialise");
    quoted[1..quoted.len() - 1].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_for_json_strings() {
        assert_eq!(json_escape(r#"a"b\c"#), r#"a\"b\\c"#);
    }
}
