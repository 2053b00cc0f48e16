//! `/metrics` after real traffic: the families operators scrape, with route
//! templates (never raw paths) and numbers that moved as they should.

use serde_json::json;

use crate::harness::{Host, expect_error};
use crate::receiver::Receiver;
use crate::world::{PROJECT, World};

/// The value of the sample `name{labels…}` (labels in any order).
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

pub async fn scrape(host: &Host) -> String {
    let response = host.http.get(host.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
    );
    response.text().await.unwrap()
}

on_each_store!(metrics_count_requests_deliveries_plugins_and_queues);
async fn metrics_count_requests_deliveries_plugins_and_queues() {
    let receiver = Receiver::start().await;
    let host = Host::with_config("[webhooks]\nallow_private = [\"127.0.0.0/8\"]").await;
    let world = World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let automation = json!({"name": "tagged", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"tag": "${tag}"}"#});
    ok!(host, world.alice, POST "{PROJECT}/automations", automation);
    let versions = format!("{PROJECT}/collections/detector/versions");
    ok!(host, world.bob, POST "{versions}", {});
    let before = scrape(&host).await;
    let tags = format!("{versions}/v0/tags");
    for tag in ["a", "b"] {
        ok!(host, world.bob, POST "{tags}", {"tag": tag});
    }
    receiver.wait_for(2, 10).await;
    // A delivery is counted once its attempt is recorded, just after the
    // receiver answered, and a scrape reads the outbox gauges a moment
    // before the counters: wait until both have caught up, loudly.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let text = scrape(&host).await;
        let delivered = &[("outcome", "delivered")];
        if sample(&text, "switchyard_deliveries_total", delivered) == Some(2.0)
            && sample(&text, "switchyard_outbox_pending", &[]) == Some(0.0)
            && sample(&text, "switchyard_outbox_oldest_due_seconds", &[]) == Some(0.0)
        {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no 2 deliveries counted:\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let route =
        "/v1/teams/{team}/projects/{project}/collections/{collection}/versions/{version}/tags";
    let tagged = |text: &str| {
        sample(
            text,
            "switchyard_http_requests_total",
            &[("method", "POST"), ("route", route), ("status", "200")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(tagged(&text) - tagged(&before), 2.0, "{text}");
    assert!(
        !text.contains("route=\"/v1/teams/ml/"),
        "routes are templates, never raw paths:\n{text}"
    );
    at_least(
        &text,
        "switchyard_http_request_duration_seconds_count",
        &[("route", route)],
        2.0,
    );
    assert_eq!(
        sample(&text, "switchyard_delivery_duration_seconds_count", &[]),
        Some(2.0),
        "{text}"
    );
    let renders = sample(
        &text,
        "switchyard_plugin_calls_total",
        &[
            ("plugin", "template-default"),
            ("kind", "payload-template"),
            ("outcome", "ok"),
        ],
    );
    assert!(renders.is_some_and(|n| n >= 2.0), "{text}");
    at_least(
        &text,
        "switchyard_plugin_call_duration_seconds_count",
        &[("plugin", "filter-default")],
        2.0,
    );
    at_least(
        &text,
        "switchyard_queue_wait_seconds_count",
        &[("queue", "plugin")],
        4.0,
    );
    assert_eq!(
        sample(&text, "switchyard_queue_depth", &[("queue", "plugin")]),
        Some(0.0)
    );
    assert_eq!(sample(&text, "switchyard_outbox_pending", &[]), Some(0.0));
    assert_eq!(
        sample(&text, "switchyard_outbox_oldest_due_seconds", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "switchyard_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
    // An unknown path is counted, but never under its own name.
    let _ = host.get("/v1/no/such/route").await;
    let text = scrape(&host).await;
    assert!(
        sample(
            &text,
            "switchyard_http_requests_total",
            &[("route", "unmatched"), ("status", "404")]
        )
        .is_some(),
        "{text}"
    );
    assert!(!text.contains("/v1/no/such/route"), "{text}");
    promtool_check(&text);
}

/// `promtool check metrics` (Debian's `prometheus` package) finds nothing
/// wrong with a scrape: format, help text, names and units. Skipped with a
/// line where promtool is missing, unless `SWITCHYARD_TEST_REQUIRE_PROMTOOL`
/// is set (CI sets it).
fn promtool_check(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var_os("SWITCHYARD_TEST_REQUIRE_PROMTOOL").is_none(),
            "promtool is required but missing; apt-get install prometheus"
        );
        eprintln!("promtool check skipped: no promtool here (apt-get install prometheus)");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {}\n{said}\nthe scrape:\n{text}",
        out.status
    );
}

on_each_store!(the_first_scrape_describes_every_family_and_shows_known_series_at_zero);
async fn the_first_scrape_describes_every_family_and_shows_known_series_at_zero() {
    let host = Host::start().await;
    let text = scrape(&host).await;
    let families: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|name| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|end| name.strip_suffix(end))
                .unwrap_or(name)
        })
        .collect();
    for family in &families {
        let help = format!("# HELP {family} ");
        assert!(text.contains(&help), "{family} has no help text:\n{text}");
    }
    for outcome in ["delivered", "retried", "failed", "disabled"] {
        let labels = [("outcome", outcome)];
        let value = sample(&text, "switchyard_deliveries_total", &labels);
        assert_eq!(value, Some(0.0), "{outcome}:\n{text}");
    }
    for reason in ["cooldown", "rate_limit"] {
        let labels = [("reason", reason)];
        let value = sample(&text, "switchyard_executions_skipped_total", &labels);
        assert_eq!(value, Some(0.0), "{reason}:\n{text}");
    }
    let waited = sample(&text, "switchyard_delivery_duration_seconds_count", &[]);
    assert_eq!(waited, Some(0.0), "{text}");
    for queue in ["plugin", "inference"] {
        let depth = sample(&text, "switchyard_queue_depth", &[("queue", queue)]);
        assert_eq!(depth, Some(0.0), "{queue}:\n{text}");
    }
}

on_each_store!(a_served_models_inference_series_are_on_the_first_scrape);
/// Before any request, each model served has its requests and tokens
/// series at zero, as the other families' known series are.
async fn a_served_models_inference_series_are_on_the_first_scrape() {
    let host = Host::with_model().await;
    let text = scrape(&host).await;
    let model = crate::inference::MODEL;
    let requests = [("endpoint", "chat"), ("model", model), ("status", "200")];
    let value = sample(&text, "switchyard_inference_requests_total", &requests);
    assert_eq!(value, Some(0.0), "{text}");
    for kind in ["prompt", "completion"] {
        let labels = [("model", model), ("kind", kind)];
        let value = sample(&text, "switchyard_inference_tokens_total", &labels);
        assert_eq!(value, Some(0.0), "{kind}:\n{text}");
    }
}

on_each_store!(metrics_can_require_an_operator_key);
async fn metrics_can_require_an_operator_key() {
    let host = Host::with_config("[metrics]\nrequire_key = true").await;
    expect_error(
        &host.get_anon("/metrics").await,
        401,
        "invalid_api_key",
        None,
    );
    let bob = host.create_user("bob").await;
    expect_error(
        &call!(host, bob, GET "/metrics"),
        403,
        "permission_denied",
        None,
    );
    let response = host
        .http
        .get(host.url("/metrics"))
        .bearer_auth(crate::harness::OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("switchyard_build_info")
    );
}

on_each_store!(every_request_is_logged_once_with_its_request_id_and_caller);
async fn every_request_is_logged_once_with_its_request_id_and_caller() {
    let host = Host::start().await;
    let alice = host.create_user("alice").await;
    let (_, me) = call!(host, alice, GET "/v1/me");
    let response = host
        .http
        .get(host.url("/v1/teams/nope"))
        .bearer_auth(&alice)
        .header("x-request-id", "client-req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(response.headers()["x-request-id"], "client-req-42");
    let line = host.wait_for_log(&["request_id=client-req-42"]).await;
    for needle in [
        "method=GET",
        "route=/v1/teams/{team}",
        "status=404",
        "latency_ms=",
        &format!("caller={}", me["id"].as_str().unwrap()),
    ] {
        assert!(line.contains(needle), "{needle} in {line}");
    }
    let generated = host.raw("GET", "/v1/system-check").await;
    let id = generated.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 16, "a new id when the client sends none: {id}");
    let line = host.wait_for_log(&[&format!("request_id={id}")]).await;
    assert!(
        line.contains("caller=-") && line.contains("route=/v1/system-check"),
        "{line}"
    );
    assert!(!host.log().contains(&alice), "a key never reaches the log");
}

on_each_store!(stdout_has_one_line_and_json_logs_are_json_lines_without_colour);
async fn stdout_has_one_line_and_json_logs_are_json_lines_without_colour() {
    // No plugin workers: the system check fails, and says why in the log.
    let host = Host::builder()
        .without_bootstrap_key()
        .env("SWITCHYARD_LOG_FORMAT", "json")
        .config("[queues.plugin]\nworkers = 0\ncapacity = 16\n[health]\nprobe_timeout_ms = 300")
        .start()
        .await;
    let (status, _) = host.get_anon("/v1/system-check").await;
    assert_eq!(status, 503);
    host.wait_for_log(&["system check failed"]).await;
    let stdout = host.stdout();
    assert_eq!(stdout.len(), 1, "stdout: {stdout:?}");
    assert!(stdout[0].starts_with("switchyard listening on http://"));
    let log = host.log();
    assert!(
        !log.contains('\u{1b}'),
        "no colour codes off a terminal:\n{log}"
    );
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let banner = lines
        .iter()
        .find(|l| l["fields"]["api_key"].is_string())
        .unwrap_or_else(|| panic!("no key banner:\n{log}"));
    assert!(
        banner["fields"]["api_key"]
            .as_str()
            .unwrap()
            .starts_with("sy_")
    );
    let failed = lines
        .iter()
        .find(|l| l["fields"]["message"] == "system check failed")
        .unwrap();
    let why = failed["fields"]["failing"].as_str().unwrap();
    assert!(
        why.starts_with("cpu_queue: "),
        "a message, not a Debug dump: {why}"
    );
    assert!(!why.contains("Check {"), "{why}");
}

/// Asserts that the sample of `family` with `labels` in `text` is at least `n`.
fn at_least(text: &str, family: &str, labels: &[(&str, &str)], n: f64) {
    let value = sample(text, family, labels);
    assert!(
        value.is_some_and(|v| v >= n),
        "{family} {labels:?} is {value:?}, want ≥ {n}: {text}"
    );
}

/// The Grafana dashboard (docs/grafana/switchyard.json) queries only
/// families the host exports: a renamed metric fails here, not on an
/// operator's empty panel.
#[test]
fn the_dashboard_queries_only_families_the_host_exports() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let names = regex::Regex::new(r"switchyard_[a-z_]+").unwrap();
    let exported: std::collections::BTreeSet<String> = names
        .find_iter(&read("host/src/telemetry.rs"))
        .map(|m| m.as_str().to_string())
        .collect();
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("docs/grafana/switchyard.json")).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 6, "{dashboard}");
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for name in names.find_iter(expr) {
                let family = name.as_str().trim_end_matches("_bucket");
                assert!(
                    exported.contains(family),
                    "panel {:?} queries {family}, which the host does not export",
                    panel["title"]
                );
            }
        }
    }
}
