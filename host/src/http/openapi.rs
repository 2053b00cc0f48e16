//! `GET /v1/openapi.json`: the API described for clients and tools.
//!
//! The document is written by hand in `openapi.json`; a unit test checks that
//! it lists exactly the routes the router serves.

use axum::http::header;
use axum::response::IntoResponse;

use super::Caller;

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

pub async fn document(_caller: Caller) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::DOCUMENT;

    /// `(path, method)` for every `.route(...)` in the router's source.
    fn routed() -> BTreeSet<(String, String)> {
        let source = include_str!("mod.rs");
        let method = regex::Regex::new(r"\b(get|post|put|delete|patch)\(").unwrap();
        let mut out = BTreeSet::new();
        for chunk in source.split(".route(").skip(1) {
            let chunk = chunk.split(".fallback(").next().unwrap();
            let path = chunk.split('"').nth(1).unwrap().to_string();
            for m in method.captures_iter(chunk) {
                out.insert((path.clone(), m[1].to_string()));
            }
        }
        out
    }

    fn documented() -> BTreeSet<(String, String)> {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).unwrap();
        let mut out = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                out.insert((path.clone(), method.clone()));
            }
        }
        out
    }

    #[test]
    fn the_document_lists_exactly_the_routes() {
        let (routed, documented) = (routed(), documented());
        assert!(routed.len() > 30, "the route parser found only {routed:?}");
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&routed).collect();
        assert!(
            undocumented.is_empty(),
            "add to openapi.json: {undocumented:?}"
        );
        assert!(stale.is_empty(), "remove from openapi.json: {stale:?}");
    }

    #[test]
    fn every_reference_resolves() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).unwrap();
        let refs = regex::Regex::new(r##""\$ref": ?"#/components/(\w+)/(\w+)""##).unwrap();
        for m in refs.captures_iter(DOCUMENT) {
            assert!(
                doc["components"][&m[1]][&m[2]].is_object(),
                "dangling $ref {}/{}",
                &m[1],
                &m[2]
            );
        }
    }
}
