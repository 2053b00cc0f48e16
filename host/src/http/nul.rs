//! NUL characters (U+0000) are refused at the edge, in every engine alike.
//!
//! PostgreSQL's text and jsonb cannot hold one, and nothing a client names
//! or describes needs one; refusing them where requests come in (the URL,
//! JSON bodies, console forms) keeps them out of every handler and store,
//! with a 400 that names the field instead of a 500 from the database.

use serde_json::Value;

use crate::error::Error;

/// A 400 for a NUL in the URL's path or query (`%00`), before routing.
pub fn in_uri(uri: &axum::http::Uri) -> Option<Error> {
    let encoded = |text: &str| text.as_bytes().windows(3).any(|w| w == b"%00");
    let part = if encoded(uri.path()) {
        "path"
    } else if uri.query().is_some_and(encoded) {
        "query string"
    } else {
        return None;
    };
    Some(Error::InvalidRequest {
        message: format!(
            "the request URL's {part} holds a NUL character (%00), which no name or value may \
             contain; remove it"
        ),
        param: None,
    })
}

/// A 400 naming the first string (a key or a value, at any depth) of a
/// JSON body that holds a NUL. Parses only bodies that spell one (`\u0000`).
pub fn in_json(body: &[u8]) -> Option<Error> {
    if !body.windows(6).any(|w| w == b"\\u0000") {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let path = find(&value, String::new())?;
    Some(refused(&path))
}

/// A 400 naming the first form field whose name or value holds a NUL.
pub fn in_fields<'a>(fields: impl IntoIterator<Item = (&'a String, &'a String)>) -> Option<Error> {
    fields
        .into_iter()
        .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        .map(|(k, _)| refused(&k.replace('\0', "\\u0000")))
}

fn refused(path: &str) -> Error {
    let param = if path.is_empty() { "." } else { path };
    Error::invalid(
        param,
        format!(
            "'{param}' holds a NUL character (\\u0000), which no name or value may contain; \
             remove it"
        ),
    )
}

/// The path of the first string holding a NUL: `a.b[2]`, or the object's
/// path and the key itself (escaped) when a key holds it.
fn find(value: &Value, path: String) -> Option<String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::String(s) => s.contains('\0').then_some(path),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find(item, format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                Some(join(&key.replace('\0', "\\u0000")))
            } else {
                find(item, join(key))
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: &str) -> Option<String> {
        in_json(body.as_bytes()).map(|e| e.param().unwrap_or_default().to_string())
    }

    #[test]
    fn the_field_holding_a_nul_is_named_at_any_depth() {
        assert_eq!(param(r#"{"name":"a\u0000b"}"#).as_deref(), Some("name"));
        assert_eq!(
            param(r#"{"metadata":{"k":{"deep":["x","a\u0000"]}}}"#).as_deref(),
            Some("metadata.k.deep[1]")
        );
        assert_eq!(
            param(r#"{"metadata":{"k\u0000":1}}"#).as_deref(),
            Some("metadata.k\\u0000")
        );
        assert_eq!(param(r#""\u0000""#).as_deref(), Some("."));
    }

    #[test]
    fn an_escaped_backslash_is_not_a_nul() {
        assert_eq!(param(r#"{"name":"a\\u0000b"}"#), None);
        assert_eq!(param(r#"{"name":"plain"}"#), None);
    }

    #[test]
    fn urls_with_an_encoded_nul_are_refused() {
        let uri: axum::http::Uri = "/v1/teams/bad%00x".parse().unwrap();
        assert!(in_uri(&uri).unwrap().to_string().contains("path"));
        let uri: axum::http::Uri = "/v1/x?since=1%00".parse().unwrap();
        assert!(in_uri(&uri).unwrap().to_string().contains("query string"));
        let uri: axum::http::Uri = "/v1/teams/ok%2000".parse().unwrap();
        assert!(in_uri(&uri).is_none());
    }
}
