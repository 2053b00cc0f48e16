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

    /// OpenAPI 3.1's `webhooks`: one delivery per event type, its body
    /// the default payload's schema from the catalog.
    fn webhooks_section() -> serde_json::Value {
        let mut section = serde_json::Map::new();
        for info in crate::automation::catalog::all() {
            let mut schema = info.schema;
            schema.as_object_mut().unwrap().remove("$schema");
            let name = info.event_type.as_str();
            let delivery = serde_json::json!({"post": {
                "summary": format!("{name}: the default payload"),
                "description": format!("{} What an automation on {name} with no payload template sends; a template sends what it renders instead. Scopes: {}.", info.description, info.scopes.join(", ")),
                "tags": ["deliveries"],
                "parameters": [
                    {"$ref": "#/components/parameters/DeliveryId"},
                    {"$ref": "#/components/parameters/DeliverySignature"}
                ],
                "requestBody": {"required": true, "content": {"application/json": {
                    "schema": schema, "example": info.example}}},
                "responses": {
                    "2XX": {"description": "Received: the delivery is done"},
                    "410": {"description": "Gone: the webhook is disabled and its deliveries held until it is saved again"},
                    "default": {"description": "Not received: 408, 429 and 5xx are retried (after Retry-After when given); other statuses fail the delivery"}
                }
            }});
            section.insert(name.to_string(), delivery);
        }
        serde_json::Value::Object(section)
    }

    /// The document's `webhooks` are the catalog's, event type by event
    /// type; run with SWITCHYARD_BLESS_OPENAPI=<file> to write what they
    /// should be to <file>.
    #[test]
    fn the_webhooks_are_the_event_catalogs() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).unwrap();
        let want = webhooks_section();
        if let Ok(file) = std::env::var("SWITCHYARD_BLESS_OPENAPI") {
            std::fs::write(file, serde_json::to_string(&want).unwrap()).unwrap();
        }
        assert_eq!(
            doc["webhooks"], want,
            "openapi.json's webhooks differ from the catalog's"
        );
        let listed = doc["paths"]["/v1/event-types"]["get"].to_string();
        assert!(listed.contains("EventTypeList"), "{listed}");
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

    /// The field names serde reads for `T`: what serde_derive hands
    /// `deserialize_struct`, renames applied. (A struct with a flattened
    /// field is read as a map and names none: `None`.)
    fn fields<T: serde::de::DeserializeOwned>() -> Option<BTreeSet<String>> {
        use serde::de::{Error as _, Visitor};
        struct Introspect<'a>(&'a mut Option<&'static [&'static str]>);
        impl<'de> serde::Deserializer<'de> for Introspect<'_> {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(Self::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                *self.0 = Some(fields);
                Err(Self::Error::custom("read"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                enum identifier ignored_any
            }
        }
        let mut found = None;
        let _ = T::deserialize(Introspect(&mut found));
        found.map(|f| f.iter().map(|s| s.to_string()).collect())
    }

    /// The properties the document gives schema `name`.
    fn documented_fields(name: &str) -> BTreeSet<String> {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).unwrap();
        let schema = &doc["components"]["schemas"][name]["properties"];
        let properties = schema.as_object();
        let properties = properties.unwrap_or_else(|| panic!("schema {name} has no properties"));
        properties.keys().cloned().collect()
    }

    /// Each schema of a record the API answers with has exactly the fields
    /// of the Rust type behind it, less those never shown (a sealed body,
    /// the other form's labels): a field added to a type without the
    /// document, or the other way round, fails here.
    #[test]
    fn each_schema_has_the_fields_of_its_type() {
        use crate::model;
        let none: &[&str] = &[];
        // (schema, the type's fields, those never shown)
        type Check<'a> = (&'a str, Option<BTreeSet<String>>, &'a [&'a str]);
        let checks: Vec<Check> = vec![
            ("User", fields::<model::User>(), none),
            ("RateLimits", fields::<model::RateLimits>(), none),
            ("Project", fields::<model::Project>(), none),
            ("Webhook", fields::<model::Webhook>(), none),
            ("BreakerSettings", fields::<model::BreakerSettings>(), none),
            ("Automation", fields::<model::Automation>(), none),
            ("Collection", fields::<model::Collection>(), none),
            ("Run", fields::<model::Run>(), none),
            ("Attempt", fields::<model::Attempt>(), none),
            ("Execution", fields::<model::Execution>(), &["body_sealed"]),
            ("Usage", fields::<model::Totals>(), none),
            ("Group", fields::<super::super::groups::GroupShown>(), none),
            ("Member", fields::<model::Member>(), none),
            (
                "SecretInfo",
                fields::<crate::domain::secrets::SecretInfo>(),
                none,
            ),
            ("Check", fields::<crate::app::health::Check>(), none),
            ("SystemCheck", fields::<crate::app::health::Report>(), none),
            (
                "PublicKeys",
                fields::<crate::automation::webhooks::PublicKeys>(),
                none,
            ),
            (
                "WebhookTestOutcome",
                fields::<crate::automation::webhook_test::Outcome>(),
                none,
            ),
            (
                "AliasesAdded",
                fields::<super::super::artifacts::LabelsAdded>(),
                &["tags"],
            ),
            (
                "TagsAdded",
                fields::<super::super::artifacts::LabelsAdded>(),
                &["aliases", "moved_from"],
            ),
        ];
        let mut checks = checks;
        // Types with a flattened field, whose fields serde names only as
        // it writes them: a value with every field filled (a struct
        // literal, so a field added to the type must be filled here too).
        checks.push(("ApiKey", Some(keys_of(&api_key())), none));
        checks.push(("Version", Some(keys_of(&labelled_version())), none));
        checks.push(("Plugin", Some(keys_of(&plugin_shown())), none));
        checks.push(("WebhookShown", Some(keys_of(&webhook_shown())), none));
        let mut wrong = Vec::new();
        for (schema, fields, hidden) in checks {
            let fields = fields.unwrap_or_else(|| panic!("{schema}'s type names no fields"));
            let shown: BTreeSet<String> = fields
                .into_iter()
                .filter(|f| !hidden.contains(&f.as_str()))
                .collect();
            let documented = documented_fields(schema);
            let missing: Vec<_> = shown.difference(&documented).collect();
            let stale: Vec<_> = documented.difference(&shown).collect();
            if !missing.is_empty() || !stale.is_empty() {
                wrong.push(format!(
                    "{schema}: undocumented {missing:?}, not in the type {stale:?}"
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "openapi.json and the types disagree:\n{}",
            wrong.join("\n")
        );
    }

    /// The keys of `value` written as JSON.
    fn keys_of<T: serde::Serialize>(value: &T) -> BTreeSet<String> {
        let json = serde_json::to_value(value).unwrap();
        json.as_object().unwrap().keys().cloned().collect()
    }

    fn api_key() -> crate::model::ApiKey {
        crate::model::ApiKey {
            id: "k".into(),
            user_id: "u".into(),
            name: "ci".into(),
            prefix: "sy_".into(),
            created_at: 1,
            models: Some(Vec::new()),
            projects: Some(Vec::new()),
            expires_at: Some(2),
            limits: crate::model::RateLimits {
                rpm: Some(1),
                tpm: Some(1),
                tokens_per_day: Some(1),
                usd_per_day: Some(1.0),
                usd_per_month: Some(1.0),
            },
        }
    }

    fn webhook_shown() -> super::super::webhooks::Shown {
        let some = |text: &str| Some(text.to_string());
        super::super::webhooks::Shown {
            webhook: crate::model::Webhook {
                name: "ci".into(),
                url: "https://example.com/".into(),
                access_token_secret: some("TOKEN"),
                signing_secret: some("SIGN"),
                standard_webhooks: true,
                signing_key_secret: some("KEY"),
                previous_signing_secret: some("OLD"),
                previous_signing_key_secret: some("OLD_KEY"),
                previous_until: Some(2),
                max_per_second: Some(1.0),
                circuit_breaker: Some(crate::model::BreakerSettings::default()),
                headers: [("X-Api-Key".to_string(), "$KEY".to_string())].into(),
                retry_schedule_ms: Some(vec![0]),
                disable_after_hours: Some(120.0),
                auth: Some(crate::model::WebhookAuth::Oauth2ClientCredentials {
                    token_url: "https://auth.example.com/token".into(),
                    client_id: "switchyard".into(),
                    client_secret_secret: "CLIENT_SECRET".into(),
                    scope: some("hooks"),
                }),
                ordering: crate::model::Ordering::Fifo,
                tls: Some(crate::model::WebhookTls {
                    client_cert_secret: some("CLIENT_CERT"),
                    client_key_secret: some("CLIENT_KEY"),
                    ca_secret: some("RECEIVER_CA"),
                }),
                disabled_reason: some("gone"),
                created_at: 1,
                updated_at: 1,
            },
            circuit: crate::model::Circuit::Closed,
            failing_since_ms: Some(1),
        }
    }

    fn plugin_shown() -> super::super::admin::PluginShown {
        use crate::plugin::{Kind, Source};
        super::super::admin::PluginShown {
            name: "p".into(),
            kind: Kind::ModelBackend,
            version: "1".into(),
            sha256: "00".into(),
            source: Source::Upload,
            loaded_at: 1,
            size_bytes: 1,
            limits: crate::plugin::Limits::default_for(Kind::ModelBackend),
            calls: 1,
            failures: 0,
            p50_us: Some(1),
            models: Some(Vec::new()),
            replaced: Some(super::super::admin::Replaced {
                version: "0".into(),
                sha256: "00".into(),
            }),
        }
    }

    fn labelled_version() -> crate::model::LabelledVersion {
        let source = crate::model::Source {
            team: "ml".into(),
            project: "p".into(),
            collection: "c".into(),
            version: "v0".into(),
        };
        crate::model::LabelledVersion {
            version: crate::model::Version {
                collection: "c".into(),
                version: "v0".into(),
                index: 0,
                metadata: Default::default(),
                source: Some(source),
                created_by: "alice".into(),
                created_at: 1,
            },
            aliases: Vec::new(),
            tags: Vec::new(),
        }
    }

    #[test]
    fn the_field_reader_names_renamed_fields_and_sees_no_flattened_ones() {
        #[derive(serde::Deserialize)]
        #[expect(dead_code, reason = "read by serde only")]
        struct Plain {
            #[serde(rename = "b")]
            a: u8,
        }
        #[derive(serde::Deserialize)]
        #[expect(dead_code, reason = "read by serde only")]
        struct Flat {
            #[serde(flatten)]
            plain: Plain,
        }
        assert_eq!(fields::<Plain>(), Some(BTreeSet::from(["b".to_string()])));
        assert_eq!(fields::<Flat>(), None);
    }
}
