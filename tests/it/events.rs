//! W&B Automations parity: cooldowns and rate limits that record skipped
//! executions, and the event kinds beyond the first four.

use serde_json::{Value, json};

use crate::delivery::{CONFIG, verified};
use crate::harness::{Host, expect_invalid};
use crate::metrics::{sample, scrape};
use crate::receiver::Receiver;
use crate::world::{PROJECT, REGISTRY, World, ok};

/// A receiver, a host delivering fast to it, and the world with webhook
/// `ci` calling it.
async fn scene() -> (Receiver, Host, World) {
    let receiver = Receiver::start().await;
    let host = Host::with_config(CONFIG).await;
    let hook = format!("{}/hook", receiver.base);
    let world = World::build(&host, Some(&hook)).await;
    (receiver, host, world)
}

/// An automation on every tag in the project, with `limits` merged in.
fn on_tags(name: &str, limits: Value) -> Value {
    let mut body = json!({"name": name, "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"automation": "NAME", "tag": "${tag}"}"#.replace("NAME", name)});
    body.as_object_mut()
        .unwrap()
        .extend(limits.as_object().unwrap().clone());
    body
}

/// The statuses of `name`'s executions, oldest first, with the skip reasons.
async fn history(host: &Host, key: &str, name: &str, filter: &str) -> Vec<(String, Value)> {
    let path = format!("{PROJECT}/automations/{name}/executions{filter}");
    let (status, list) = call!(host, key, GET "{path}");
    assert_eq!(status, 200, "{list}");
    let mut rows: Vec<(String, Value)> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let reason = e["skipped"]["reason"].clone();
            (e["status"].as_str().unwrap().to_string(), reason)
        })
        .collect();
    rows.reverse();
    rows
}

on_each_store!(a_cooldown_and_a_rate_limit_record_skipped_firings_and_send_nothing);
async fn a_cooldown_and_a_rate_limit_record_skipped_firings_and_send_nothing() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let automations = format!("{PROJECT}/automations");
    for (name, limits) in [
        ("cooled", json!({"cooldown_s": 3600})),
        ("limited", json!({"max_per_hour": 2})),
    ] {
        let (status, saved) =
            call!(host, alice, POST "{automations}", (on_tags(name, limits.clone())));
        assert_eq!(status, 201, "{saved}");
        for (field, value) in limits.as_object().unwrap() {
            assert_eq!(&saved[field], value, "{saved}");
        }
    }
    for (limits, field) in [
        (json!({"max_per_hour": 0}), "max_per_hour"),
        (json!({"cooldown_s": 604_801}), "cooldown_s"),
    ] {
        let refused = call!(host, alice, POST "{automations}", (on_tags("bad", limits)));
        expect_invalid(&refused, field);
    }

    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {}});
    // Two tags in one request (one transaction), then one more.
    ok!(host, bob, POST "{versions}/v0/tags", {"tags": ["a", "b"]});
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "c"});

    let skipped = |reason: &str| ("Skipped".to_string(), json!(reason));
    let sent = ("Finished".to_string(), Value::Null);
    let pending = ("Pending".to_string(), Value::Null);
    let settled = |rows: Vec<(String, Value)>| {
        rows.into_iter()
            .map(|row| if row == pending { sent.clone() } else { row })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        settled(history(&host, &bob, "cooled", "").await),
        [sent.clone(), skipped("cooldown"), skipped("cooldown")]
    );
    assert_eq!(
        settled(history(&host, &bob, "limited", "").await),
        [sent.clone(), sent.clone(), skipped("rate_limit")]
    );

    let got = receiver.wait_for(3, 10).await;
    let mut bodies: Vec<Value> = got.iter().map(verified).collect();
    bodies.sort_by_key(|b| b.to_string());
    assert_eq!(
        bodies,
        [
            json!({"automation": "cooled", "tag": "a"}),
            json!({"automation": "limited", "tag": "a"}),
            json!({"automation": "limited", "tag": "b"}),
        ]
    );

    // The history filters by status, in any case; a wrong one says which.
    assert_eq!(
        history(&host, &bob, "cooled", "?status=skipped").await,
        [skipped("cooldown"), skipped("cooldown")]
    );
    let (_, one) = call!(host, bob, GET "{automations}/cooled/executions?status=Skipped");
    let message = one["data"][0]["skipped"]["message"].as_str().unwrap();
    assert!(message.contains("cooldown_s of 3600"), "{message}");
    let wrong = call!(host, bob, GET "{automations}/cooled/executions?status=lost");
    expect_invalid(&wrong, "status");
    assert_eq!(receiver.received().len(), 3, "skipped firings send nothing");
    let text = scrape(&host).await;
    let skipped_by = |reason| {
        sample(
            &text,
            "switchyard_executions_skipped_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(
        (skipped_by("cooldown"), skipped_by("rate_limit")),
        (Some(2.0), Some(1.0))
    );
}

/// An automation in the project on `event`, sending what alias events carry.
fn on_alias(name: &str, event: Value) -> Value {
    json!({"name": name, "event": event, "webhook": {"team": "ml", "name": "ci"},
        "action": "Webhooks",
        "payload": r#"{"automation": "NAME", "event_type": "${event_type}", "alias": "${alias}",
            "version": "${artifact_version_string}", "previous": "${previous_version_string}"}"#
            .replace("NAME", name)})
}

on_each_store!(an_alias_that_moves_fires_update_artifact_alias_and_not_add);
async fn an_alias_that_moves_fires_update_artifact_alias_and_not_add() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let automations = format!("{PROJECT}/automations");
    for (name, kind) in [
        ("added", "ADD_ARTIFACT_ALIAS"),
        ("moved", "UPDATE_ARTIFACT_ALIAS"),
    ] {
        let event = json!({"type": kind, "alias_regex": "^prod$"});
        let (status, saved) = call!(host, alice, POST "{automations}", (on_alias(name, event)));
        assert_eq!(status, 201, "{saved}");
    }
    let missing = json!({"type": "UPDATE_ARTIFACT_ALIAS"});
    let refused = call!(host, alice, POST "{automations}", (on_alias("bad", missing)));
    assert_eq!(refused.0, 400, "{}", refused.1);
    assert!(
        refused.1.to_string().contains("alias_regex"),
        "{}",
        refused.1
    );

    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {}});
    ok!(host, bob, POST "{versions}", {"metadata": {}});
    ok!(host, bob, POST "{versions}/v0/aliases", {"alias": "prod"});
    let first = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&first[0]),
        json!({"automation": "added", "event_type": "ADD_ARTIFACT_ALIAS", "alias": "prod",
            "version": "ml/vision/detector:v0", "previous": ""})
    );
    let moved = ok!(host, bob, POST "{versions}/v1/aliases", {"alias": "prod"});
    assert_eq!(moved["moved_from"], json!({"prod": "v0"}));
    let both = receiver.wait_for(2, 10).await;
    assert_eq!(
        verified(&both[1]),
        json!({"automation": "moved", "event_type": "UPDATE_ARTIFACT_ALIAS", "alias": "prod",
            "version": "ml/vision/detector:v1", "previous": "ml/vision/detector:v0"})
    );
    for name in ["added", "moved"] {
        let fired = history(&host, &bob, name, "").await;
        assert_eq!(fired.len(), 1, "{name} fired once: {fired:?}");
    }
}

on_each_store!(a_run_that_ends_fires_run_state_for_the_states_named_and_never_for_killed);
async fn a_run_that_ends_fires_run_state_for_the_states_named_and_never_for_killed() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let automations = format!("{PROJECT}/automations");
    let ended = |states: Value| {
        json!({"name": "ended", "event": {"type": "RUN_STATE", "states": states,
            "run_filters": {"run_name_regex": "^train-"}},
            "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
            "payload": r#"{"event_type": "${event_type}", "run_id": "${run_id}",
                "run_name": "${run_name}", "run_state": "${run_state}", "alias": "${alias}",
                "author": "${event_author}"}"#})
    };
    for states in [
        json!([]),
        json!(["killed"]),
        json!(["running"]),
        json!(["failed", "failed"]),
    ] {
        let refused = call!(host, alice, POST "{automations}", (ended(states)));
        expect_invalid(&refused, "event.states");
    }
    let on_registry =
        call!(host, alice, POST "/v1/registries/models/automations", (ended(json!(["finished"]))));
    expect_invalid(&on_registry, "event.type");
    let (status, saved) =
        call!(host, alice, POST "{automations}", (ended(json!(["finished", "failed"]))));
    assert_eq!(status, 201, "{saved}");

    let runs = format!("{PROJECT}/runs");
    let mut ids = Vec::new();
    for name in ["train-1", "train-2", "eval-3", "train-4"] {
        let run = ok!(host, bob, POST "{runs}", {"name": name});
        assert_eq!(run["state"], "running", "{run}");
        ids.push(run["id"].as_str().unwrap().to_string());
    }
    let end = async |id: &str, state: &str| call!(host, bob, PATCH "{runs}/{id}", {"state": state});
    let (status, run) = end(&ids[0], "finished").await;
    assert_eq!((status, &run["state"]), (200, &json!("finished")), "{run}");
    for (id, state) in [
        (&ids[1], "killed"),
        (&ids[2], "failed"),
        (&ids[3], "crashed"),
    ] {
        let (status, run) = end(id, state).await;
        assert_eq!((status, &run["state"]), (200, &json!(state)), "{run}");
    }
    // A run ends once, and only forward.
    let (status, again) = end(&ids[0], "failed").await;
    assert_eq!(status, 409, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("finished"),
        "{again}"
    );
    let fresh = ok!(host, bob, POST "{runs}", {"name": "train-5"});
    let fresh = fresh["id"].as_str().unwrap();
    assert_eq!(end(fresh, "running").await.0, 409);
    expect_invalid(&end(fresh, "paused").await, "state");
    let first = &ids[0];
    let (_, shown) = call!(host, bob, GET "{runs}/{first}");
    assert_eq!(shown["state"], "finished");

    // Only train-1 fired: train-2 was killed, eval-3 is filtered out by
    // name, train-4 crashed, which the automation does not name.
    let got = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&got[0]),
        json!({"event_type": "RUN_STATE", "run_id": ids[0], "run_name": "train-1",
            "run_state": "finished", "alias": "", "author": "bob"})
    );
    let fired = history(&host, &bob, "ended", "").await;
    assert_eq!(fired.len(), 1, "{fired:?}");
}

on_each_store!(a_new_version_fires_create_artifact_in_its_project_and_a_link_in_the_registry);
async fn a_new_version_fires_create_artifact_in_its_project_and_a_link_in_the_registry() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let created = |name: &str| {
        json!({"name": name, "event": {"type": "CREATE_ARTIFACT"},
            "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
            "payload": r#"{"automation": "NAME", "event_type": "${event_type}",
                "version": "${artifact_version_string}", "accuracy": ${artifact_metadata.accuracy}}"#
                .replace("NAME", name)})
    };
    for (scope, name) in [(PROJECT, "in-project"), (REGISTRY, "in-registry")] {
        let (status, saved) = call!(host, alice, POST "{scope}/automations", (created(name)));
        assert_eq!(status, 201, "{saved}");
    }
    ok!(host, alice, POST "{REGISTRY}/collections", {"name": "detectors"});
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 0.9}});
    let first = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&first[0]),
        json!({"automation": "in-project", "event_type": "CREATE_ARTIFACT",
            "version": "ml/vision/detector:v0", "accuracy": 0.9})
    );
    let link =
        json!({"team": "ml", "project": "vision", "collection": "detector", "version": "v0"});
    ok(
        &host,
        &bob,
        "POST",
        &format!("{REGISTRY}/collections/detectors/links"),
        link,
    )
    .await;
    let both = receiver.wait_for(2, 10).await;
    assert_eq!(
        verified(&both[1]),
        json!({"automation": "in-registry", "event_type": "CREATE_ARTIFACT",
            "version": "registry/models/detectors:v0", "accuracy": 0.9})
    );
}

on_each_store!(a_collection_scoped_automation_ignores_its_siblings_and_is_disabled_with_it);
async fn a_collection_scoped_automation_ignores_its_siblings_and_is_disabled_with_it() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    ok!(host, alice, POST "{PROJECT}/collections", {"name": "segmenter"});
    let on_detector = format!("{PROJECT}/collections/detector/automations");
    let tagged = json!({"name": "detector-tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"collection": "${artifact_collection_name}", "tag": "${tag}"}"#});
    let missing = format!("{PROJECT}/collections/nope/automations");
    let refused = call!(host, alice, POST "{missing}", tagged);
    assert_eq!(refused.0, 404, "{}", refused.1);
    let as_member = call!(host, bob, POST "{on_detector}", tagged);
    assert_eq!(as_member.0, 403, "{}", as_member.1);
    let runs = json!({"name": "ends", "event": {"type": "RUN_STATE", "states": ["failed"]},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks"});
    expect_invalid(
        &call!(host, alice, POST "{on_detector}", runs),
        "event.type",
    );
    let (status, saved) = call!(host, alice, POST "{on_detector}", tagged);
    assert_eq!(status, 201, "{saved}");
    assert_eq!(
        saved["scope"],
        json!({"type": "collection", "team": "ml", "project": "vision", "collection": "detector"})
    );
    let (_, in_project) = call!(host, bob, GET "{PROJECT}/automations");
    assert_eq!(in_project["data"], json!([]), "the project's own list");

    for collection in ["segmenter", "detector"] {
        let versions = format!("{PROJECT}/collections/{collection}/versions");
        ok!(host, bob, POST "{versions}", {"metadata": {}});
        ok!(host, bob, POST "{versions}/v0/tags", {"tag": collection});
    }
    let got = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&got[0]),
        json!({"collection": "detector", "tag": "detector"})
    );
    let (_, fired) = call!(host, bob, GET "{on_detector}/detector-tags/executions");
    assert_eq!(fired["data"].as_array().unwrap().len(), 1, "{fired}");

    // Deleting the collection (admins only) disables its automations.
    let by_member = call!(host, bob, DELETE "{PROJECT}/collections/detector");
    assert_eq!(by_member.0, 403, "{}", by_member.1);
    let (status, body) = call!(host, alice, DELETE "{PROJECT}/collections/detector");
    assert_eq!(status, 204, "{body}");
    let (status, _) = call!(host, bob, GET "{PROJECT}/collections/detector");
    assert_eq!(status, 404);
    let (_, shown) = call!(host, bob, GET "{on_detector}/detector-tags");
    assert_eq!(shown["state"], "disabled", "{shown}");
    assert_eq!(
        shown["disabled_reason"],
        "its collection 'detector' was deleted"
    );
    // A new collection of the same name starts empty and wakes nothing.
    ok!(host, alice, POST "{PROJECT}/collections", {"name": "detector"});
    let versions = format!("{PROJECT}/collections/detector/versions");
    let v0 = ok!(host, bob, POST "{versions}", {"metadata": {}});
    assert_eq!(
        v0["version"], "v0",
        "the old versions went with the collection"
    );
    ok!(host, bob, POST "{versions}/v0/tags", {"tag": "again"});
    let (_, fired) = call!(host, bob, GET "{on_detector}/detector-tags/executions");
    assert_eq!(fired["data"].as_array().unwrap().len(), 1, "{fired}");
    assert_eq!(receiver.received().len(), 1);
}

on_each_store!(a_restart_in_the_middle_of_a_window_keeps_its_values);
async fn a_restart_in_the_middle_of_a_window_keeps_its_values() {
    let (receiver, mut host, World { alice, bob, .. }) = scene().await;
    // Fires once the last three values all stay under 0.5.
    let calm = json!({"name": "calm", "event": {"type": "RUN_METRIC_THRESHOLD",
        "metric": {"name": "loss", "window": 3, "aggregation": "max", "comparison": "<",
            "threshold": 0.5}},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"value": ${metric_value}}"#});
    ok!(host, alice, POST "{PROJECT}/automations", calm);
    let run = ok!(host, bob, POST "{PROJECT}/runs", {"name": "train"});
    let metrics = format!("{PROJECT}/runs/{}/metrics", run["id"].as_str().unwrap());
    for loss in [0.9, 0.1] {
        ok(
            &host,
            &bob,
            "POST",
            &metrics,
            json!({"metrics": {"loss": loss}}),
        )
        .await;
    }
    assert_eq!(host.terminate().await.code(), Some(0));
    let host = Host::builder()
        .config(CONFIG)
        .same_store(&host)
        .start()
        .await;
    let log = async |loss: f64| {
        let body = json!({"metrics": {"loss": loss}});
        ok(&host, &bob, "POST", &metrics, body).await
    };
    // 0.9 is still in the window: had it been forgotten, this would fire.
    let kept = log(0.1).await;
    assert_eq!(kept["values_kept"]["loss"], 3, "{kept}");
    assert!(history(&host, &bob, "calm", "").await.is_empty());
    log(0.1).await;
    let got = receiver.wait_for(1, 10).await;
    assert_eq!(verified(&got[0]), json!({"value": 0.1}));
}

on_each_store!(create_artifact_with_a_collection_regex_fires_for_matching_collections_only);
async fn create_artifact_with_a_collection_regex_fires_for_matching_collections_only() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let created = |regex: &str| {
        json!({"name": "detectors", "event": {"type": "CREATE_ARTIFACT", "collection_regex": regex},
            "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
            "payload": r#"{"version": "${artifact_version_string}"}"#})
    };
    let (status, bad) = call!(host, alice, POST "{PROJECT}/automations", (created("(")));
    assert_eq!(status, 400, "{bad}");
    assert_eq!(
        (&bad["error"]["param"], &bad["error"]["code"]),
        (&json!("event"), &json!("invalid-regex")),
        "{bad}"
    );
    let (status, saved) = call!(host, alice, POST "{PROJECT}/automations", (created("^det")));
    assert_eq!(status, 201, "{saved}");
    assert_eq!(saved["event"]["collection_regex"], "^det");
    ok!(host, alice, POST "{PROJECT}/collections", {"name": "segmenter"});
    for collection in ["segmenter", "detector"] {
        let versions = format!("{PROJECT}/collections/{collection}/versions");
        ok!(host, bob, POST "{versions}", {"metadata": {}});
    }
    let got = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&got[0]),
        json!({"version": "ml/vision/detector:v0"})
    );
    let fired = history(&host, &bob, "detectors", "").await;
    assert_eq!(
        fired.len(),
        1,
        "the segmenter's version fired nothing: {fired:?}"
    );
}

/// A run-metric automation `name` on `event`, sending `payload`.
fn on_metric(name: &str, event: Value, payload: &str) -> Value {
    json!({"name": name, "event": event, "webhook": {"team": "ml", "name": "ci"},
        "action": "Webhooks", "payload": payload})
}

/// Starts run `name` and logs each of `values` of metric `metric` in turn.
async fn run_logging(host: &Host, key: &str, name: &str, metric: &str, values: &[f64]) {
    let run = ok!(host, key, POST "{PROJECT}/runs", {"name": name});
    let path = format!("{PROJECT}/runs/{}/metrics", run["id"].as_str().unwrap());
    for value in values {
        ok!(host, key, POST "{path}", {"metrics": {metric: value}});
    }
}

on_each_store!(a_relative_change_of_exactly_the_amount_fires_and_just_under_does_not);
async fn a_relative_change_of_exactly_the_amount_fires_and_just_under_does_not() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let automations = format!("{PROJECT}/automations");
    let rise = |metric: Value| {
        on_metric(
            "rise",
            json!({"type": "RUN_METRIC_CHANGE", "metric": metric}),
            r#"{"event_type": "${event_type}", "run": "${run_name}", "metric": "${metric_name}",
                "value": ${metric_value}, "previous": ${metric_previous_value}}"#,
        )
    };
    for (metric, field, says) in [
        (
            json!({"name": "acc", "change_type": "relative", "amount": 0}),
            "event",
            "metric.amount",
        ),
        (
            json!({"name": "acc", "change_type": "sideways", "amount": 0.1}),
            "event",
            "metric.change_type 'sideways'",
        ),
        (
            json!({"name": "acc", "change_type": "relative", "amount": 0.1,
                "window": 500, "prior_window": 501}),
            "event.metric.window",
            "window + prior_window is 1001",
        ),
    ] {
        let (status, refused) = call!(host, alice, POST "{automations}", (rise(metric)));
        assert_eq!(
            (status, &refused["error"]["param"]),
            (400, &json!(field)),
            "{refused}"
        );
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    let on_registry = call!(host, alice, POST "{REGISTRY}/automations",
        (rise(json!({"name": "acc", "change_type": "absolute", "amount": 1}))));
    expect_invalid(&on_registry, "event.type");

    let metric = json!({"name": "acc", "window": 1, "prior_window": 2,
        "change_type": "relative", "direction": "increase", "amount": 0.1});
    let (status, saved) = call!(host, alice, POST "{automations}", (rise(metric)));
    assert_eq!(status, 201, "{saved}");
    assert_eq!(
        saved["event"]["metric"]["aggregation"], "average",
        "{saved}"
    );
    // 9.99% up, then exactly 10% up; then up again in the same run.
    run_logging(&host, &bob, "under", "acc", &[100.0, 100.0, 109.99]).await;
    run_logging(&host, &bob, "exact", "acc", &[100.0, 100.0, 110.0, 130.0]).await;
    let got = receiver.wait_for(1, 10).await;
    assert_eq!(
        verified(&got[0]),
        json!({"event_type": "RUN_METRIC_CHANGE", "run": "exact", "metric": "acc",
            "value": 110.0, "previous": 100.0})
    );
    let fired = history(&host, &bob, "rise", "").await;
    assert_eq!(fired.len(), 1, "once per run in 24 hours: {fired:?}");
    assert_eq!(receiver.received().len(), 1);
}

on_each_store!(a_zscore_never_fires_before_its_window_is_full);
async fn a_zscore_never_fires_before_its_window_is_full() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let spike = on_metric(
        "spike",
        json!({"type": "RUN_METRIC_ZSCORE",
            "metric": {"name": "loss", "window": 4, "direction": "above", "threshold": 1.4}}),
        r#"{"event_type": "${event_type}", "run": "${run_name}", "value": ${metric_value},
            "zscore": ${metric_zscore}, "previous": "${metric_previous_value}"}"#,
    );
    ok!(host, alice, POST "{PROJECT}/automations", spike);
    let refused = call!(host, alice, POST "{PROJECT}/automations",
        (on_metric("bad", json!({"type": "RUN_METRIC_ZSCORE",
            "metric": {"name": "loss", "direction": "sideways"}}), "{}")));
    expect_invalid(&refused, "event");
    let message = refused.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("metric.direction 'sideways'"), "{message}");
    // Three values: a z-score of √2 over what there is, but the window
    // wants four. A flat window has no spread. Then √3 over four.
    run_logging(&host, &bob, "early", "loss", &[1.0, 1.0, 10.0]).await;
    run_logging(&host, &bob, "flat", "loss", &[2.0, 2.0, 2.0, 2.0]).await;
    run_logging(&host, &bob, "full", "loss", &[1.0, 1.0, 1.0, 10.0]).await;
    let got = receiver.wait_for(1, 10).await;
    let mut body = verified(&got[0]);
    let zscore = body["zscore"].take().as_f64().unwrap();
    assert!((zscore - 3f64.sqrt()).abs() < 1e-9, "{zscore}");
    assert_eq!(
        body,
        json!({"event_type": "RUN_METRIC_ZSCORE", "run": "full", "value": 10.0,
            "zscore": null, "previous": ""})
    );
    assert_eq!(history(&host, &bob, "spike", "").await.len(), 1);
    assert_eq!(receiver.received().len(), 1);
}

on_each_store!(one_log_fires_each_kind_of_metric_automation_listening);
async fn one_log_fires_each_kind_of_metric_automation_listening() {
    let (receiver, host, World { alice, bob, .. }) = scene().await;
    let payload = r#"{"event_type": "${event_type}", "value": ${metric_value}}"#;
    for (name, event) in [
        (
            "threshold",
            json!({"type": "RUN_METRIC_THRESHOLD",
                "metric": {"name": "loss", "window": 2, "comparison": ">", "threshold": 2}}),
        ),
        (
            "change",
            json!({"type": "RUN_METRIC_CHANGE", "metric": {"name": "loss", "window": 2,
                "prior_window": 2, "change_type": "absolute", "amount": 2}}),
        ),
        (
            "zscore",
            json!({"type": "RUN_METRIC_ZSCORE", "metric": {"name": "loss", "window": 4,
                "threshold": 1}}),
        ),
    ] {
        ok!(host, alice, POST "{PROJECT}/automations", (on_metric(name, event, payload)));
    }
    run_logging(&host, &bob, "train", "loss", &[1.0, 1.0, 1.0, 6.0]).await;
    let got = receiver.wait_for(3, 10).await;
    let mut bodies: Vec<Value> = got.iter().map(verified).collect();
    bodies.sort_by_key(|b| b["event_type"].as_str().unwrap().to_string());
    // The threshold's and the change's value is the window's average.
    assert_eq!(
        bodies,
        [
            json!({"event_type": "RUN_METRIC_CHANGE", "value": 3.5}),
            json!({"event_type": "RUN_METRIC_THRESHOLD", "value": 3.5}),
            json!({"event_type": "RUN_METRIC_ZSCORE", "value": 6.0}),
        ]
    );
}
