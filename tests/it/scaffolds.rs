//! Plugins as their authors make them: `switchyard plugin new` in each
//! language, built outside this repository by that language's own
//! toolchain (cargo, componentize-py from PyPI, jco from npm) with the
//! README's one command, then checked, uploaded and called.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::harness::{Host, TARGET, cli, expect_error, python_venv};
use crate::world::{PROJECT, World};

/// Webhooks may point at this machine (nothing is delivered here).
const LOOPBACK_HOOKS: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]";

/// A project made by `plugin new` and built; holds its directory.
struct Built {
    dir: tempfile::TempDir,
    wasm: PathBuf,
}

impl Built {
    /// `plugin new NAME --lang LANG --kind KIND` in a fresh directory; then
    /// `edit` may change its files before it is built.
    async fn new(name: &str, lang: &str, kind: &str, edit: impl FnOnce(&Path)) -> Built {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join(name);
        let (ok, out, err) = cli(&[
            "plugin",
            "new",
            name,
            "--lang",
            lang,
            "--kind",
            kind,
            "--dir",
            project.to_str().unwrap(),
        ])
        .await;
        assert!(ok, "{err}");
        let build = out
            .trim()
            .split_once("build it there with: ")
            .unwrap_or_else(|| panic!("no build command in {out}"))
            .1
            .to_string();
        let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
        assert!(
            readme.contains(&build),
            "the README gives {build}:\n{readme}"
        );
        let (version, files): (&str, &[&str]) = match kind {
            "model-backend" => ("0.4.0", &["types.wit", "model.wit"]),
            _ => ("0.1.0", &["types.wit", "template.wit", "filter.wit"]),
        };
        for file in files {
            let ours = format!("{}/../wit/v{version}/{file}", env!("CARGO_MANIFEST_DIR"));
            assert_eq!(
                std::fs::read_to_string(project.join("wit").join(file)).unwrap(),
                std::fs::read_to_string(ours).unwrap(),
                "{file} is the current interface's"
            );
        }
        edit(&project);
        let wasm = run_build(&project, lang, &build);
        let wasm = wasm.unwrap_or_else(|| project.join(format!("{name}.wasm")));
        assert!(wasm.exists(), "{lang}: {build} made no {}", wasm.display());
        Built { dir, wasm }
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.wasm).unwrap()
    }

    fn sample(&self) -> Value {
        let project = std::fs::read_dir(self.dir.path()).unwrap().next().unwrap();
        let text = std::fs::read(project.unwrap().path().join("sample-input.json")).unwrap();
        serde_json::from_slice(&text).unwrap()
    }
}

/// Runs the README's build command in `project` with the language's tools;
/// returns where a Rust build left the component (a shared target
/// directory, so the tests build wit-bindgen once).
fn run_build(project: &Path, lang: &str, build: &str) -> Option<PathBuf> {
    let mut command = Command::new("sh");
    command.current_dir(project).args(["-c", build]);
    let mut wasm = None;
    match lang {
        "rust" => {
            crate::plugin_units::without_outer_cargo(&mut command);
            let target = format!("{TARGET}/scaffolds");
            command.env("CARGO_TARGET_DIR", &target);
            let name = project.file_name().unwrap().to_str().unwrap();
            wasm = Some(PathBuf::from(format!(
                "{target}/wasm32-wasip2/release/{}.wasm",
                name.replace('-', "_")
            )));
        }
        "python" => {
            let python = python_venv(
                "componentize-py",
                &[switchyard::plugin::scaffold::COMPONENTIZE_PY],
            );
            let bin = Path::new(&python).parent().unwrap().to_path_buf();
            let path = std::env::var("PATH").unwrap_or_default();
            command.env("PATH", format!("{}:{path}", bin.display()));
        }
        _ => {
            command.env("npm_config_fund", "false");
            command.env("npm_config_audit", "false");
        }
    }
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{lang}: running {build}: {e}"));
    assert!(
        out.status.success(),
        "{lang}: {build} failed (the test needs cargo, python3 with pip, and node with npm):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wasm
}

/// Checks `built` with `switchyard plugin check` on its sample input, then
/// uploads it as `name` and invokes it on that input; returns the answer.
async fn check_and_invoke(host: &Host, built: &Built, name: &str, kind: &str) -> Value {
    let sample = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(sample.path(), built.sample().to_string()).unwrap();
    let (ok, report, err) = cli(&[
        "plugin",
        "check",
        built.wasm.to_str().unwrap(),
        "--kind",
        kind,
        "--input",
        sample.path().to_str().unwrap(),
    ])
    .await;
    assert!(ok, "plugin check: {err}");
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    let query = format!("kind={kind}&version=0.1.0");
    let (status, body) = host.upload_plugin(name, &query, built.bytes()).await;
    assert_eq!(status, 201, "{body}");
    let (status, answer) = host.invoke(name, &built.sample()).await;
    assert_eq!(status, 200, "{answer}\n{}", host.log());
    answer
}

/// What every language's template makes of the sample input.
fn sample_payload() -> Value {
    json!({"text": "ADD_ARTIFACT_ALIAS", "by": "alice", "version": "acme/models/resnet:v3"})
}

/// Each language's filter against an event, through the host.
async fn filters_like_the_default(host: &Host, name: &str) {
    let cases = [
        (
            json!({"alias_regex": "^prod"}),
            json!({"event_type": "ADD_ARTIFACT_ALIAS", "alias": "staging"}),
            false,
        ),
        (
            json!({"metric": {"name": "loss", "window": 2, "aggregation": "average", "comparison": "<", "threshold": 0.5}}),
            json!({"event_type": "RUN_METRIC", "metric_name": "loss", "metric_values": [0.9, 0.4, 0.5]}),
            true,
        ),
        (
            json!({"run_creator": "alice"}),
            json!({"event_type": "RUN_METRIC", "run_creator": "bob"}),
            false,
        ),
    ];
    for (config, event, expected) in cases {
        let input = json!({"config": config, "event": event});
        let (status, answer) = host.invoke(name, &input).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["matches"], expected, "{name} on {input}");
    }
    let bad = json!({"config": {"tag_regex": "("}, "event": {"event_type": "ADD_ARTIFACT_TAG", "tag": "x"}});
    let answer = host.invoke(name, &bad).await;
    expect_error(&answer, 400, "invalid-regex", Some("config"));
}

/// The `lang` filter scaffold, built, loaded as `name` and tried.
async fn filter_from_scaffold(host: &Host, lang: &str, name: &str) {
    let filter = Built::new(name, lang, "event-filter", |_| {}).await;
    let answer = check_and_invoke(host, &filter, name, "event-filter").await;
    assert_eq!(answer["matches"], true);
    filters_like_the_default(host, name).await;
}

/// An automation saved with `payload` rendered by the template `plugin`:
/// the plugin's refusal, as the API reports it.
async fn refusal_at_save(host: &Host, plugin: &str, payload: &str) -> Value {
    let world = World::build(host, Some("http://127.0.0.1:9/hook")).await;
    let automation = json!({"name": "refused", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": payload, "template_plugin": plugin});
    let path = format!("{PROJECT}/automations");
    let answer = call!(host, world.alice, POST "{path}", automation);
    expect_error(&answer, 400, "unknown-variable", Some("payload")).clone()
}

#[tokio::test]
async fn a_rust_plugin_from_plugin_new_builds_on_its_own_and_loads() {
    let host = Host::start().await;
    let template = Built::new("rust-template", "rust", "payload-template", |_| {}).await;
    let answer = check_and_invoke(&host, &template, "rust-template", "payload-template").await;
    assert_eq!(answer["output"], sample_payload());
    filter_from_scaffold(&host, "rust", "rust-filter").await;
}

/// A model backend from `plugin new` in `lang`, built by its toolchain on
/// its own, serves its model: listed, chatted with whole and streamed, its
/// usage counted.
async fn backend_from_scaffold(host: &Host, lang: &str) {
    let name = format!("{lang}-model");
    let built = Built::new(&name, lang, "model-backend", |_| {}).await;
    let query = "kind=model-backend&version=0.1.0";
    let (status, body) = host.upload_plugin(&name, query, built.bytes()).await;
    assert_eq!(status, 201, "{lang}: {body}");
    assert_eq!(body["models"], json!([name]), "{lang}: {body}");
    let key = host.create_user(&format!("{lang}-user")).await;
    let ask = |stream: bool| {
        json!({"model": name, "stream": stream,
               "messages": [{"role": "user", "content": "Hello there, model"}]})
    };
    let (status, reply) = call!(host, key, POST "/v1/chat/completions", (ask(false)));
    assert_eq!(status, 200, "{lang}: {reply}");
    let message = &reply["choices"][0]["message"]["content"];
    assert_eq!(message, "Hello there, model", "{lang}: {reply}");
    assert_eq!(reply["usage"]["completion_tokens"], 3, "{lang}: {reply}");
    let response = (host.http.post(host.url("/v1/chat/completions")))
        .bearer_auth(&key)
        .json(&ask(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{lang}");
    let text = response.text().await.unwrap();
    let streamed = crate::harness::streamed_text(&text);
    assert_eq!(streamed, "Hello there, model", "{lang}: {text}");
    let (_, usage) = call!(host, key, GET "/v1/me/usage");
    assert_eq!(usage["by_model"][&name]["requests"], 2, "{lang}: {usage}");
}

#[tokio::test]
async fn a_rust_model_backend_from_plugin_new_builds_and_answers_a_chat() {
    backend_from_scaffold(&Host::start().await, "rust").await;
}

#[tokio::test]
async fn a_python_plugin_built_by_componentize_py_loads_and_speaks_to_its_author() {
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    // The author adds a print and an exception of their own.
    let template = Built::new("py-template", "python", "payload-template", |dir| {
        let app = dir.join("app.py");
        let code = std::fs::read_to_string(&app).unwrap().replace(
            "        values = {v.name: v.value for v in variables}\n",
            "        print(f\"rendering {len(template)} bytes\")\n        if template == \"boom\":\n            raise ValueError(\"the template said boom\")\n        values = {v.name: v.value for v in variables}\n",
        );
        assert!(code.contains("said boom"), "the edit applies");
        std::fs::write(app, code).unwrap();
    })
    .await;
    let answer = check_and_invoke(&host, &template, "py-template", "payload-template").await;
    assert_eq!(answer["output"], sample_payload());
    // print() reaches the host's log under the plugin's name.
    host.wait_for_log(&["py-template@0.1.0", "rendering "])
        .await;
    // An exception's traceback reaches whoever called.
    let (status, body) = host
        .invoke("py-template", &json!({"template": "boom", "variables": {}}))
        .await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("py-template@0.1.0"), "{message}");
    assert!(message.contains("Traceback"), "{message}");
    assert!(
        message.contains("ValueError: the template said boom"),
        "{message}"
    );

    // Its refusal, at save time, arrives with its code and position.
    let error = refusal_at_save(&host, "py-template", "{\n  \"x\": ${nope}}").await;
    assert_eq!(
        error["position"],
        json!({"offset": 9, "line": 2, "column": 8}),
        "{error}"
    );
    filter_from_scaffold(&host, "python", "py-filter").await;
    backend_from_scaffold(&host, "python").await;
}

#[tokio::test]
async fn a_javascript_plugin_built_by_jco_loads() {
    let host = Host::with_config(LOOPBACK_HOOKS).await;
    let template = Built::new("js-template", "js", "payload-template", |dir| {
        let plugin = dir.join("plugin.js");
        let code = std::fs::read_to_string(&plugin).unwrap().replace(
            "  render(text, variables) {\n",
            "  render(text, variables) {\n    console.log(`rendering ${text.length} bytes`);\n",
        );
        std::fs::write(plugin, code).unwrap();
    })
    .await;
    let answer = check_and_invoke(&host, &template, "js-template", "payload-template").await;
    assert_eq!(answer["output"], sample_payload());
    host.wait_for_log(&["js-template@0.1.0", "rendering "])
        .await;
    let error = refusal_at_save(&host, "js-template", "{\"x\": ${nope}}").await;
    assert_eq!(error["position"]["offset"], 6, "{error}");
    filter_from_scaffold(&host, "js", "js-filter").await;
    backend_from_scaffold(&host, "js").await;
}

#[tokio::test]
async fn plugin_new_refuses_a_bad_name_and_a_directory_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
    let (ok, _, err) = cli(&["plugin", "new", "mine", "--lang", "rust", "--dir", path]).await;
    assert!(!ok && err.contains("not empty"), "{err}");
    let (ok, _, err) = cli(&["plugin", "new", "Bad_Name", "--lang", "python"]).await;
    assert!(!ok && err.contains("not a valid plugin name"), "{err}");
}

/// `examples/discord-adapter`, built on its own with its README's command;
/// its `wit/` is the current interface's.
pub fn discord_example() -> Vec<u8> {
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/discord-adapter");
    for file in ["types.wit", "template.wit", "filter.wit"] {
        let ours = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../wit/v0.1.0")
            .join(file);
        assert_eq!(
            std::fs::read_to_string(project.join("wit").join(file)).unwrap(),
            std::fs::read_to_string(ours).unwrap(),
            "examples/discord-adapter/wit/{file} is the current interface's"
        );
    }
    let wasm = run_build(&project, "rust", "cargo build --release --locked").unwrap();
    std::fs::read(wasm).unwrap()
}
