//! `GET /v1/openapi.json`: the API described for clients and tools, and
//! `GET /docs`: the same, browsable, in a vendored Swagger UI. Both are
//! public: a description of a public API holds no secrets.
//!
//! The document is written by hand in `openapi.json`; a unit test checks that
//! it lists exactly the routes the router serves, and the end-to-end tests
//! validate real responses against its schemas.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::error::Error;

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// Swagger UI, vendored from the npm package `swagger-ui-dist` (Apache-2.0,
/// licence beside the files); nothing is loaded from elsewhere.
const SWAGGER_UI: &str = "docs/swagger-ui-5.32.0";

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Switchyard API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
"#;

const INIT: &str = r##"window.ui = SwaggerUIBundle({ url: "/v1/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
"##;

pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}

pub async fn docs_page() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE)
}

pub async fn docs_asset(Path(file): Path<String>) -> Result<Response, Error> {
    let (content_type, body): (&str, &'static [u8]) = match file.as_str() {
        "swagger-ui-bundle.js" => (
            "text/javascript; charset=utf-8",
            include_bytes!("docs/swagger-ui-5.32.0/swagger-ui-bundle.js"),
        ),
        "swagger-ui.css" => (
            "text/css; charset=utf-8",
            include_bytes!("docs/swagger-ui-5.32.0/swagger-ui.css"),
        ),
        "init.js" => ("text/javascript; charset=utf-8", INIT.as_bytes()),
        other => {
            return Err(Error::NotFound(format!(
                "no file '{other}' under /docs (Swagger UI from {SWAGGER_UI}); open /docs"
            )));
        }
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        body,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::DOCUMENT;

    /// `(path, method)` for every route in the router's source: each
    /// `.route(...)` of `router`, and each of `scoped()` under every prefix
    /// it is nested at.
    fn routed() -> BTreeSet<(String, String)> {
        let source = include_str!("mod.rs");
        let (top, rest) = source.split_once("fn scoped()").unwrap();
        let scoped = rest.split("\n}\n").next().unwrap();
        let nest = regex::Regex::new(r#"\.nest\(\s*"([^"]+)",\s*scoped\(\)"#).unwrap();
        let mut out = routes(top, "");
        for prefix in nest.captures_iter(top) {
            out.extend(routes(scoped, &prefix[1]));
        }
        out
    }

    /// `(prefix + path, method)` for every `.route(...)` in `source`.
    fn routes(source: &str, prefix: &str) -> BTreeSet<(String, String)> {
        let method = regex::Regex::new(r"\b(get|post|put|delete|patch)\(").unwrap();
        let mut out = BTreeSet::new();
        for chunk in source.split(".route(").skip(1) {
            let chunk = chunk.split(".fallback(").next().unwrap();
            let chunk = chunk.split(".nest(").next().unwrap();
            let path = format!("{prefix}{}", chunk.split('"').nth(1).unwrap());
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
