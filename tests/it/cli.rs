//! The command line against a running host: plugins and users as an
//! operator sees them, and a configuration checked without starting.

use crate::harness::{Host, OPERATOR_KEY, cli, listed};

fn wasm_path(name: &str) -> String {
    format!("{}/{name}.wasm", switchyard_components::DIR)
}

on_each_store!(the_plugin_and_user_commands_drive_a_running_host);
async fn the_plugin_and_user_commands_drive_a_running_host() {
    let host = Host::start().await;
    let remote = ["--url", host.base.as_str(), "--key", OPERATOR_KEY];
    let run = async |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(remote);
        cli(&all).await
    };
    let (ok, table, stderr) = run(&["plugin", "list"]).await;
    assert!(ok, "{stderr}");
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("NAME") && header.contains("KIND"),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("template-default ")),
        "{table}"
    );

    let wasm = wasm_path("template_default");
    let (ok, out, stderr) = run(&[
        "plugin",
        "upload",
        "shout",
        &wasm,
        "--kind",
        "payload-template",
        "--version",
        "1.2.3",
    ])
    .await;
    assert!(ok, "{stderr}");
    assert!(
        out.starts_with("loaded shout@1.2.3 (payload-template, sha256 "),
        "{out}"
    );
    let (_, json, _) = run(&["plugin", "list", "--json"]).await;
    let listing: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names = listed(&listing, "name");
    assert!(names.contains(&"shout"), "{json}");

    let input = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        input.path(),
        r#"{"template": "{\"said\": \"${x}\"}", "variables": {"x": "hi"}}"#,
    )
    .unwrap();
    let input = input.path().to_str().unwrap();
    let (ok, out, stderr) = run(&["plugin", "invoke", "shout", "--input", input]).await;
    assert!(ok, "{stderr}");
    let output: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(output["output"], serde_json::json!({"said": "hi"}), "{out}");

    let (ok, out, stderr) = run(&["plugin", "remove", "shout"]).await;
    assert!(ok && out.trim() == "removed shout", "{out}{stderr}");
    let (_, table, _) = run(&["plugin", "list"]).await;
    assert!(!table.contains("shout"), "{table}");

    let (ok, table, stderr) = run(&["admin", "users"]).await;
    assert!(ok, "{stderr}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("operator ") && l.contains("true")),
        "{table}"
    );

    let (ok, _, stderr) = cli(&["plugin", "list", "--url", &host.base, "--key", "sy_wrong"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("(HTTP 401)") && stderr.contains("API key"),
        "{stderr}"
    );
}

#[tokio::test]
async fn config_check_validates_without_starting() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "listen = \"127.0.0.1:9999\"\n[store]\nlease_ms = 5000\n",
    )
    .unwrap();
    let (ok, out, stderr) = cli(&["config", "check", "--config", good.to_str().unwrap()]).await;
    assert!(ok, "{stderr}");
    assert!(
        out.starts_with("configuration is valid: listen 127.0.0.1:9999"),
        "{out}"
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[delivery]\nretry_shedule_ms = [1]\n").unwrap();
    let (ok, _, stderr) = cli(&["config", "check", "--config", bad.to_str().unwrap()]).await;
    assert!(!ok);
    assert!(
        stderr.contains("retry_shedule_ms"),
        "names the unknown key: {stderr}"
    );
}
