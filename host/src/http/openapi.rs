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

    /// The source of the router's modules, by name.
    fn source(module: &str) -> &'static str {
        match module {
            "mod" => include_str!("mod.rs"),
            "groups" => include_str!("groups.rs"),
            "secrets" => include_str!("secrets.rs"),
            "webhooks" => include_str!("webhooks.rs"),
            "projects" => include_str!("projects.rs"),
            "runs" => include_str!("runs.rs"),
            "automations" => include_str!("automations.rs"),
            "artifacts" => include_str!("artifacts.rs"),
            other => panic!("the route walker does not know module {other}; add it to source()"),
        }
    }

    /// The body of `fn name` in `module`.
    fn body(module: &str, name: &str) -> &'static str {
        let source = source(module);
        let start = source
            .find(&format!("fn {name}("))
            .or_else(|| source.find(&format!("fn {name}<")));
        let start = start.unwrap_or_else(|| panic!("no fn {name} in {module}"));
        source[start..].split("\n}\n").next().unwrap()
    }

    /// `(path, method)` for every route in the router's source: each
    /// `.route(...)` of `router`, and those of each router it nests, under
    /// the prefix it is nested at.
    fn routed() -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        walk("mod", "router", "", &mut out);
        out
    }

    /// The routes of the router `module::function` builds, under `prefix`.
    fn walk(module: &str, function: &str, prefix: &str, out: &mut BTreeSet<(String, String)>) {
        let body = body(module, function);
        let call = regex::Regex::new(r#"\.(route|nest)\(\s*"([^"]*)",\s*"#).unwrap();
        let method = regex::Regex::new(r"\b(get|post|put|delete|patch)\(").unwrap();
        let target = regex::Regex::new(r"^(?:(\w+)::)?(\w+)(?:::<\w+>)?\([^)]*\)").unwrap();
        let calls: Vec<_> = call.captures_iter(body).collect();
        for (n, c) in calls.iter().enumerate() {
            let end = calls
                .get(n + 1)
                .map_or(body.len(), |next| next.get(0).unwrap().start());
            let rest = &body[c.get(0).unwrap().end()..end];
            let rest = rest
                .split(".merge(")
                .next()
                .unwrap()
                .split(".fallback(")
                .next()
                .unwrap();
            let path = match &c[2] {
                "/" => prefix.to_string(),
                p => format!("{prefix}{p}"),
            };
            if &c[1] == "route" {
                for m in method.captures_iter(rest) {
                    out.insert((path.clone(), m[1].to_string()));
                }
                continue;
            }
            let t = target
                .captures(rest)
                .unwrap_or_else(|| panic!("cannot read the nest at {path}"));
            walk(t.get(1).map_or(module, |m| m.as_str()), &t[2], &path, out);
        }
        // Routers merged from a function of this module taking nothing (the
        // console's, built elsewhere with the app, are not API routes).
        let merged = regex::Regex::new(r"\.merge\((\w+)\(\)\)").unwrap();
        for m in merged.captures_iter(body) {
            walk(module, &m[1], prefix, out);
        }
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
