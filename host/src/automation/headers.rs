//! A webhook's own headers (`X-Api-Key`, a tenant header, basic auth…):
//! checked when the webhook is saved, and sent on every delivery and test.
//! A value may name team secrets as `$NAME` or `${NAME}` (`$$` is a `$`);
//! they are opened with the webhook's other secrets, never shown back.

use std::collections::BTreeMap;

use reqwest::header::{HeaderName, HeaderValue};

use super::secret_refs::references;
use crate::error::{Error, Result};

/// Most headers one webhook sets.
pub const MAX_HEADERS: usize = 32;
/// Longest value, as written (before secrets are put in).
pub const MAX_VALUE_BYTES: usize = 4096;

/// Headers a webhook may not set: the transport's own, the body's, and
/// those that carry our signatures and ids.
const DENIED: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "proxy-authorization",
    "proxy-connection",
    "x-service-delivery",
    "x-service-signature",
    "x-service-signature-previous",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "traceparent",
    "tracestate",
];

/// Checks a webhook's headers; `token` when it sends an access token
/// (which is the `Authorization` header). Returns the secrets they name,
/// for the caller to check they exist.
pub fn check(headers: &BTreeMap<String, String>, token: bool) -> Result<Vec<&str>> {
    if headers.len() > MAX_HEADERS {
        return Err(Error::invalid(
            "headers",
            format!("a webhook sets at most {MAX_HEADERS} headers"),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, value) in headers {
        let field = format!("headers.{name}");
        let lower = name.to_ascii_lowercase();
        let wrong = |why: String| Err(Error::invalid(&field, why));
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return wrong(format!(
                "'{name}' is not a valid header name: use letters, digits and '-'"
            ));
        }
        if DENIED.contains(&lower.as_str()) {
            return wrong(format!(
                "'{name}' is set by Switchyard itself; choose another header"
            ));
        }
        if token && lower == "authorization" {
            return wrong("the access token is sent as Authorization; remove access_token_secret (or auth) or this header".into());
        }
        if !seen.insert(lower) {
            return wrong(format!(
                "'{name}' is given twice (header names ignore case)"
            ));
        }
        if value.len() > MAX_VALUE_BYTES || HeaderValue::from_str(value).is_err() {
            return wrong(format!(
                "the value is at most {MAX_VALUE_BYTES} bytes of visible text, without line breaks"
            ));
        }
    }
    Ok(secrets(headers).collect())
}

/// The secrets the values name.
pub fn secrets(headers: &BTreeMap<String, String>) -> impl Iterator<Item = &str> {
    headers
        .values()
        .flat_map(|v| references(v).map(|(_, name)| name))
}

/// The headers as sent: every reference replaced by the secret's value in
/// `values` (by name), and each value marked sensitive so that no log
/// shows it. Fails, saying which, on a value a secret makes unsendable.
pub fn resolve(
    headers: &BTreeMap<String, String>,
    values: &BTreeMap<String, String>,
) -> std::result::Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut out = Vec::with_capacity(headers.len());
    for (name, template) in headers {
        let mut text = String::with_capacity(template.len());
        let mut last = 0;
        // `$$` is a `$` in the text around references, never in a value.
        let literal = |part: &str| part.replace("$$", "$");
        for (whole, secret) in references(template) {
            text.push_str(&literal(&template[last..whole.start()]));
            last = whole.end();
            let value = values
                .get(secret)
                .ok_or_else(|| format!("secret '{secret}' is not open"))?;
            text.push_str(value);
        }
        text.push_str(&literal(&template[last..]));
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|e| e.to_string())?;
        let mut value = HeaderValue::from_str(&text).map_err(|_| {
            format!("header {name}: a secret it names holds a value that is not valid in a header (a line break?)")
        })?;
        value.set_sensitive(true);
        out.push((header, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn values_name_secrets_and_dollars_escape() {
        let headers = map(&[("X-Api-Key", "$API_KEY"), ("X-Tenant", "t-${TENANT} $$5")]);
        let secrets: Vec<_> = check(&headers, false).unwrap();
        assert_eq!(secrets, ["API_KEY", "TENANT"]);
        let values = map(&[("API_KEY", "k$$1"), ("TENANT", "acme")]);
        let sent = resolve(&headers, &values).unwrap();
        let sent: Vec<_> = sent
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(sent, [("x-api-key", "k$$1"), ("x-tenant", "t-acme $5")]);
    }

    #[test]
    fn our_headers_and_bad_ones_are_refused_saying_which() {
        for (headers, token, says) in [
            (map(&[("Host", "x")]), false, "set by Switchyard"),
            (
                map(&[("webhook-signature", "x")]),
                false,
                "set by Switchyard",
            ),
            (map(&[("Authorization", "Basic x")]), true, "access token"),
            (map(&[("X A", "x")]), false, "not a valid header name"),
            (map(&[("X-A", "a\nb")]), false, "line breaks"),
            (map(&[("X-A", "1"), ("x-a", "2")]), false, "twice"),
        ] {
            let e = check(&headers, token).unwrap_err().to_string();
            assert!(e.contains(says), "{headers:?}: {e}");
        }
        assert!(check(&map(&[("Authorization", "Basic x")]), false).is_ok());
    }

    #[test]
    fn a_secret_that_breaks_a_header_is_named() {
        let headers = map(&[("X-Api-Key", "$K")]);
        let e = resolve(&headers, &map(&[("K", "a\r\nb")])).unwrap_err();
        assert!(e.contains("X-Api-Key"), "{e}");
    }
}
