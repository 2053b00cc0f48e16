//! `GET /v1/openapi.json` is public, and it tells the truth: every
//! documented operation is called for real, and each response (status and
//! body) is validated against the document's own schemas with a JSON Schema
//! validator. The unit test in `http::openapi` checks that the router serves
//! exactly the documented routes.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::harness::{Host, OPERATOR_KEY, expect_error, into_parts, plugin_wasm, python_venv};
use crate::receiver::Receiver;

/// The document, and which operations have been validated so far.
struct Spec {
    doc: Value,
    host: Host,
    validated: BTreeSet<(String, String)>,
    /// Every mismatch found, reported together at the end.
    mismatches: Vec<String>,
}

impl Spec {
    /// Calls `method path` as the holder of `key`, and validates the answer
    /// against the document's operation for the path's template.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let template = self.template(path);
        let mut request = self.host.http.request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            self.host.url(path),
        );
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = &body {
            request = request.json(body);
        }
        let (status, value) = into_parts(request.send().await.unwrap()).await;
        self.validate(&method.to_lowercase(), &template, status, &value);
        (status, value)
    }

    /// The document's path template that `path` fills in: the one whose
    /// fixed segments all match, preferring more fixed segments.
    fn template(&self, path: &str) -> String {
        let segments: Vec<&str> = path.split('/').collect();
        let fixed_matches = |template: &str| {
            let parts: Vec<&str> = template.split('/').collect();
            let fits = parts.len() == segments.len()
                && parts
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t.starts_with('{') || t == s);
            fits.then(|| parts.iter().filter(|t| !t.starts_with('{')).count())
        };
        let templates = self.doc["paths"].as_object().unwrap().keys();
        let best = templates
            .filter_map(|t| fixed_matches(t).map(|n| (n, t)))
            .max();
        best.unwrap_or_else(|| panic!("no documented path matches {path}"))
            .1
            .clone()
    }

    fn validate(&mut self, method: &str, template: &str, status: u16, body: &Value) {
        self.validated
            .insert((template.to_string(), method.to_string()));
        let op = &self.doc["paths"][template][method];
        assert!(op.is_object(), "{method} {template} is not documented");
        let responses = &op["responses"];
        let Some(response) = responses
            .get(status.to_string())
            .or_else(|| (status >= 400).then(|| &responses["default"]))
        else {
            self.mismatches.push(format!(
                "{method} {template} answered {status}, which is not documented: {body}"
            ));
            return;
        };
        let mut response = response.clone();
        if let Some(reference) = response.get("$ref").and_then(Value::as_str) {
            let pointer = reference.trim_start_matches('#');
            response = self.doc.pointer(pointer).unwrap().clone();
        }
        match response["content"].get("application/json") {
            Some(content) => {
                let mut schema = content["schema"].clone();
                // The schema's `#/components/...` references resolve against
                // this root, which carries the document's components.
                schema["components"] = self.doc["components"].clone();
                let validator = jsonschema::validator_for(&schema)
                    .unwrap_or_else(|e| panic!("{method} {template} {status}: bad schema: {e}"));
                let errors: Vec<String> = validator
                    .iter_errors(body)
                    .map(|e| format!("{} at {}", e, e.instance_path()))
                    .collect();
                if !errors.is_empty() {
                    self.mismatches.push(format!(
                        "{method} {template} {status} does not match its schema:\n  {}\n  body: {body}",
                        errors.join("\n  ")
                    ));
                }
            }
            None if !body.is_null() => self.mismatches.push(format!(
                "{method} {template} {status} has a body its document does not describe: {body}"
            )),
            None => {}
        }
    }

    fn documented(&self) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                out.insert((path.clone(), method.clone()));
            }
        }
        out
    }
}

/// Asserts a status and returns the body.
/// A documented call that must answer `$status`; its body:
/// `want!(s, 201, key, POST "/v1/teams", {"name": "ml"})`.
macro_rules! want {
    ($s:expr, $status:literal, $key:expr, $method:ident $path:literal $(, $body:tt)?) => {
        want($status, $s.call(stringify!($method), &format!($path), $key, json_body!($($body)?)).await)
    };
}

fn want(expected: u16, (status, body): (u16, Value)) -> Value {
    assert_eq!(status, expected, "{body}");
    body
}

on_each_store!(the_document_is_public_and_browsable);
async fn the_document_is_public_and_browsable() {
    let host = Host::start().await;
    let (status, doc) = host.get_anon("/v1/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let page = host.http.get(host.url("/docs")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("/docs/swagger-ui-bundle.js") && !html.contains("https://"),
        "{html}"
    );
    for (file, kind) in [
        ("swagger-ui-bundle.js", "text/javascript"),
        ("swagger-ui.css", "text/css"),
        ("init.js", "text/javascript"),
    ] {
        let response = host.raw("GET", &format!("/docs/{file}")).await;
        assert_eq!(response.status(), 200, "{file}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(content_type.starts_with(kind), "{file}: {content_type}");
        assert!(response.bytes().await.unwrap().len() > 50, "{file}");
    }
    let answer = host.get_anon("/docs/../../etc/passwd").await;
    expect_error(&answer, 404, "not_found", None);
}

/// The history of `automation` (its path): waits for its first execution
/// to finish, then reads it and replays it, and every failed one.
async fn history(s: &mut Spec, a: Option<&str>, automation: &str) {
    let executions_path = format!("{automation}/executions");
    let mut list = Value::Null;
    for _ in 0..200 {
        list = want!(s, 200, a, GET "{executions_path}");
        if list["data"][0]["status"] == "Finished" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(list["data"][0]["status"], "Finished", "{list}");
    let id = list["data"][0]["id"].as_str().unwrap().to_string();
    want!(s, 200, a, GET "{executions_path}/{id}");
    want!(s, 202, a, POST "{executions_path}/{id}/replay");
    want!(s, 202, a, POST "{automation}/replay", {"since_ms": 0});
}

on_each_store!(every_documented_operation_answers_as_its_schema_says);
async fn every_documented_operation_answers_as_its_schema_says() {
    let receiver = Receiver::start().await;
    let host = Host::builder()
        .with_model()
        .config("[webhooks]\nallow_private = [\"127.0.0.0/8\"]")
        .start()
        .await;
    let doc = host.get_anon("/v1/openapi.json").await.1;
    let mut s = Spec {
        doc,
        host,
        validated: BTreeSet::new(),
        mismatches: Vec::new(),
    };
    let op = Some(OPERATOR_KEY);

    // Meta.
    let health = s.call("GET", "/v1/system-check", None, None).await;
    assert_eq!(health.0, 200, "{}", health.1);
    want!(s, 200, None, GET "/v1/openapi.json");
    for (template, path) in [("/docs", "/docs"), ("/docs/{file}", "/docs/init.js")] {
        let response = s.host.http.get(s.host.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        s.validated
            .insert((template.to_string(), "get".to_string()));
    }

    // Users and keys.
    let alice = want!(s, 201, op, POST "/v1/admin/users", {"name": "alice"})["api_key"]["key"]
        .as_str()
        .unwrap()
        .to_string();
    want!(s, 201, op, POST "/v1/admin/users", {"name": "bob"});
    want!(s, 200, op, GET "/v1/admin/users");
    let a = Some(alice.as_str());
    want!(s, 200, a, GET "/v1/me");
    want!(s, 200, a, GET "/v1/event-types");
    let key = want!(s, 201, a, POST "/v1/me/api-keys", {"name": "spare"});
    want!(s, 200, a, GET "/v1/me/api-keys");
    let key_path = format!("/v1/me/api-keys/{}", key["id"].as_str().unwrap());
    want!(s, 204, a, DELETE "{key_path}");
    want!(s, 401, None, GET "/v1/me");

    // Teams, members, secrets, webhooks, projects and registries.
    let url = format!("{}/hook", receiver.base);
    let settings = json!({"url": url, "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    let mut ci = settings.clone();
    ci["name"] = json!("ci");
    want!(s, 201, a, POST "/v1/teams", {"name": "ml"});
    want!(s, 200, a, GET "/v1/teams");
    want!(s, 200, a, GET "/v1/teams/ml");
    want!(s, 200, a, GET "/v1/teams/ml/members");
    want!(s, 200, a, PUT "/v1/teams/ml/members/bob", {"role": "member"});
    want!(s, 204, a, DELETE "/v1/teams/ml/members/bob");
    want!(s, 201, a, PUT "/v1/teams/ml/secrets/TOKEN", {"value": "v-1"});
    want!(s, 201, a, PUT "/v1/teams/ml/secrets/SIGN", {"value": "v-1"});
    want!(s, 201, a, PUT "/v1/teams/ml/secrets/SPARE", {"value": "v-1"});
    want!(s, 200, a, PUT "/v1/teams/ml/secrets/SPARE", {"value": "v-2"});
    want!(s, 200, a, GET "/v1/teams/ml/secrets");
    want!(s, 204, a, DELETE "/v1/teams/ml/secrets/SPARE");
    want!(s, 201, a, POST "/v1/teams/ml/webhooks", ci);
    want!(s, 201, a, POST "/v1/teams/ml/webhooks", {"name": "tmp", "url": url});
    want!(s, 200, a, GET "/v1/teams/ml/webhooks");
    want!(s, 200, a, GET "/v1/teams/ml/webhooks/ci");
    want!(s, 200, a, PUT "/v1/teams/ml/webhooks/ci", settings);
    want!(s, 204, a, DELETE "/v1/teams/ml/webhooks/tmp");
    // Signing keys, generated, and a rotation to a second one.
    for key in ["KEY1", "KEY2"] {
        want!(s, 201, a, PUT "/v1/teams/ml/secrets/{key}", {"generate": "ed25519"});
    }
    want!(s, 201, a, PUT "/v1/teams/ml/secrets/SIGN2", {"value": "v-2"});
    let mut keyed = settings.clone();
    keyed["signing_key_secret"] = json!("KEY1");
    want!(s, 200, a, PUT "/v1/teams/ml/webhooks/ci", keyed);
    let rotation = json!({"signing_secret": "SIGN2", "signing_key_secret": "KEY2"});
    want!(s, 200, a, POST "/v1/teams/ml/webhooks/ci/rotate", rotation);
    want!(s, 200, a, GET "/v1/teams/ml/webhooks/ci/public-key");
    want!(s, 200, a, PUT "/v1/teams/ml/webhooks/ci", settings);
    want!(s, 201, a, POST "/v1/teams/ml/projects", {"name": "vision"});
    want!(s, 201, a, POST "/v1/teams/ml/projects", {"name": "tmp"});
    want!(s, 200, a, GET "/v1/teams/ml/projects");
    want!(s, 200, a, GET "/v1/teams/ml/projects/vision");
    want!(s, 204, a, DELETE "/v1/teams/ml/projects/tmp");
    want!(s, 201, a, POST "/v1/registries", {"name": "models"});
    want!(s, 200, a, GET "/v1/registries");
    want!(s, 200, a, GET "/v1/registries/models");
    want!(s, 200, a, GET "/v1/registries/models/members");
    want!(s, 200, a, PUT "/v1/registries/models/members/bob", {"role": "member"});
    want!(s, 204, a, DELETE "/v1/registries/models/members/bob");
    let test = json!({"payload": {"x": "$SIGN"}});
    let outcome = want!(s, 200, a, POST "/v1/teams/ml/webhooks/ci/test", test);
    assert_eq!(outcome["success"], true, "{outcome}");

    // Automations, artifacts, executions, in both kinds of scope.
    let scopes = [
        (
            "/v1/teams/{team}/projects/{project}",
            "/v1/teams/ml/projects/vision",
        ),
        ("/v1/registries/{registry}", "/v1/registries/models"),
    ];
    for (t, p) in scopes {
        let definition = |name: &str| {
            json!({"name": name, "event": {"type": "ADD_ARTIFACT_TAG"}, "webhook": {"team": "ml", "name": "ci"},
                   "action": "Webhooks", "payload": "{\"tag\": \"${tag}\", \"s\": \"$SIGN\"}"})
        };
        let (tagged, tmp) = (definition("tagged"), definition("tmp"));
        want!(s, 201, a, POST "{p}/collections", {"name": "detector"});
        want!(s, 201, a, POST "{p}/collections", {"name": "gone"});
        want!(s, 204, a, DELETE "{p}/collections/gone");
        // On the scope, and on one of its collections.
        let listening = [p.to_string(), format!("{p}/collections/detector")];
        for l in &listening {
            want!(s, 201, a, POST "{l}/automations", tagged);
            want!(s, 201, a, POST "{l}/automations", tmp);
            want!(s, 200, a, GET "{l}/automations");
            want!(s, 200, a, GET "{l}/automations/tagged");
            want!(s, 200, a, PUT "{l}/automations/tagged", tagged);
            want!(s, 204, a, DELETE "{l}/automations/tmp");
        }
        want!(s, 200, a, GET "{p}/collections");
        want!(s, 200, a, GET "{p}/collections/detector");
        let version_path = format!("{p}/collections/detector/versions");
        let metadata = Some(json!({"metadata": {"accuracy": 0.9}}));
        let created = s.call("POST", &version_path, a, metadata).await;
        if t.starts_with("/v1/registries") {
            // Registry versions come from links only.
            assert_eq!(created.0, 400, "{}", created.1);
            let source = json!({"team": "ml", "project": "vision", "collection": "detector", "version": "v0"});
            want!(s, 201, a, POST "{p}/collections/detector/links", source);
        } else {
            want(201, created);
        }
        want!(s, 200, a, GET "{version_path}");
        want!(s, 200, a, GET "{version_path}/v0");
        want!(s, 200, a, POST "{version_path}/v0/aliases", {"alias": "prod"});
        want!(s, 200, a, POST "{version_path}/v0/tags", {"tag": "t1"});
        for l in &listening {
            history(&mut s, a, &format!("{l}/automations/tagged")).await;
        }
    }

    // A team's automations, on what happens to its webhooks: one that
    // answers 410 is switched off, which fires `watch`.
    let gone = Receiver::start().await;
    gone.answer(410);
    let gone_hook = json!({"name": "gone", "url": format!("{}/hook", gone.base)});
    want!(s, 201, a, POST "/v1/teams/ml/webhooks", gone_hook);
    let team = "/v1/teams/ml/automations";
    let watch = |name: &str, event: &str| {
        json!({"name": name, "event": {"type": event},
            "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"})
    };
    want!(s, 201, a, POST "{team}", (watch("watch", "WEBHOOK_DISABLED")));
    want!(s, 201, a, POST "{team}", (watch("tmp", "WEBHOOK_RECOVERED")));
    want!(s, 200, a, GET "{team}");
    want!(s, 200, a, GET "{team}/watch");
    want!(s, 200, a, PUT "{team}/watch", (watch("watch", "WEBHOOK_DISABLED")));
    want!(s, 204, a, DELETE "{team}/tmp");
    let to_gone = json!({"name": "to-gone", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "gone"}, "action": "Webhooks"});
    want!(s, 201, a, POST "/v1/teams/ml/projects/vision/automations", to_gone);
    let tags = "/v1/teams/ml/projects/vision/collections/detector/versions/v0/tags";
    want!(s, 200, a, POST "{tags}", {"tag": "t2"});
    history(&mut s, a, &format!("{team}/watch")).await;

    // An automation without a payload, with every optional field of its
    // event left out.
    let metric = json!({"name": "converged", "event": {"type": "RUN_METRIC_THRESHOLD",
        "metric": {"name": "loss", "comparison": "<", "threshold": 0.1}},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    want!(s, 201, a, POST "/v1/teams/ml/projects/vision/automations", metric);
    for (name, event) in [
        (
            "improving",
            json!({"type": "RUN_METRIC_CHANGE",
                "metric": {"name": "acc", "change_type": "relative", "amount": 0.05}}),
        ),
        (
            "spiking",
            json!({"type": "RUN_METRIC_ZSCORE", "metric": {"name": "loss"}}),
        ),
    ] {
        let body = json!({"name": name, "event": event,
            "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
        want!(s, 201, a, POST "/v1/teams/ml/projects/vision/automations", body);
    }

    // Runs.
    let run = want!(s, 201, a, POST "/v1/teams/ml/projects/vision/runs", {"name": "sweep-1"});
    let run_path = format!(
        "/v1/teams/ml/projects/vision/runs/{}",
        run["id"].as_str().unwrap()
    );
    want!(s, 200, a, GET "/v1/teams/ml/projects/vision/runs");
    want!(s, 200, a, GET "{run_path}");
    want!(s, 200, a, POST "{run_path}/metrics", {"metrics": {"loss": 0.5}});
    want!(s, 200, a, PATCH "{run_path}", {"state": "finished"});

    // Plugins (operators).
    want!(s, 200, op, GET "/v1/admin/plugins");
    let plugin = "/v1/admin/plugins/{name}";
    want!(s, 200, op, GET "/v1/admin/plugins/template-default");
    let upload = s
        .host
        .http
        .put(
            s.host
                .url("/v1/admin/plugins/extra?kind=payload-template&version=1.0.0"),
        )
        .bearer_auth(OPERATOR_KEY)
        .header("content-type", "application/wasm")
        .body(plugin_wasm("misbehave"))
        .send()
        .await
        .unwrap();
    let (status, body) = into_parts(upload).await;
    s.validate("put", plugin, status, &body);
    assert_eq!(status, 201, "{body}");
    want!(s, 200, op, POST "/v1/admin/plugins/template-default/invoke", {"template": "{\"a\": ${x}}", "variables": {"x": 1}});
    want!(s, 204, op, DELETE "/v1/admin/plugins/extra");

    // Inference and usage.
    let models = want!(s, 200, a, GET "/v1/models");
    let model = models["data"][0]["id"].as_str().unwrap().to_string();
    want!(s, 200, a, GET "/v1/models/{model}");
    let chat =
        json!({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    want!(s, 200, a, POST "/v1/chat/completions", chat);
    want!(s, 404, a, POST "/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "Hi"}]});
    want!(s, 200, a, GET "/v1/me/usage");
    want!(s, 200, a, GET "/v1/teams/ml/projects/vision/usage");
    want!(s, 200, a, PUT "/v1/teams/ml/projects/vision/limits", {"rpm": 1000, "tpm": null});
    let scoped = want!(s, 201, a, POST "/v1/me/api-keys", {"name": "scoped", "models": ["other"],
        "projects": ["ml/vision"], "expires_at": 4_000_000_000u64, "rpm": 5, "tpm": 5000, "tokens_per_day": 100000});
    let scoped = scoped["key"].as_str().unwrap().to_string();
    want!(s, 403, Some(&scoped), POST "/v1/chat/completions", chat);
    want!(s, 400, a, POST "/v1/embeddings", {"model": model, "input": "Hi"});
    want!(s, 200, a, POST "/v1/completions", {"model": model, "prompt": "Hi", "max_tokens": 2});
    want!(s, 200, a, POST "/v1/responses", {"model": model, "input": "Hi", "max_output_tokens": 2});
    let message =
        json!({"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]});
    want!(s, 200, a, POST "/v1/messages", message);
    want!(s, 400, a, POST "/v1/messages", {"model": model, "messages": []});
    want!(s, 200, a, POST "/v1/messages/count_tokens", {"model": model, "messages": [{"role": "user", "content": "Hi"}]});

    assert!(
        s.mismatches.is_empty(),
        "{} responses differ from the document:\n{}",
        s.mismatches.len(),
        s.mismatches.join("\n")
    );
    let missing: Vec<_> = s.documented().difference(&s.validated).cloned().collect();
    assert!(
        missing.is_empty(),
        "documented but never validated: {missing:?}"
    );
}

/// The generator's version, pinned: a new one may warn about new things.
const GENERATOR: &str = "openapi-python-client==0.29.1";

on_each_store!(a_generated_python_client_builds_without_warnings_and_works);
async fn a_generated_python_client_builds_without_warnings_and_works() {
    let python = python_venv("openapi-client-venv", &[GENERATOR]);
    let bin = std::path::Path::new(&python)
        .parent()
        .unwrap()
        .to_path_buf();
    let host = Host::start().await;
    let work = tempfile::tempdir().unwrap();
    let spec = work.path().join("openapi.json");
    let doc = host.raw("GET", "/v1/openapi.json").await;
    std::fs::write(&spec, doc.bytes().await.unwrap()).unwrap();
    let out = work.path().join("client");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let generated = std::process::Command::new(bin.join("openapi-python-client"))
        .args(["generate", "--path"])
        .arg(&spec)
        .arg("--output-path")
        .arg(&out)
        .env("PATH", &path)
        .output()
        .expect("running openapi-python-client");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&generated.stdout),
        String::from_utf8_lossy(&generated.stderr)
    );
    assert!(generated.status.success(), "{said}");
    assert!(
        !said.to_lowercase().contains("warning"),
        "the generator warned:\n{said}"
    );

    let script = format!(
        r#"
import sys
sys.path.insert(0, {out:?})
from switchyard_client import AuthenticatedClient
from switchyard_client.api.health import get_v1_system_check
from switchyard_client.api.teams import get_v1_teams, post_v1_teams
from switchyard_client.models import SystemCheck, Group, PostV1TeamsBody
client = AuthenticatedClient(base_url={base:?}, token={key:?})
check = get_v1_system_check.sync(client=client)
assert isinstance(check, SystemCheck) and check.api is True, check
created = post_v1_teams.sync(client=client, body=PostV1TeamsBody(name="py-team"))
assert isinstance(created, Group) and created.name == "py-team", created
teams = get_v1_teams.sync(client=client)
assert [t.name for t in teams.data] == ["py-team"], teams
print("ok")
"#,
        out = out.display().to_string(),
        base = host.base,
        key = OPERATOR_KEY,
    );
    let ran = std::process::Command::new(&python)
        .args(["-c", &script])
        .output()
        .expect("running the generated client");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(ran.status.success() && said.trim() == "ok", "{said}");
}
