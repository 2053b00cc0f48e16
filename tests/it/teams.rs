//! Users, teams, roles and secrets over the real API.

use serde_json::{Value, json};

use crate::harness::{
    Engine, Host, OPERATOR_KEY, assert_error_shape, cli, expect_error, expect_invalid, raw_records,
};
use crate::world::World;

on_each_store!(operators_create_users_and_others_cannot);
async fn operators_create_users_and_others_cannot() {
    let host = Host::start().await;
    let alice = host.create_user("alice").await;
    let (status, me) = call!(host, alice, GET "/v1/me");
    assert_eq!(status, 200);
    assert_eq!(me["name"], "alice");
    assert_eq!(me["operator"], false);

    let (status, body) = call!(host, alice, POST "/v1/admin/users", {"name": "mallory"});
    expect_error(&(status, body.clone()), 403, "permission_denied", None);
    assert_eq!(assert_error_shape(&body)["type"], "permission_error");
    let (status, body) = host
        .post("/v1/admin/users", &json!({"name": "alice"}))
        .await;
    expect_error(&(status, body.clone()), 409, "conflict", None);
    let (status, body) = host.post("/v1/admin/users", &json!({"name": "a b"})).await;
    expect_invalid(&(status, body.clone()), "name");
    assert_eq!(body["error"]["param"], "name");
    let (_, list) = host.get("/v1/admin/users").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 2, "{list}");
}

on_each_store!(team_roles_are_enforced_and_teams_are_invisible_to_outsiders);
async fn team_roles_are_enforced_and_teams_are_invisible_to_outsiders() {
    let host = Host::start().await;
    let (alice, bob, eve) = (
        host.create_user("alice").await,
        host.create_user("bob").await,
        host.create_user("eve").await,
    );

    let (status, team) = call!(host, alice, POST "/v1/teams", {"name": "ml"});
    assert_eq!(status, 201, "{team}");
    assert_eq!(team["role"], "admin");
    let answer = call!(host, eve, POST "/v1/teams", {"name": "ml"});
    expect_error(&answer, 409, "conflict", None);

    let (status, member) = call!(host, alice, PUT "/v1/teams/ml/members/bob", {"role": "member"});
    assert_eq!(status, 200, "{member}");
    let (status, team) = call!(host, bob, GET "/v1/teams/ml");
    assert_eq!(status, 200);
    assert_eq!(team["role"], "member");
    let (_, members) = call!(host, bob, GET "/v1/teams/ml/members");
    assert_eq!(members["data"].as_array().unwrap().len(), 2);

    // A member may read but not administer.
    for (method, path, body) in [
        (
            "PUT",
            "/v1/teams/ml/members/eve",
            Some(json!({"role": "member"})),
        ),
        (
            "PUT",
            "/v1/teams/ml/secrets/TOKEN",
            Some(json!({"value": "x"})),
        ),
        ("DELETE", "/v1/teams/ml/members/alice", None),
    ] {
        let (status, body) = host.call(method, path, &bob, body.as_ref()).await;
        expect_error(&(status, body.clone()), 403, "permission_denied", None);
        assert_error_shape(&body);
    }

    // An outsider cannot tell the team from one that does not exist.
    let (status, hidden) = call!(host, eve, GET "/v1/teams/ml/secrets");
    let (status_missing, missing) = call!(host, eve, GET "/v1/teams/nope/secrets");
    assert_eq!((status, status_missing), (404, 404));
    assert_eq!(
        hidden["error"]["message"]
            .as_str()
            .unwrap()
            .replace("'ml'", "'X'"),
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .replace("'nope'", "'X'")
    );
    let (_, eves) = call!(host, eve, GET "/v1/teams");
    assert_eq!(eves["data"], json!([]));
    let (_, bobs) = call!(host, bob, GET "/v1/teams");
    assert_eq!(bobs["data"][0]["name"], "ml");

    // The last admin cannot leave or be demoted; promoting bob first allows it.
    let (status, body) = call!(host, alice, PUT "/v1/teams/ml/members/alice", {"role": "member"});
    expect_error(&(status, body.clone()), 409, "conflict", None);
    call!(host, alice, PUT "/v1/teams/ml/members/bob", {"role": "admin"});
    let (status, _) = call!(host, alice, PUT "/v1/teams/ml/members/alice", {"role": "member"});
    assert_eq!(status, 200);

    // A removed member loses access.
    let (status, _) = call!(host, bob, DELETE "/v1/teams/ml/members/alice");
    assert_eq!(status, 204);
    let answer = call!(host, alice, GET "/v1/teams/ml");
    expect_error(&answer, 404, "not_found", None);

    let (status, body) = call!(host, bob, PUT "/v1/teams/ml/members/bob", {"role": "owner"});
    expect_error(&(status, body.clone()), 400, "invalid_json", Some("role"));
    assert_eq!(body["error"]["param"], "role");
}

on_each_store!(secrets_are_never_echoed_logged_or_stored_in_plain_text);
async fn secrets_are_never_echoed_logged_or_stored_in_plain_text() {
    // Every level, so that "never logged" covers debug and trace lines too.
    let mut host = Host::builder().env("RUST_LOG", "trace").start().await;
    let alice = host.create_user("alice").await;
    call!(host, alice, POST "/v1/teams", {"name": "ml"});
    const VALUE: &str = "ghp_very-secret-value-4711";
    let mut bodies: Vec<Value> = Vec::new();

    let (status, body) =
        call!(host, alice, PUT "/v1/teams/ml/secrets/GITHUB_TOKEN", {"value": VALUE});
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["name"], "GITHUB_TOKEN");
    bodies.push(body);
    let (status, body) =
        call!(host, alice, PUT "/v1/teams/ml/secrets/GITHUB_TOKEN", {"value": VALUE});
    assert_eq!(status, 200, "replacing: {body}");
    bodies.push(body);
    let (_, list) = call!(host, alice, GET "/v1/teams/ml/secrets");
    assert_eq!(list["data"][0]["name"], "GITHUB_TOKEN");
    bodies.push(list);
    let (status, body) = call!(host, alice, PUT "/v1/teams/ml/secrets/bad-name", {"value": VALUE});
    expect_invalid(&(status, body.clone()), "name");
    bodies.push(body);
    let (status, body) = call!(host, alice, PUT "/v1/teams/ml/secrets/EMPTY", {"value": ""});
    expect_invalid(&(status, body.clone()), "value");
    assert_eq!(body["error"]["param"], "value");
    let (status, body) =
        call!(host, alice, PUT "/v1/teams/ml/secrets/X", {"value": VALUE, "extra": 1});
    expect_error(&(status, body.clone()), 400, "invalid_json", Some("extra"));
    bodies.push(body);
    for body in &bodies {
        assert!(
            !body.to_string().contains(VALUE),
            "a response showed the secret: {body}"
        );
    }

    let (status, _) = call!(host, alice, DELETE "/v1/teams/ml/secrets/GITHUB_TOKEN");
    assert_eq!(status, 204);
    let answer = call!(host, alice, DELETE "/v1/teams/ml/secrets/GITHUB_TOKEN");
    expect_error(&answer, 404, "not_found", None);
    call!(host, alice, PUT "/v1/teams/ml/secrets/KEPT", {"value": VALUE});

    assert!(host.terminate().await.success());
    assert!(!host.log().contains(VALUE), "the log shows the secret");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(host.data_dir.join("master.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let records = raw_records(&host).await;
    assert!(
        records.iter().any(|r| r.contains(b"KEPT")),
        "the kept secret is stored"
    );
    if let Some(r) = records.iter().find(|r| r.contains(VALUE.as_bytes())) {
        panic!("the secret is stored in plain text in a {} record", r.kind);
    }
}

on_each_store!(admin_create_user_works_on_a_stopped_store);
async fn admin_create_user_works_on_a_stopped_store() {
    let mut host = Host::start().await;
    host.terminate().await;
    let create = async |name: &str| {
        let mut args = vec!["admin", "create-user", name];
        let store = host.store_args();
        args.extend(store.iter().map(String::as_str));
        let (ok, stdout, stderr) = cli(&args).await;
        let key = stdout
            .split_whitespace()
            .find(|w| w.starts_with("sy_"))
            .map(str::to_string);
        (ok, key, stderr)
    };
    let (ok, key, stderr) = create("carol").await;
    assert!(ok, "{stderr}");
    let key = key.expect("a key is printed");
    let restarted = Host::builder().same_store(&host).start().await;
    let (status, me) = call!(restarted, key, GET "/v1/me");
    assert_eq!(status, 200);
    assert_eq!(me["name"], "carol");
    let (ok, key, stderr) = create("dave").await;
    match Engine::current() {
        // While a host runs, the embedded store is locked: a clear error,
        // not a panic.
        Engine::Sled => {
            assert!(!ok);
            assert!(stderr.contains("in use by another switchyard"), "{stderr}");
        }
        // PostgreSQL is shared: the running host knows dave at once.
        Engine::Postgres => {
            assert!(ok, "{stderr}");
            let key = key.expect("a key is printed");
            let (status, me) = call!(restarted, key, GET "/v1/me");
            assert_eq!(status, 200);
            assert_eq!(me["name"], "dave");
        }
    }
}

on_each_store!(operators_act_as_admins_of_every_team);
async fn operators_act_as_admins_of_every_team() {
    let host = Host::start().await;
    let world = World::build(&host, None).await;
    // The operator is in no team, yet administers ml: secrets, webhooks,
    // members, projects.
    let (status, _) = host.get("/v1/teams/ml/secrets").await;
    assert_eq!(status, 200);
    let answer = call!(host, OPERATOR_KEY, PUT "/v1/teams/ml/secrets/OPS", {"value": "v"});
    assert_eq!(answer.0, 201, "{}", answer.1);
    let hook =
        json!({"name": "ops", "url": "https://hooks.example.com/x", "access_token_secret": "OPS"});
    let (status, body) = host.post("/v1/teams/ml/webhooks", &hook).await;
    assert_eq!(status, 201, "{body}");
    let answer = call!(host, OPERATOR_KEY, PUT "/v1/teams/ml/members/eve", {"role": "member"});
    assert_eq!(answer.0, 200, "{}", answer.1);
    // eve, a member now, reads; she still may not act as an admin.
    let (status, _) = call!(host, world.eve, GET "/v1/teams/ml/webhooks");
    assert_eq!(status, 200);
    let answer = call!(host, world.eve, DELETE "/v1/teams/ml/webhooks/ops");
    expect_error(&answer, 403, "permission_denied", None);
}
