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
    /// Calls `method template` (with `{…}` filled as in `path`) as the holder
    /// of `key`, and validates the answer against the document.
    async fn call(
        &mut self,
        method: &str,
        template: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method_lc = method.to_lowercase();
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
        self.validate(&method_lc, template, status, &value);
        (status, value)
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
    let health = s
        .call("GET", "/v1/system-check", "/v1/system-check", None, None)
        .await;
    assert_eq!(health.0, 200, "{}", health.1);
    want(
        200,
        s.call("GET", "/v1/openapi.json", "/v1/openapi.json", None, None)
            .await,
    );
    for (template, path) in [("/docs", "/docs"), ("/docs/{file}", "/docs/init.js")] {
        let response = s.host.http.get(s.host.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        s.validated
            .insert((template.to_string(), "get".to_string()));
    }

    // Users and keys.
    let alice = want(
        201,
        s.call(
            "POST",
            "/v1/admin/users",
            "/v1/admin/users",
            op,
            Some(json!({"name": "alice"})),
        )
        .await,
    )["api_key"]["key"]
        .as_str()
        .unwrap()
        .to_string();
    want(
        201,
        s.call(
            "POST",
            "/v1/admin/users",
            "/v1/admin/users",
            op,
            Some(json!({"name": "bob"})),
        )
        .await,
    );
    want(
        200,
        s.call("GET", "/v1/admin/users", "/v1/admin/users", op, None)
            .await,
    );
    let a = Some(alice.as_str());
    want(200, s.call("GET", "/v1/me", "/v1/me", a, None).await);
    let key = want(
        201,
        s.call(
            "POST",
            "/v1/me/api-keys",
            "/v1/me/api-keys",
            a,
            Some(json!({"name": "spare"})),
        )
        .await,
    );
    want(
        200,
        s.call("GET", "/v1/me/api-keys", "/v1/me/api-keys", a, None)
            .await,
    );
    let key_path = format!("/v1/me/api-keys/{}", key["id"].as_str().unwrap());
    want(
        204,
        s.call("DELETE", "/v1/me/api-keys/{id}", &key_path, a, None)
            .await,
    );
    want(401, s.call("GET", "/v1/me", "/v1/me", None, None).await);

    // Teams, members, secrets, webhooks.
    want(
        201,
        s.call(
            "POST",
            "/v1/teams",
            "/v1/teams",
            a,
            Some(json!({"name": "ml"})),
        )
        .await,
    );
    want(200, s.call("GET", "/v1/teams", "/v1/teams", a, None).await);
    want(
        200,
        s.call("GET", "/v1/teams/{team}", "/v1/teams/ml", a, None)
            .await,
    );
    want(
        200,
        s.call(
            "GET",
            "/v1/teams/{team}/members",
            "/v1/teams/ml/members",
            a,
            None,
        )
        .await,
    );
    let member = "/v1/teams/{team}/members/{user}";
    want(
        200,
        s.call(
            "PUT",
            member,
            "/v1/teams/ml/members/bob",
            a,
            Some(json!({"role": "member"})),
        )
        .await,
    );
    want(
        204,
        s.call("DELETE", member, "/v1/teams/ml/members/bob", a, None)
            .await,
    );
    let secret = "/v1/teams/{team}/secrets/{name}";
    for name in ["TOKEN", "SIGN", "SPARE"] {
        let path = format!("/v1/teams/ml/secrets/{name}");
        want(
            201,
            s.call("PUT", secret, &path, a, Some(json!({"value": "v-1"})))
                .await,
        );
    }
    want(
        200,
        s.call(
            "PUT",
            secret,
            "/v1/teams/ml/secrets/SPARE",
            a,
            Some(json!({"value": "v-2"})),
        )
        .await,
    );
    want(
        200,
        s.call(
            "GET",
            "/v1/teams/{team}/secrets",
            "/v1/teams/ml/secrets",
            a,
            None,
        )
        .await,
    );
    want(
        204,
        s.call("DELETE", secret, "/v1/teams/ml/secrets/SPARE", a, None)
            .await,
    );
    let hooks = "/v1/teams/{team}/webhooks";
    let hook = "/v1/teams/{team}/webhooks/{name}";
    let url = format!("{}/hook", receiver.base);
    let settings = json!({"url": url, "access_token_secret": "TOKEN", "signing_secret": "SIGN"});
    let mut ci = settings.clone();
    ci["name"] = json!("ci");
    want(
        201,
        s.call("POST", hooks, "/v1/teams/ml/webhooks", a, Some(ci))
            .await,
    );
    want(
        201,
        s.call(
            "POST",
            hooks,
            "/v1/teams/ml/webhooks",
            a,
            Some(json!({"name": "tmp", "url": url})),
        )
        .await,
    );
    want(
        200,
        s.call("GET", hooks, "/v1/teams/ml/webhooks", a, None).await,
    );
    want(
        200,
        s.call("GET", hook, "/v1/teams/ml/webhooks/ci", a, None)
            .await,
    );
    want(
        200,
        s.call("PUT", hook, "/v1/teams/ml/webhooks/ci", a, Some(settings))
            .await,
    );
    want(
        204,
        s.call("DELETE", hook, "/v1/teams/ml/webhooks/tmp", a, None)
            .await,
    );
    let test = "/v1/teams/{team}/webhooks/{name}/test";
    let outcome = want(
        200,
        s.call(
            "POST",
            test,
            "/v1/teams/ml/webhooks/ci/test",
            a,
            Some(json!({"payload": {"x": "$SIGN"}})),
        )
        .await,
    );
    assert_eq!(outcome["success"], true, "{outcome}");

    // Projects and registries.
    let projects = "/v1/teams/{team}/projects";
    want(
        201,
        s.call(
            "POST",
            projects,
            "/v1/teams/ml/projects",
            a,
            Some(json!({"name": "vision"})),
        )
        .await,
    );
    want(
        201,
        s.call(
            "POST",
            projects,
            "/v1/teams/ml/projects",
            a,
            Some(json!({"name": "tmp"})),
        )
        .await,
    );
    want(
        200,
        s.call("GET", projects, "/v1/teams/ml/projects", a, None)
            .await,
    );
    let project = "/v1/teams/{team}/projects/{name}";
    want(
        200,
        s.call("GET", project, "/v1/teams/ml/projects/vision", a, None)
            .await,
    );
    want(
        204,
        s.call("DELETE", project, "/v1/teams/ml/projects/tmp", a, None)
            .await,
    );
    want(
        201,
        s.call(
            "POST",
            "/v1/registries",
            "/v1/registries",
            a,
            Some(json!({"name": "models"})),
        )
        .await,
    );
    want(
        200,
        s.call("GET", "/v1/registries", "/v1/registries", a, None)
            .await,
    );
    want(
        200,
        s.call(
            "GET",
            "/v1/registries/{registry}",
            "/v1/registries/models",
            a,
            None,
        )
        .await,
    );
    want(
        200,
        s.call(
            "GET",
            "/v1/registries/{registry}/members",
            "/v1/registries/models/members",
            a,
            None,
        )
        .await,
    );
    let rmember = "/v1/registries/{registry}/members/{user}";
    want(
        200,
        s.call(
            "PUT",
            rmember,
            "/v1/registries/models/members/bob",
            a,
            Some(json!({"role": "member"})),
        )
        .await,
    );
    want(
        204,
        s.call(
            "DELETE",
            rmember,
            "/v1/registries/models/members/bob",
            a,
            None,
        )
        .await,
    );

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
        let (autos, auto) = (
            format!("{t}/automations"),
            format!("{t}/automations/{{name}}"),
        );
        want(
            201,
            s.call(
                "POST",
                &autos,
                &format!("{p}/automations"),
                a,
                Some(definition("tagged")),
            )
            .await,
        );
        want(
            201,
            s.call(
                "POST",
                &autos,
                &format!("{p}/automations"),
                a,
                Some(definition("tmp")),
            )
            .await,
        );
        want(
            200,
            s.call("GET", &autos, &format!("{p}/automations"), a, None)
                .await,
        );
        want(
            200,
            s.call("GET", &auto, &format!("{p}/automations/tagged"), a, None)
                .await,
        );
        want(
            200,
            s.call(
                "PUT",
                &auto,
                &format!("{p}/automations/tagged"),
                a,
                Some(definition("tagged")),
            )
            .await,
        );
        want(
            204,
            s.call("DELETE", &auto, &format!("{p}/automations/tmp"), a, None)
                .await,
        );
        let (cols, col) = (
            format!("{t}/collections"),
            format!("{t}/collections/{{collection}}"),
        );
        want(
            201,
            s.call(
                "POST",
                &cols,
                &format!("{p}/collections"),
                a,
                Some(json!({"name": "detector"})),
            )
            .await,
        );
        want(
            200,
            s.call("GET", &cols, &format!("{p}/collections"), a, None)
                .await,
        );
        want(
            200,
            s.call("GET", &col, &format!("{p}/collections/detector"), a, None)
                .await,
        );
        let versions = format!("{col}/versions");
        let version_path = format!("{p}/collections/detector/versions");
        let created = s
            .call(
                "POST",
                &versions,
                &version_path,
                a,
                Some(json!({"metadata": {"accuracy": 0.9}})),
            )
            .await;
        if t.starts_with("/v1/registries") {
            // Registry versions come from links only.
            assert_eq!(created.0, 400, "{}", created.1);
            let link = format!("{col}/links");
            let source = json!({"team": "ml", "project": "vision", "collection": "detector", "version": "v0"});
            want(
                201,
                s.call(
                    "POST",
                    &link,
                    &format!("{p}/collections/detector/links"),
                    a,
                    Some(source),
                )
                .await,
            );
        } else {
            want(201, created);
        }
        want(200, s.call("GET", &versions, &version_path, a, None).await);
        let version = format!("{versions}/{{version}}");
        want(
            200,
            s.call("GET", &version, &format!("{version_path}/v0"), a, None)
                .await,
        );
        want(
            200,
            s.call(
                "POST",
                &format!("{version}/aliases"),
                &format!("{version_path}/v0/aliases"),
                a,
                Some(json!({"alias": "prod"})),
            )
            .await,
        );
        want(
            200,
            s.call(
                "POST",
                &format!("{version}/tags"),
                &format!("{version_path}/v0/tags"),
                a,
                Some(json!({"tag": "t1"})),
            )
            .await,
        );
        let executions = format!("{auto}/executions");
        let executions_path = format!("{p}/automations/tagged/executions");
        let mut list = Value::Null;
        for _ in 0..200 {
            list = want(
                200,
                s.call("GET", &executions, &executions_path, a, None).await,
            );
            if list["data"][0]["status"] == "Finished" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(list["data"][0]["status"], "Finished", "{list}");
        let id = list["data"][0]["id"].as_str().unwrap().to_string();
        let execution = format!("{executions}/{{execution}}");
        want(
            200,
            s.call(
                "GET",
                &execution,
                &format!("{executions_path}/{id}"),
                a,
                None,
            )
            .await,
        );
        want(
            202,
            s.call(
                "POST",
                &format!("{execution}/replay"),
                &format!("{executions_path}/{id}/replay"),
                a,
                None,
            )
            .await,
        );
        want(
            202,
            s.call(
                "POST",
                &format!("{auto}/replay"),
                &format!("{p}/automations/tagged/replay"),
                a,
                Some(json!({"since_ms": 0})),
            )
            .await,
        );
    }

    // An automation without a payload, with every optional field of its
    // event left out.
    let metric = json!({"name": "converged", "event": {"type": "RUN_METRIC_THRESHOLD",
        "metric": {"name": "loss", "comparison": "<", "threshold": 0.1}},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    let autos = "/v1/teams/{team}/projects/{project}/automations";
    want(
        201,
        s.call(
            "POST",
            autos,
            "/v1/teams/ml/projects/vision/automations",
            a,
            Some(metric),
        )
        .await,
    );

    // Runs.
    let runs = "/v1/teams/{team}/projects/{project}/runs";
    let run = want(
        201,
        s.call(
            "POST",
            runs,
            "/v1/teams/ml/projects/vision/runs",
            a,
            Some(json!({"name": "sweep-1"})),
        )
        .await,
    );
    let run_path = format!(
        "/v1/teams/ml/projects/vision/runs/{}",
        run["id"].as_str().unwrap()
    );
    want(
        200,
        s.call("GET", runs, "/v1/teams/ml/projects/vision/runs", a, None)
            .await,
    );
    want(
        200,
        s.call("GET", &format!("{runs}/{{run}}"), &run_path, a, None)
            .await,
    );
    want(
        200,
        s.call(
            "POST",
            &format!("{runs}/{{run}}/metrics"),
            &format!("{run_path}/metrics"),
            a,
            Some(json!({"metrics": {"loss": 0.5}})),
        )
        .await,
    );

    // Plugins (operators).
    want(
        200,
        s.call("GET", "/v1/admin/plugins", "/v1/admin/plugins", op, None)
            .await,
    );
    let plugin = "/v1/admin/plugins/{name}";
    want(
        200,
        s.call(
            "GET",
            plugin,
            "/v1/admin/plugins/template-default",
            op,
            None,
        )
        .await,
    );
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
    let invoke = "/v1/admin/plugins/{name}/invoke";
    want(
        200,
        s.call(
            "POST",
            invoke,
            "/v1/admin/plugins/template-default/invoke",
            op,
            Some(json!({"template": "{\"a\": ${x}}", "variables": {"x": 1}})),
        )
        .await,
    );
    want(
        204,
        s.call("DELETE", plugin, "/v1/admin/plugins/extra", op, None)
            .await,
    );

    // Inference and usage.
    let models = want(
        200,
        s.call("GET", "/v1/models", "/v1/models", a, None).await,
    );
    let model = models["data"][0]["id"].as_str().unwrap().to_string();
    want(
        200,
        s.call(
            "GET",
            "/v1/models/{model}",
            &format!("/v1/models/{model}"),
            a,
            None,
        )
        .await,
    );
    let chat =
        json!({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    want(
        200,
        s.call(
            "POST",
            "/v1/chat/completions",
            "/v1/chat/completions",
            a,
            Some(chat),
        )
        .await,
    );
    want(
        404,
        s.call(
            "POST",
            "/v1/chat/completions",
            "/v1/chat/completions",
            a,
            Some(json!({"model": "nope", "messages": [{"role": "user", "content": "Hi"}]})),
        )
        .await,
    );
    want(
        200,
        s.call("GET", "/v1/me/usage", "/v1/me/usage", a, None).await,
    );
    want(
        200,
        s.call(
            "GET",
            "/v1/teams/{team}/projects/{project}/usage",
            "/v1/teams/ml/projects/vision/usage",
            a,
            None,
        )
        .await,
    );

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
