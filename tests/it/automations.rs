//! Registries, projects and automations: lifecycle, roles, validation
//! through the plugins, and dependants.

use serde_json::{Value, json};

use crate::harness::{Host, assert_error_shape, expect_error, expect_invalid};
use crate::world::World;

const LOOPBACK: &str = "[webhooks]\nallow_private = [\"127.0.0.0/8\"]";

struct Scene {
    host: Host,
    alice: String,
    bob: String,
    eve: String,
}

/// The shared world (see `world.rs`), webhook `ci` pointing nowhere.
async fn world() -> Scene {
    let host = Host::with_config(LOOPBACK).await;
    let world = World::build(&host, Some("http://127.0.0.1:9/hook")).await;
    Scene {
        host,
        alice: world.alice,
        bob: world.bob,
        eve: world.eve,
    }
}

fn alias_automation(name: &str) -> Value {
    json!({
        "name": name,
        "description": "promote to prod",
        "event": {"type": "ADD_ARTIFACT_ALIAS", "alias_regex": "^prod(uction)?$"},
        "webhook": {"team": "ml", "name": "ci"},
        "action": "Webhooks",
        "payload": r#"{"event_type": "${event_type}", "client_payload": {"version": "${artifact_version_string}", "token": "${ACCESS_TOKEN}", "sign": "${SIGN}"}}"#,
    })
}

const PROJECT_AUTOMATIONS: &str = "/v1/teams/ml/projects/vision/automations";
const REGISTRY_AUTOMATIONS: &str = "/v1/registries/models/automations";

on_each_store!(projects_and_registries_have_a_lifecycle_and_are_private);
async fn projects_and_registries_have_a_lifecycle_and_are_private() {
    let Scene {
        host,
        alice,
        bob,
        eve,
    } = world().await;
    let (status, body) = call!(host, bob, GET "/v1/teams/ml/projects/vision");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["created_by"], "alice");
    assert_eq!(body["description"], "image models");
    let (status, list) = call!(host, alice, GET "/v1/teams/ml/projects");
    assert_eq!((status, list["data"].as_array().unwrap().len()), (200, 1));
    let answer = call!(host, alice, POST "/v1/teams/ml/projects", {"name": "vision"});
    expect_error(&answer, 409, "conflict", None);

    // Outsiders see neither the project nor the registry, and learn nothing.
    for path in [
        "/v1/teams/ml/projects/vision",
        "/v1/registries/models",
        REGISTRY_AUTOMATIONS,
    ] {
        let (status, body) = call!(host, eve, GET "{path}");
        expect_error(&(status, body.clone()), 404, "not_found", None);
        assert_error_shape(&body);
    }
    let (_, mine) = call!(host, eve, GET "/v1/registries");
    assert_eq!(mine["data"], json!([]));
    let (_, bobs) = call!(host, bob, GET "/v1/registries");
    assert_eq!(bobs["data"][0]["name"], "models");
    assert_eq!(bobs["data"][0]["role"], "member");
    assert_eq!(bobs["data"][0]["description"], "production models");

    // Registry members are managed by registry admins only.
    let answer = call!(host, bob, PUT "/v1/registries/models/members/eve", {"role": "admin"});
    expect_error(&answer, 403, "permission_denied", None);
    let answer = call!(host, alice, DELETE "/v1/registries/models/members/alice");
    expect_error(&answer, 409, "conflict", None);

    // Only team admins delete projects.
    let answer = call!(host, bob, DELETE "/v1/teams/ml/projects/vision");
    expect_error(&answer, 403, "permission_denied", None);
    let (status, _) = call!(host, alice, DELETE "/v1/teams/ml/projects/vision");
    assert_eq!(status, 204);
    let answer = call!(host, alice, GET "/v1/teams/ml/projects/vision");
    expect_error(&answer, 404, "not_found", None);
}

on_each_store!(automation_lifecycle_in_a_project);
async fn automation_lifecycle_in_a_project() {
    let Scene {
        host, alice, bob, ..
    } = world().await;
    let (status, created) = host
        .call(
            "POST",
            PROJECT_AUTOMATIONS,
            &alice,
            Some(&alias_automation("promote")),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["state"], "active");
    assert_eq!(
        created["scope"],
        json!({"type": "project", "team": "ml", "project": "vision"})
    );
    assert_eq!(created["event"]["type"], "ADD_ARTIFACT_ALIAS");
    assert_eq!(created["template_plugin"], "template-default");
    let answer = host
        .call(
            "POST",
            PROJECT_AUTOMATIONS,
            &alice,
            Some(&alias_automation("promote")),
        )
        .await;
    expect_error(&answer, 409, "conflict", None);

    // Members read; only admins of the project's team write.
    let (status, list) = call!(host, bob, GET "{PROJECT_AUTOMATIONS}");
    assert_eq!(
        (status, list["data"][0]["name"].clone()),
        (200, json!("promote"))
    );
    let (status, body) = host
        .call(
            "POST",
            PROJECT_AUTOMATIONS,
            &bob,
            Some(&alias_automation("mine")),
        )
        .await;
    expect_error(&(status, body.clone()), 403, "permission_denied", None);
    let path = format!("{PROJECT_AUTOMATIONS}/promote");
    expect_error(
        &call!(host, bob, DELETE "{path}"),
        403,
        "permission_denied",
        None,
    );

    // Update re-validates and may rename.
    let mut changed = alias_automation("promote-v2");
    changed["event"] = json!({"type": "ADD_ARTIFACT_TAG", "tag_regex": "^release-"});
    let (status, updated) = call!(host, alice, PUT "{path}", changed);
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["name"], "promote-v2");
    assert_eq!(updated["created_at"], created["created_at"]);
    expect_error(&call!(host, alice, GET "{path}"), 404, "not_found", None);
    changed["event"] = json!({"type": "ADD_ARTIFACT_TAG", "tag_regex": "("});
    let renamed = format!("{PROJECT_AUTOMATIONS}/promote-v2");
    let (status, body) = call!(host, alice, PUT "{renamed}", changed);
    expect_error(&(status, body.clone()), 400, "invalid-regex", Some("event"));
    let (_, still) = call!(host, bob, GET "{renamed}");
    assert_eq!(still["event"]["tag_regex"], "^release-");
    // A template's error carries the plugin's code and where in the payload.
    changed["event"] = json!({"type": "ADD_ARTIFACT_TAG"});
    changed["payload"] = json!("{\n  \"x\": \"${nope}\"}");
    let answer = call!(host, alice, PUT "{renamed}", changed);
    let error = expect_error(&answer, 400, "unknown-variable", Some("payload"));
    assert_eq!(
        error["position"],
        json!({"offset": 10, "line": 2, "column": 9}),
        "{error}"
    );

    assert_eq!(call!(host, alice, DELETE "{renamed}").0, 204);
    expect_error(&call!(host, alice, GET "{renamed}"), 404, "not_found", None);
}

on_each_store!(registry_automations_need_a_registry_admin);
async fn registry_automations_need_a_registry_admin() {
    let Scene {
        host,
        alice,
        bob,
        eve,
    } = world().await;
    let (status, body) = host
        .call(
            "POST",
            REGISTRY_AUTOMATIONS,
            &bob,
            Some(&alias_automation("a")),
        )
        .await;
    expect_error(&(status, body.clone()), 403, "permission_denied", None);
    let (status, body) = host
        .call(
            "POST",
            REGISTRY_AUTOMATIONS,
            &eve,
            Some(&alias_automation("a")),
        )
        .await;
    expect_error(&(status, body.clone()), 404, "not_found", None);
    let mut link = alias_automation("linked");
    link["event"] = json!({"type": "LINK_ARTIFACT"});
    let (status, created) = call!(host, alice, POST "{REGISTRY_AUTOMATIONS}", link);
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["scope"],
        json!({"type": "registry", "registry": "models"})
    );

    // A registry admin can only use webhooks of teams they belong to; a
    // foreign webhook reads exactly like a missing one.
    let (status, _) = call!(host, eve, POST "/v1/teams/other/webhooks", {"name": "hers", "url": "http://127.0.0.1:9/"});
    assert_eq!(status, 201);
    let mut foreign = alias_automation("foreign");
    foreign["webhook"] = json!({"team": "other", "name": "hers"});
    foreign["payload"] = Value::Null;
    let (status, a) = call!(host, alice, POST "{REGISTRY_AUTOMATIONS}", foreign);
    foreign["webhook"] = json!({"team": "nowhere", "name": "hers"});
    let (status2, b) = call!(host, alice, POST "{REGISTRY_AUTOMATIONS}", foreign);
    assert_eq!((status, status2), (400, 400));
    assert_eq!(a["error"]["param"], "webhook");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("you belong to"),
        "{b}"
    );
}

/// Posts `body` as alice to the project and returns the 400's error object
/// (its `param` is each caller's to check).
async fn rejected(w: &Scene, body: &Value) -> Value {
    let (status, response) = w
        .host
        .call("POST", PROJECT_AUTOMATIONS, &w.alice, Some(body))
        .await;
    assert_eq!(status, 400, "{body} → {response}");
    let error = assert_error_shape(&response);
    assert_eq!(error["type"], "invalid_request_error", "{response}");
    error.clone()
}

on_each_store!(bad_definitions_are_refused_precisely);
async fn bad_definitions_are_refused_precisely() {
    let w = world().await;
    let with = |path: &[&str], value: Value| {
        let mut body = alias_automation("x");
        let mut at = &mut body;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = value;
        body
    };

    let e = rejected(&w, &with(&["event", "alias_regex"], json!("prod("))).await;
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("alias_regex") && message.contains("filter-default@"),
        "{e}"
    );
    assert_eq!(e["param"], "event");

    let e = rejected(
        &w,
        &with(&["event", "alias_regex"], json!("a".repeat(960_000))),
    )
    .await;
    assert!(
        e["message"].as_str().unwrap().contains("limit is 1024"),
        "{e}"
    );
    assert_eq!(e["param"], "event");

    let e = rejected(
        &w,
        &with(&["payload"], json!("{\n \"a\": ${artifact_metadata.a.b}}")),
    )
    .await;
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("only top-level keys") && message.contains("line 2 column 7"),
        "{e}"
    );
    assert_eq!(e["param"], "payload");

    let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
    let e = rejected(&w, &with(&["payload"], json!(deep))).await;
    assert!(e["message"].as_str().unwrap().contains("32 levels"), "{e}");
    assert_eq!(e["param"], "payload");

    let e = rejected(
        &w,
        &json!({"name": "x", "event": {"type": "ADD_ARTIFACT_ALIAS"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"}),
    )
    .await;
    assert!(
        e["message"].as_str().unwrap().contains("alias_regex"),
        "{e}"
    );

    let e = rejected(
        &w,
        &with(&["payload"], json!("{\n  \"a\": \"${artifact_colour}\"}")),
    )
    .await;
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("artifact_colour") && message.contains("line 2"),
        "{e}"
    );
    assert_eq!(e["param"], "payload");

    let e = rejected(&w, &with(&["payload"], json!(r#"{"a": "${SPARE}"}"#))).await;
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("SPARE") && message.contains("does not carry"),
        "{e}"
    );

    let e = rejected(&w, &with(&["payload"], json!(r#"{"a": ${event_type"#))).await;
    assert!(
        e["message"].as_str().unwrap().contains("template-default@"),
        "{e}"
    );

    let metric = json!({"type": "RUN_METRIC_THRESHOLD",
        "metric": {"name": "loss", "comparison": "<", "threshold": 0.1},
        "run_filters": {"run_name_regex": "["}});
    let e = rejected(&w, &with(&["event"], metric.clone())).await;
    assert!(
        e["message"].as_str().unwrap().contains("run_name_regex"),
        "{e}"
    );
    let mut bad_cmp = metric.clone();
    bad_cmp["run_filters"] = json!({});
    bad_cmp["metric"]["comparison"] = json!("~");
    let e = rejected(&w, &with(&["event"], bad_cmp)).await;
    assert!(e["message"].as_str().unwrap().contains("comparison"), "{e}");

    let mut good = metric;
    good["run_filters"] = json!({"creator": "bob", "run_name_regex": "^sweep-"});
    let (status, body) = w
        .host
        .call(
            "POST",
            REGISTRY_AUTOMATIONS,
            &w.alice,
            Some(&with(&["event"], good.clone())),
        )
        .await;
    expect_invalid(&(status, body.clone()), "event.type");
    assert_eq!(body["error"]["param"], "event.type");
    let (status, body) = w
        .host
        .call(
            "POST",
            PROJECT_AUTOMATIONS,
            &w.alice,
            Some(&with(&["event"], good)),
        )
        .await;
    assert_eq!(status, 201, "{body}");

    for (field, value) in [
        ("name", json!("")),
        ("name", json!("x".repeat(65))),
        ("name", json!(7)),
        ("description", json!("d".repeat(5000))),
        ("action", json!("Email")),
        ("colour", json!("red")),
        ("template_plugin", json!("no-such-plugin")),
        ("payload", json!("x".repeat(70_000))),
    ] {
        let e = rejected(&w, &with(&[field], value.clone())).await;
        let named = e["param"].as_str().unwrap_or("").contains(field)
            || e["message"].as_str().unwrap().contains(field);
        assert!(named, "{field}={value}: {e}");
    }
    let e = rejected(&w, &with(&["event", "type"], json!("DELETE_EVERYTHING"))).await;
    assert!(
        e["message"].as_str().unwrap().contains("DELETE_EVERYTHING"),
        "{e}"
    );
}

on_each_store!(dependants_block_deletion_unless_forced);
async fn dependants_block_deletion_unless_forced() {
    let Scene { host, alice, .. } = world().await;
    let (status, _) = host
        .call(
            "POST",
            PROJECT_AUTOMATIONS,
            &alice,
            Some(&alias_automation("promote")),
        )
        .await;
    assert_eq!(status, 201);

    let (status, body) = call!(host, alice, DELETE "/v1/teams/ml/webhooks/ci");
    expect_error(&(status, body.clone()), 409, "conflict", None);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("promote") && message.contains("force"),
        "{message}"
    );
    let (status, body) = call!(host, alice, DELETE "/v1/teams/ml/secrets/SIGN");
    expect_error(&(status, body.clone()), 409, "conflict", None);
    assert!(body["error"]["message"].as_str().unwrap().contains("ci"));

    let (status, _) = call!(host, alice, DELETE "/v1/teams/ml/webhooks/ci?force=true");
    assert_eq!(status, 204);
    let (_, automation) = call!(host, alice, GET "{PROJECT_AUTOMATIONS}/promote");
    assert_eq!(automation["state"], "disabled");
    assert!(
        automation["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("ml/ci")
    );

    let (status, body) = call!(host, alice, DELETE "/v1/teams/ml/projects/vision");
    expect_error(&(status, body.clone()), 409, "conflict", None);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("promote")
    );
    let (status, _) = call!(host, alice, DELETE "/v1/teams/ml/projects/vision?force=true");
    assert_eq!(status, 204);
    let (status, _) = call!(host, alice, POST "/v1/teams/ml/projects", {"name": "vision"});
    assert_eq!(status, 201);
    let (_, list) = call!(host, alice, GET "{PROJECT_AUTOMATIONS}");
    assert_eq!(list["data"], json!([]), "a recreated project starts empty");
}
