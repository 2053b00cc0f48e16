//! The event catalog: `GET /v1/event-types`, and every event type's real
//! default payload (an automation with no template) valid against the
//! schema the catalog gives for it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::Host;
use crate::receiver::Receiver;
use crate::receivers::SHORT;
use crate::world::{PROJECT, REGISTRY, World};

/// Automation `name` on `event` sending the default payload to `webhook`.
fn plain(name: &str, event: Value, webhook: &str) -> Value {
    json!({"name": name, "event": event, "webhook": {"team": "ml", "name": webhook},
        "action": "Webhooks"})
}

/// The catalog's schema of each event type, checked for its shape.
async fn catalog(host: &Host, key: &str) -> BTreeMap<String, Value> {
    let (status, _) = call!(host, "", GET "/v1/event-types");
    assert_eq!(status, 401, "signed-in callers only");
    let listed = ok!(host, key, GET "/v1/event-types");
    let mut schemas = BTreeMap::new();
    for info in listed["data"].as_array().unwrap() {
        let fields = [
            "type",
            "description",
            "scopes",
            "fields",
            "variables",
            "example",
            "schema",
        ];
        for field in fields {
            assert!(info.get(field).is_some(), "{field} in {info}");
        }
        let schema = info["schema"].clone();
        let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
        assert!(
            validator.is_valid(&info["example"]),
            "its example fits: {info}"
        );
        schemas.insert(info["type"].as_str().unwrap().to_string(), schema);
    }
    assert_eq!(schemas.len(), 13, "{listed}");
    let tag = &listed["data"][3];
    assert_eq!(
        (&tag["type"], &tag["scopes"]),
        (
            &json!("ADD_ARTIFACT_TAG"),
            &json!(["project", "registry", "collection"])
        )
    );
    assert!(
        tag["fields"].as_array().unwrap().contains(&json!("tag")),
        "{tag}"
    );
    // The console shows the same catalog.
    let console = crate::console::Visitor::signed_in(host, key).await;
    let page = console.get("/event-types").await.body;
    for event_type in schemas.keys() {
        let shown = format!("<code>{event_type}</code>");
        assert!(page.contains(&shown), "{shown}: {page}");
    }
    assert!(page.contains("<code>${tag}</code>"), "{page}");
    schemas
}

/// The default payloads `receiver` has, until every type of `types` is
/// among them.
async fn payloads_of(receiver: &Receiver, types: &[&str]) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let bodies: Vec<Value> = receiver.received().iter().map(|r| r.json()).collect();
        let seen: BTreeSet<&str> = bodies
            .iter()
            .filter_map(|b| b["event_type"].as_str())
            .collect();
        if types.iter().all(|t| seen.contains(t)) {
            return bodies;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {seen:?} of {types:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fires every kind of artifact and run event at webhook `ci`.
async fn artifact_and_run_events(host: &Host, alice: &str, bob: &str) {
    let metric = |event: Value| {
        let name = event["type"].as_str().unwrap().to_lowercase();
        plain(&name.replace('_', "-"), event, "ci")
    };
    for automation in [
        plain("created", json!({"type": "CREATE_ARTIFACT"}), "ci"),
        plain(
            "aliased",
            json!({"type": "ADD_ARTIFACT_ALIAS", "alias_regex": ".*"}),
            "ci",
        ),
        plain(
            "moved",
            json!({"type": "UPDATE_ARTIFACT_ALIAS", "alias_regex": ".*"}),
            "ci",
        ),
        plain(
            "released",
            json!({"type": "ADD_ARTIFACT_TAG", "tag_regex": "^release"}),
            "ci",
        ),
        plain(
            "ended",
            json!({"type": "RUN_STATE", "states": ["finished"]}),
            "ci",
        ),
        plain(
            "down-tags",
            json!({"type": "ADD_ARTIFACT_TAG", "tag_regex": "^down"}),
            "down",
        ),
        metric(json!({"type": "RUN_METRIC_THRESHOLD",
            "metric": {"name": "loss", "window": 2, "comparison": ">", "threshold": 2}})),
        metric(
            json!({"type": "RUN_METRIC_CHANGE", "metric": {"name": "loss", "window": 2,
            "prior_window": 2, "change_type": "absolute", "amount": 2}}),
        ),
        metric(json!({"type": "RUN_METRIC_ZSCORE",
            "metric": {"name": "loss", "window": 4, "threshold": 1}})),
    ] {
        ok!(host, alice, POST "{PROJECT}/automations", automation);
    }
    let linked = plain("linked", json!({"type": "LINK_ARTIFACT"}), "ci");
    ok!(host, alice, POST "{REGISTRY}/automations", linked);

    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, bob, POST "{versions}", {"metadata": {"accuracy": 0.91}});
    ok!(host, bob, POST "{versions}", {"metadata": {}});
    ok!(host, bob, POST "{versions}/v0/aliases", {"alias": "prod"});
    ok!(host, bob, POST "{versions}/v1/aliases", {"alias": "prod"});
    ok!(host, bob, POST "{versions}/v1/tags", {"tag": "release-1"});
    ok!(host, alice, POST "{REGISTRY}/collections", {"name": "detectors"});
    ok!(host, bob, POST "{REGISTRY}/collections/detectors/links",
        {"team": "ml", "project": "vision", "collection": "detector", "version": "v1"});
    let run = ok!(host, bob, POST "{PROJECT}/runs", {"name": "train"});
    let run = format!("{PROJECT}/runs/{}", run["id"].as_str().unwrap());
    for value in [1.0, 1.0, 1.0, 6.0] {
        ok!(host, bob, POST "{run}/metrics", {"metrics": {"loss": value}});
    }
    ok!(host, bob, PATCH "{run}", {"state": "finished"});
}

/// Makes webhook `down` fail, recover and go, with a team automation on
/// each operational event sending to webhook `alerts`.
async fn operational_events(host: &Host, bob: &str, down: &Receiver) {
    let tag = async |tag: &str| {
        ok!(host, bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tag": tag});
    };
    // Two failures open the circuit; its probe fails, and the delivery is
    // exhausted. Then a probe succeeds; then the endpoint is gone.
    tag("down-1").await;
    down.wait_for(3, 10).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    down.answer(200);
    tag("down-2").await;
    down.wait_for(4, 10).await;
    down.answer(410);
    tokio::time::sleep(Duration::from_millis(400)).await;
    tag("down-3").await;
}

on_each_store!(every_event_types_default_payload_fits_the_catalogs_schema);
async fn every_event_types_default_payload_fits_the_catalogs_schema() {
    let (ci, alerts, down) = (
        Receiver::start().await,
        Receiver::start().await,
        Receiver::start().await,
    );
    down.answer(503);
    let host = Host::with_config(SHORT).await;
    let World { alice, bob, .. } = World::build(&host, Some(&format!("{}/hook", ci.base))).await;
    let schemas = catalog(&host, &bob).await;
    let breaker = json!({"failures": 2, "cooloff_ms": 300, "max_cooloff_ms": 300});
    let webhooks = "/v1/teams/ml/webhooks";
    ok!(host, alice, POST "{webhooks}", {"name": "down", "url": format!("{}/hook", down.base),
        "circuit_breaker": breaker});
    ok!(host, alice, POST "{webhooks}", {"name": "alerts", "url": format!("{}/hook", alerts.base)});
    let operational = [
        "WEBHOOK_CIRCUIT_OPENED",
        "DELIVERY_EXHAUSTED",
        "WEBHOOK_RECOVERED",
        "WEBHOOK_DISABLED",
    ];
    for event in operational {
        let automation = plain(
            &event.to_lowercase().replace('_', "-"),
            json!({"type": event}),
            "alerts",
        );
        ok!(host, alice, POST "/v1/teams/ml/automations", automation);
    }
    artifact_and_run_events(&host, &alice, &bob).await;
    operational_events(&host, &bob, &down).await;

    let others: Vec<&str> = schemas
        .keys()
        .map(String::as_str)
        .filter(|t| !operational.contains(t))
        .collect();
    let mut payloads = payloads_of(&ci, &others).await;
    payloads.extend(payloads_of(&alerts, &operational).await);
    let mut checked = BTreeSet::new();
    for payload in &payloads {
        let event_type = payload["event_type"].as_str().unwrap();
        let validator = jsonschema::validator_for(&schemas[event_type]).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(payload)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{event_type}: {errors:?} in {payload}");
        checked.insert(event_type);
    }
    assert_eq!(checked.len(), 13, "{checked:?}");
    // The schema is not a formality: a tag event is not a run event.
    let run_schema = jsonschema::validator_for(&schemas["RUN_STATE"]).unwrap();
    let tag = payloads
        .iter()
        .find(|p| p["event_type"] == "ADD_ARTIFACT_TAG")
        .unwrap();
    assert!(!run_schema.is_valid(tag));
}
