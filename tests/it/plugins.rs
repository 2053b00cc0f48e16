//! The plugin runtime, through the real binary: built-ins, limits,
//! capabilities, uploads, hot swap and the watched directory.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{
    Host, OPERATOR_KEY, assert_error_shape, expect_error, expect_invalid, into_parts, listed,
    plugin_wasm,
};

/// Every variable of the spec, as the delivery engine will pass them.
fn spec_variables() -> Value {
    json!({
        "project_name": "vision",
        "entity_name": "acme",
        "event_type": "ADD_ARTIFACT_ALIAS",
        "event_author": "ada",
        "alias": "production",
        "tag": "",
        "artifact_collection_name": "resnet",
        "artifact_metadata": {"accuracy": 0.93, "framework": "torch", "nested": {"a": 1}},
        "artifact_version": {"name": "resnet:v3", "version": "v3", "collection": "resnet"},
        "artifact_version_string": "acme/vision/resnet:v3",
        "ACCESS_TOKEN": "tok-123",
        "GITHUB_SECRET": "s3cr3t",
    })
}

on_each_store!(template_default_renders_every_spec_variable);
async fn template_default_renders_every_spec_variable() {
    let host = Host::start().await;
    let template = r#"{"event_type": "${event_type}", "client_payload": {
        "author": "${event_author}", "version": "${artifact_version}",
        "version_string": "${artifact_version_string}", "collection": "${artifact_collection_name}",
        "project": "${project_name}", "entity": "${entity_name}", "alias": "${alias}", "tag": "${tag}",
        "accuracy": ${artifact_metadata.accuracy}, "framework": "${artifact_metadata.framework}",
        "summary": "${entity_name}/${project_name} got ${alias} (acc ${artifact_metadata.accuracy})",
        "token": "${ACCESS_TOKEN}", "secret": "${GITHUB_SECRET}"}}"#;
    let (status, body) = host
        .invoke(
            "template-default",
            &json!({"template": template, "variables": spec_variables()}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let out = &body["output"];
    assert_eq!(out["event_type"], "ADD_ARTIFACT_ALIAS");
    let p = &out["client_payload"];
    assert_eq!(p["author"], "ada");
    assert_eq!(
        p["version"],
        json!({"name": "resnet:v3", "version": "v3", "collection": "resnet"})
    );
    assert_eq!(p["version_string"], "acme/vision/resnet:v3");
    assert_eq!(p["collection"], "resnet");
    assert_eq!(p["project"], "vision");
    assert_eq!(p["entity"], "acme");
    assert_eq!(p["alias"], "production");
    assert_eq!(p["tag"], "");
    assert_eq!(p["accuracy"], 0.93);
    assert_eq!(p["framework"], "torch");
    assert_eq!(p["summary"], "acme/vision got production (acc 0.93)");
    assert_eq!(p["token"], "tok-123");
    assert_eq!(p["secret"], "s3cr3t");
}

on_each_store!(hostile_values_cannot_break_or_inject_into_the_json);
async fn hostile_values_cannot_break_or_inject_into_the_json() {
    let host = Host::start().await;
    let hostile = "\"}, \"admin\": true, \"x\": {\"y\": \"\\\n${ACCESS_TOKEN}\u{0001}";
    let (status, body) = host
        .invoke(
            "template-default",
            &json!({"template": r#"{"who": "${event_author}", "wrapped": "by ${event_author}!"}"#,
                    "variables": {"event_author": hostile, "ACCESS_TOKEN": "tok"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let out = body["output"].as_object().unwrap();
    assert_eq!(out.len(), 2, "no key was injected: {body}");
    assert_eq!(out["who"], hostile);
    assert_eq!(out["wrapped"], format!("by {hostile}!"));
}

on_each_store!(template_default_renders_large_and_deeply_nested_payloads);
async fn template_default_renders_large_and_deeply_nested_payloads() {
    let host = Host::start().await;
    // The renderer starts with 256 KiB of memory and 64 KiB of stack: a
    // 1.5 MB payload has to grow the memory, and the deepest variable a
    // request may carry (30 levels inside the body's two) must fit the stack.
    let long = "x".repeat(100_000);
    let deep = format!("{}{}", "[".repeat(30), "]".repeat(30));
    let template = format!(
        r#"{{"parts": [{}], "version": "${{artifact_version}}"}}"#,
        vec![r#""${alias}""#; 15].join(", ")
    );
    let input = json!({"template": template,
        "variables": {"alias": long, "artifact_version": serde_json::from_str::<Value>(&deep).unwrap()}});
    let (status, body) = host.invoke("template-default", &input).await;
    let head: String = body.to_string().chars().take(500).collect();
    assert_eq!(status, 200, "{head}");
    // Calls reuse the kept instance, whose memory must not grow with each:
    // 60 of them would pass its 64 MiB cap if nothing were freed.
    for call in 0..60 {
        let (status, body) = host.invoke("template-default", &input).await;
        let head: String = body.to_string().chars().take(300).collect();
        assert_eq!(status, 200, "call {call}: {head}");
    }
    let parts = body["output"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 15);
    assert!(parts.iter().all(|p| p.as_str() == Some(long.as_str())));
    assert_eq!(body["output"]["version"].to_string(), deep);
}

on_each_store!(templates_too_large_or_too_deep_are_refused_before_the_plugin);
async fn templates_too_large_or_too_deep_are_refused_before_the_plugin() {
    let host = Host::start().await;
    for (template, says) in [
        (
            format!("{}{}", "[".repeat(200_000), "]".repeat(200_000)),
            "the limit is 65536",
        ),
        (
            format!("{}{}", "[".repeat(33), "]".repeat(33)),
            "more than 32 levels",
        ),
    ] {
        let (status, body) = host
            .invoke("template-default", &json!({"template": template}))
            .await;
        expect_invalid(&(status, body.clone()), "template");
        let error = assert_error_shape(&body);
        assert_eq!(error["param"], "template", "{body}");
        assert!(error["message"].as_str().unwrap().contains(says), "{body}");
    }
    let (status, body) = host
        .invoke(
            "filter-default",
            &json!({"config": {"alias_regex": "a".repeat(960_000)},
                    "event": {"event_type": "ADD_ARTIFACT_ALIAS", "alias": "a"}}),
        )
        .await;
    expect_invalid(&(status, body.clone()), "config");
    assert!(
        assert_error_shape(&body)["message"]
            .as_str()
            .unwrap()
            .contains("limit is 1024"),
        "{body}"
    );
}

on_each_store!(unknown_variables_and_invalid_templates_are_reported_with_position);
async fn unknown_variables_and_invalid_templates_are_reported_with_position() {
    let host = Host::start().await;
    let (status, body) = host
        .invoke(
            "template-default",
            &json!({"template": "{\n \"a\": \"${nope}\"}", "variables": {"alias": "x"}}),
        )
        .await;
    // The plugin's own code, and its position as offset, line and column.
    let answer = (status, body.clone());
    let error = expect_error(&answer, 400, "unknown-variable", Some("template"));
    assert_eq!(
        error["position"],
        json!({"offset": 9, "line": 2, "column": 8}),
        "{body}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("template-default@"),
        "names the plugin: {message}"
    );
    assert!(
        message.contains("${nope}") && message.contains("line 2 column 8"),
        "{message}"
    );

    for (broken, code) in [
        (r#"{"a": "${alias"}"#, "invalid-template"),
        (r#"{"a": "${alias}",}"#, "invalid-json"),
    ] {
        let (status, body) = host
            .invoke(
                "template-default",
                &json!({"template": broken, "variables": {"alias": "x"}}),
            )
            .await;
        expect_error(&(status, body.clone()), 400, code, Some("template"));
    }
}

async fn filter(host: &Host, config: Value, event: Value) -> bool {
    let (status, body) = host
        .invoke("filter-default", &json!({"config": config, "event": event}))
        .await;
    assert_eq!(status, 200, "{body}");
    body["matches"].as_bool().unwrap()
}

on_each_store!(filter_default_decides_each_condition);
async fn filter_default_decides_each_condition() {
    let host = Host::start().await;
    let alias = |a: &str| json!({"event_type": "ADD_ARTIFACT_ALIAS", "alias": a});
    assert!(filter(&host, json!({"alias_regex": "^prod"}), alias("production")).await);
    assert!(!filter(&host, json!({"alias_regex": "^prod$"}), alias("production")).await);
    assert!(
        !filter(
            &host,
            json!({"alias_regex": ".*"}),
            json!({"event_type": "LINK_ARTIFACT"})
        )
        .await
    );
    assert!(filter(&host, json!({}), json!({"event_type": "LINK_ARTIFACT"})).await);

    let tag = |t: &str| json!({"event_type": "ADD_ARTIFACT_TAG", "tag": t});
    assert!(
        filter(
            &host,
            json!({"tag_regex": "^release-\\d+$"}),
            tag("release-12")
        )
        .await
    );
    assert!(
        !filter(
            &host,
            json!({"tag_regex": "^release-\\d+$"}),
            tag("release-x")
        )
        .await
    );

    let run = json!({"event_type": "RUN_METRIC", "run_creator": "ada", "run_name": "sweep-7",
                     "metric_name": "loss", "metric_values": [9.0, 0.5, 0.4, 0.3]});
    assert!(filter(&host, json!({"run_creator": "ada"}), run.clone()).await);
    assert!(!filter(&host, json!({"run_creator": "bob"}), run.clone()).await);
    assert!(filter(&host, json!({"run_name_regex": "^sweep-"}), run.clone()).await);
    assert!(!filter(&host, json!({"run_name_regex": "^final"}), run.clone()).await);

    let metric = |aggregation: &str, comparison: &str, threshold: f64, window: u32| {
        json!({"metric": {"name": "loss", "window": window, "aggregation": aggregation,
                          "comparison": comparison, "threshold": threshold}})
    };
    // Last 3 values: 0.5, 0.4, 0.3 → average 0.4, min 0.3, max 0.5.
    assert!(filter(&host, metric("average", "<", 0.41, 3), run.clone()).await);
    assert!(!filter(&host, metric("average", "<", 0.39, 3), run.clone()).await);
    assert!(filter(&host, metric("min", "<=", 0.3, 3), run.clone()).await);
    assert!(filter(&host, metric("max", ">=", 0.5, 3), run.clone()).await);
    assert!(!filter(&host, metric("max", ">", 0.5, 3), run.clone()).await);
    assert!(
        filter(&host, metric("max", ">", 5.0, 4), run.clone()).await,
        "the window reaches 9.0"
    );
    assert!(filter(&host, metric("min", "==", 0.3, 2), run.clone()).await);
    assert!(filter(&host, metric("min", "!=", 0.4, 2), run.clone()).await);
    assert!(
        filter(&host, metric("average", ">", 0.0, 100), run.clone()).await,
        "a short run uses what it has"
    );
    let other = json!({"event_type": "RUN_METRIC", "metric_name": "acc", "metric_values": [1.0]});
    assert!(
        !filter(&host, metric("max", ">", 0.0, 1), other).await,
        "another metric never matches"
    );

    // The answer says what fired: a change's two aggregates.
    let change = json!({"metric": {"name": "loss", "window": 2, "prior_window": 2,
        "change_type": "absolute", "direction": "decrease", "amount": 0.5}});
    let (status, body) = host
        .invoke("filter-default", &json!({"config": change, "event": run}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (
            &body["matches"],
            &body["fired"]["previous"],
            &body["fired"]["zscore"]
        ),
        (&json!(true), &json!(4.75), &Value::Null),
        "{body}"
    );
    assert!((body["fired"]["value"].as_f64().unwrap() - 0.35).abs() < 1e-12);
}

on_each_store!(invalid_regexes_and_conditions_are_reported_not_panicked_on);
async fn invalid_regexes_and_conditions_are_reported_not_panicked_on() {
    let host = Host::start().await;
    let event = json!({"event_type": "ADD_ARTIFACT_ALIAS", "alias": "x"});
    let (status, body) = host
        .invoke(
            "filter-default",
            &json!({"config": {"alias_regex": "(unclosed"}, "event": event}),
        )
        .await;
    expect_error(
        &(status, body.clone()),
        400,
        "invalid-regex",
        Some("config"),
    );
    let message = assert_error_shape(&body)["message"].as_str().unwrap();
    assert!(
        message.contains("alias_regex") && message.contains("regular expression"),
        "{message}"
    );

    let (status, body) = host
        .invoke("filter-default", &json!({"config": {"metric": {"name": "loss", "comparison": "~", "threshold": 1}}, "event": event}))
        .await;
    expect_invalid(&(status, body.clone()), "config");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("comparison"),
        "{body}"
    );
    // The plugin keeps working.
    assert!(filter(&host, json!({"alias_regex": "x"}), event).await);
}

async fn upload_misbehave(host: &Host, limits: &str) {
    let (status, body) = host
        .upload_plugin(
            "misbehave",
            &format!("kind=payload-template&version=9.9.9&{limits}"),
            plugin_wasm("misbehave"),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// Runs `template` on `misbehave`, expects a plugin failure, returns its message.
async fn failure_message(host: &Host, template: &str) -> String {
    let (status, body) = host
        .invoke("misbehave", &json!({"template": template}))
        .await;
    expect_error(&(status, body.clone()), 500, "plugin_failed", None);
    assert_eq!(assert_error_shape(&body)["code"], "plugin_failed");
    let message = body["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("misbehave@9.9.9"),
        "names the plugin: {message}"
    );
    message
}

on_each_store!(a_plugin_that_loops_forever_is_stopped_at_its_cpu_budget);
async fn a_plugin_that_loops_forever_is_stopped_at_its_cpu_budget() {
    let host = Host::start().await;
    upload_misbehave(&host, "cpu_ms=50&timeout_ms=5000").await;
    let start = Instant::now();
    let message = failure_message(&host, "loop").await;
    let took = start.elapsed();
    assert!(message.contains("CPU budget of 50 ms"), "{message}");
    assert!(took < Duration::from_secs(3), "stopped after {took:?}");
    let (status, _) = host.get_anon("/v1/system-check").await;
    assert_eq!(status, 200, "the host keeps serving");
    let (_, info) = host.get("/v1/admin/plugins/misbehave").await;
    assert_eq!(info["failures"], 1, "{info}");
}

on_each_store!(a_plugin_past_its_wall_clock_timeout_is_stopped);
async fn a_plugin_past_its_wall_clock_timeout_is_stopped() {
    let host = Host::start().await;
    // A generous CPU budget: the wall-clock timeout must fire first.
    upload_misbehave(&host, "cpu_ms=60000&timeout_ms=200").await;
    let message = failure_message(&host, "loop").await;
    assert!(
        message.contains("did not finish within 200 ms"),
        "{message}"
    );
}

on_each_store!(a_plugin_that_allocates_without_bound_is_stopped_at_its_memory_cap);
async fn a_plugin_that_allocates_without_bound_is_stopped_at_its_memory_cap() {
    let host = Host::start().await;
    upload_misbehave(&host, "memory_mb=16").await;
    let message = failure_message(&host, "alloc").await;
    assert!(message.contains("memory cap of 16 MiB"), "{message}");
    let (status, body) = host
        .invoke("misbehave", &json!({"template": "still alive"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"]["echo"], "still alive");
}

on_each_store!(a_plugin_that_traps_is_reported);
async fn a_plugin_that_traps_is_reported() {
    let host = Host::start().await;
    upload_misbehave(&host, "").await;
    let message = failure_message(&host, "trap").await;
    assert!(message.contains("misbehave@9.9.9 trapped"), "{message}");
    // The author sees what the plugin said before it trapped: the panic.
    assert!(
        message.contains("its stderr ended with:")
            && message.contains("misbehave was asked to trap"),
        "{message}"
    );
}

on_each_store!(a_template_sees_no_files_and_no_environment);
async fn a_template_sees_no_files_and_no_environment() {
    let host = Host::start().await;
    upload_misbehave(&host, "").await;
    let (status, body) = host
        .invoke("misbehave", &json!({"template": "read-file"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let tries = body["output"].as_array().unwrap();
    assert!(!tries.is_empty(), "the plugin tried nothing: {body}");
    for entry in tries {
        assert!(entry.as_str().unwrap().ends_with("denied"), "{body}");
    }
    let (_, body) = host.invoke("misbehave", &json!({"template": "env"})).await;
    assert_eq!(body["output"]["vars"], 0, "{body}");
}

on_each_store!(plugin_output_goes_to_the_host_log_with_the_plugins_name);
async fn plugin_output_goes_to_the_host_log_with_the_plugins_name() {
    let host = Host::start().await;
    upload_misbehave(&host, "").await;
    let (status, body) = host
        .invoke("misbehave", &json!({"template": "print"}))
        .await;
    assert_eq!(status, 200, "{body}");
    host.wait_for_log(&["hello from stderr", "misbehave@9.9.9"])
        .await;
    host.wait_for_log(&["hello from stdout", "misbehave@9.9.9"])
        .await;
}

on_each_store!(a_template_importing_http_is_refused_and_leaves_no_compiled_code);
async fn a_template_importing_http_is_refused_and_leaves_no_compiled_code() {
    // A cache of its own, to see that a refused component leaves nothing.
    let cache = tempfile::tempdir().unwrap();
    let host = Host::builder()
        .env(
            "SWITCHYARD_PLUGIN_CACHE_DIR",
            &cache.path().display().to_string(),
        )
        .start()
        .await;
    let cached = || std::fs::read_dir(cache.path()).unwrap().count();
    let before = cached();
    let (status, body) = host
        .upload_plugin(
            "phone-home",
            "kind=payload-template&version=1",
            plugin_wasm("model_openai"),
        )
        .await;
    expect_error(&(status, body.clone()), 400, "invalid_request", None);
    let message = assert_error_shape(&body)["message"].as_str().unwrap();
    assert!(
        message.contains("wasi:http/"),
        "lists the offending imports: {message}"
    );
    let answer = host.get("/v1/admin/plugins/phone-home").await;
    expect_error(&answer, 404, "not_found", None);
    // Nor does a component of the wrong world, refused after compiling
    // (a template the host does not already serve, as a filter).
    let answer = host
        .upload_plugin(
            "wrong-world",
            "kind=event-filter&version=1",
            plugin_wasm("misbehave"),
        )
        .await;
    expect_error(&answer, 400, "invalid_request", None);
    assert_eq!(
        cached(),
        before,
        "refused components leave no compiled code"
    );
}

on_each_store!(a_template_that_opens_a_socket_loads_and_is_denied);
async fn a_template_that_opens_a_socket_loads_and_is_denied() {
    let host = Host::start().await;
    // Toolchains import sockets whatever the code does: the import loads.
    let (status, body) = host
        .upload_plugin(
            "phone-home",
            "kind=payload-template&version=1",
            plugin_wasm("sockets"),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // A listener it tries to reach, which must see no connection.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let (status, body) = host
        .invoke("phone-home", &json!({"template": target}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"]["outcome"], "PermissionDenied", "{body}");
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the plugin reached the listener: {accepted:?}"
    );
    // And the host goes on.
    let (status, body) = host
        .invoke(
            "template-default",
            &json!({"template": "{\"a\": \"${alias}\"}", "variables": {"alias": "x"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

on_each_store!(a_broken_upload_leaves_the_old_version_serving);
async fn a_broken_upload_leaves_the_old_version_serving() {
    let host = Host::start().await;
    let (status, before) = host.get("/v1/admin/plugins/template-default").await;
    assert_eq!(status, 200);
    for bad in [
        b"not wasm at all".to_vec(),
        plugin_wasm("filter_default"),
        plugin_wasm("model_openai"),
    ] {
        let (status, body) = host
            .upload_plugin(
                "template-default",
                "kind=payload-template&version=6.6.6",
                bad,
            )
            .await;
        expect_error(&(status, body.clone()), 400, "invalid_request", None);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("template-default@6.6.6"),
            "{body}"
        );
    }
    let (_, after) = host.get("/v1/admin/plugins/template-default").await;
    assert_eq!(after["sha256"], before["sha256"]);
    assert_eq!(after["version"], before["version"]);
    let (status, _) = host
        .invoke("template-default", &json!({"template": "{\"a\": 1}"}))
        .await;
    assert_eq!(status, 200);
}

/// Waits (at most 10 s, loudly) until the callers have made 8 more calls,
/// so that calls run on each version between swaps.
async fn more_calls(calls: &std::sync::atomic::AtomicUsize) {
    let target = calls.load(std::sync::atomic::Ordering::SeqCst) + 8;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while calls.load(std::sync::atomic::Ordering::SeqCst) < target {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the callers stalled"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

on_each_store!(a_hot_swap_under_concurrent_calls_loses_no_call);
async fn a_hot_swap_under_concurrent_calls_loses_no_call() {
    let host = Host::start().await;
    let (status, _) = host
        .upload_plugin(
            "swap",
            "kind=payload-template&version=a",
            plugin_wasm("template_default"),
        )
        .await;
    assert_eq!(status, 201);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut callers = Vec::new();
    for _ in 0..4 {
        let (http, url, stop, calls) = (
            host.http.clone(),
            host.url("/v1/admin/plugins/swap/invoke"),
            stop.clone(),
            calls.clone(),
        );
        callers.push(tokio::spawn(async move {
            let (mut ok, mut versions) = (0, std::collections::BTreeSet::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let response = http
                    .post(&url)
                    .bearer_auth(OPERATOR_KEY)
                    .json(&json!({"template": "{\"v\": \"a\"}"}))
                    .send()
                    .await
                    .unwrap();
                let (status, body) = into_parts(response).await;
                assert_eq!(status, 200, "a call failed during the swap: {body}");
                // template-default renders {"v": "a"}; misbehave echoes the template.
                versions.insert(if body["output"]["v"] == "a" {
                    "template"
                } else {
                    "echo"
                });
                ok += 1;
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            (ok, versions)
        }));
    }
    for (i, wasm) in [
        "misbehave",
        "template_default",
        "misbehave",
        "template_default",
        "misbehave",
    ]
    .iter()
    .enumerate()
    {
        more_calls(&calls).await;
        let (status, body) = host
            .upload_plugin(
                "swap",
                &format!("kind=payload-template&version=v{i}"),
                plugin_wasm(wasm),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["version"], format!("v{i}"));
    }
    more_calls(&calls).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    let mut seen = std::collections::BTreeSet::new();
    for caller in callers {
        let (ok, versions) = caller.await.unwrap();
        total += ok;
        seen.extend(versions);
    }
    assert!(total > 20, "only {total} calls ran");
    assert_eq!(seen.len(), 2, "calls reached both versions: {seen:?}");
    let (_, info) = host.get("/v1/admin/plugins/swap").await;
    assert_eq!(info["version"], "v4");
    assert_eq!(info["source"], "upload");
}

on_each_store!(operators_list_replace_and_remove_plugins);
async fn operators_list_replace_and_remove_plugins() {
    let host = Host::start().await;
    let (_, list) = host.get("/v1/admin/plugins").await;
    let names = listed(&list, "name");
    assert_eq!(
        names,
        [
            "discord",
            "filter-default",
            "github",
            "slack",
            "teams",
            "template-default"
        ]
    );
    host.invoke("template-default", &json!({"template": "{}"}))
        .await;
    let (_, info) = host.get("/v1/admin/plugins/template-default").await;
    for field in [
        "kind",
        "version",
        "sha256",
        "loaded_at",
        "limits",
        "calls",
        "failures",
        "p50_us",
    ] {
        assert!(!info[field].is_null(), "{field} missing: {info}");
    }
    assert_eq!(info["source"], "builtin");
    assert!(info["calls"].as_u64().unwrap() >= 1);

    assert_eq!(
        host.delete("/v1/admin/plugins/template-default").await.0,
        409,
        "built-ins cannot be removed"
    );
    let (status, body) = host
        .upload_plugin(
            "template-default",
            "kind=event-filter&version=1",
            plugin_wasm("filter_default"),
        )
        .await;
    expect_error(&(status, body.clone()), 409, "conflict", None);

    upload_misbehave(&host, "").await;
    assert_eq!(host.delete("/v1/admin/plugins/misbehave").await.0, 204);
    let answer = host.invoke("misbehave", &json!({"template": "x"})).await;
    expect_error(&answer, 404, "not_found", None);

    let (status, body) = host
        .upload_plugin(
            "Bad Name",
            "kind=payload-template&version=1",
            plugin_wasm("misbehave"),
        )
        .await;
    expect_invalid(&(status, body.clone()), "name");
    let (status, body) = host
        .upload_plugin("x", "kind=printer&version=1", plugin_wasm("misbehave"))
        .await;
    expect_invalid(&(status, body.clone()), "kind");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("printer")
    );
    let answer = host.get_anon("/v1/admin/plugins").await;
    expect_error(&answer, 401, "invalid_api_key", None);
}

on_each_store!(the_watched_directory_loads_reloads_and_unloads_plugins);
async fn the_watched_directory_loads_reloads_and_unloads_plugins() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::builder()
        .config(&format!(
            "plugins_dir = {:?}\n[plugins]\nwatch_interval_ms = 100",
            dir.path()
        ))
        .start()
        .await;
    std::fs::write(
        dir.path().join("discord.wasm"),
        crate::scaffolds::discord_example(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("discord.toml"),
        "kind = \"payload-template\"\nversion = \"1.0.0\"\n[limits]\nmemory_mb = 32\n",
    )
    .unwrap();
    let info = wait_for(&host, "discord", |info| info["version"] == "1.0.0").await;
    assert_eq!(info["source"], "directory");
    assert_eq!(info["limits"]["memory_bytes"], 32 << 20);

    // The example third-party plugin renders a Discord message from event variables.
    let (status, body) = host
        .invoke(
            "discord",
            &json!({"template": "Model promoted", "variables": spec_variables()}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"]["content"], "ADD_ARTIFACT_ALIAS by ada");
    assert_eq!(body["output"]["embeds"][0]["title"], "Model promoted");
    assert_eq!(
        body["output"]["embeds"][0]["description"],
        "acme/vision/resnet:v3"
    );

    // A broken manifest is reported, and the loaded version keeps serving.
    std::fs::write(
        dir.path().join("discord.toml"),
        "kind = \"payload-template\"\nversion = \"2.0.0\"\ncolour = 1\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, list) = host.get("/v1/admin/plugins").await;
        if let Some(error) = list["directory_errors"]["discord"].as_str() {
            assert!(error.contains("colour"), "{error}");
            break;
        }
        assert!(Instant::now() < deadline, "no error reported: {list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, info) = host.get("/v1/admin/plugins/discord").await;
    assert_eq!(info["version"], "1.0.0");

    std::fs::write(
        dir.path().join("discord.toml"),
        "kind = \"payload-template\"\nversion = \"2.0.0\"\n",
    )
    .unwrap();
    wait_for(&host, "discord", |info| info["version"] == "2.0.0").await;

    std::fs::remove_file(dir.path().join("discord.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while host.get("/v1/admin/plugins/discord").await.0 != 404 {
        assert!(Instant::now() < deadline, "plugin was not unloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for(host: &Host, name: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, info) = host.get(&format!("/v1/admin/plugins/{name}")).await;
        if status == 200 && ready(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never became ready: {info}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn plugin_check_validates_and_dry_runs_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = format!("{}/template_default.wasm", switchyard_components::DIR);
    let input = dir.path().join("input.json");
    std::fs::write(
        &input,
        json!({"template": "{\"a\": \"${alias}\"}", "variables": {"alias": "prod"}}).to_string(),
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["plugin", "check", &wasm, "--input"])
        .arg(&input)
        .env("SWITCHYARD_PLUGIN_CACHE_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["kind"], "payload-template");
    assert_eq!(report["result"], json!({"a": "prod"}));

    let http = format!("{}/model_openai.wasm", switchyard_components::DIR);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["plugin", "check", &http, "--kind", "payload-template"])
        .env("SWITCHYARD_PLUGIN_CACHE_DIR", dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("wasi:http/"), "{stderr}");

    // A model backend is checked with its manifest's grant and lists its models.
    let backend = format!("{}/model_openai.wasm", switchyard_components::DIR);
    let manifest = dir.path().join("team-llm.toml");
    std::fs::write(
        &manifest,
        "kind = \"model-backend\"\nversion = \"1\"\n[backend]\nallow_hosts = [\"127.0.0.1:9\"]\n\
         env = { UPSTREAM_URL = \"http://127.0.0.1:9/v1\", MODELS = \"team-llm=llama\" }\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["plugin", "check", &backend, "--manifest"])
        .arg(&manifest)
        .env("SWITCHYARD_PLUGIN_CACHE_DIR", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["kind"], "model-backend");
    assert_eq!(report["models"], json!(["team-llm"]));
}

on_each_store!(a_restart_reuses_the_compiled_code_cache);
async fn a_restart_reuses_the_compiled_code_cache() {
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let mut first = Host::builder()
        .env("SWITCHYARD_PLUGIN_CACHE_DIR", cache_dir)
        .start()
        .await;
    let entries = || {
        let mut e: Vec<_> = std::fs::read_dir(cache.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".cwasm")
            })
            .map(|e| {
                let e = e.unwrap();
                (e.file_name(), e.metadata().unwrap().modified().unwrap())
            })
            .collect();
        e.sort();
        e
    };
    let before = entries();
    assert!(
        !before.is_empty(),
        "the built-in plugins' compiled code is cached"
    );
    first.terminate().await;
    let _second = Host::builder()
        .env("SWITCHYARD_PLUGIN_CACHE_DIR", cache_dir)
        .same_store(&first)
        .start()
        .await;
    assert_eq!(entries(), before, "nothing was recompiled or rewritten");
}

on_each_store!(plugins_in_use_are_safe_to_replace_and_remove);
async fn plugins_in_use_are_safe_to_replace_and_remove() {
    use crate::world::{PROJECT, World};
    let host = Host::with_config("[webhooks]\nallow_private = [\"127.0.0.0/8\"]").await;
    let world = World::build(&host, Some("http://127.0.0.1:9/hook")).await;
    let upload = async |version: &str, wasm: &str| {
        host.upload_plugin(
            "lenient",
            &format!("kind=payload-template&version={version}"),
            plugin_wasm(wasm),
        )
        .await
    };
    let (status, body) = upload("1.0.0", "misbehave").await;
    assert_eq!(status, 201, "{body}");
    // misbehave accepts any template, so this one saves.
    let automation = json!({"name": "loose", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"x": "${not_a_variable}"}"#, "template_plugin": "lenient"});
    ok!(host, world.alice, POST "{PROJECT}/automations", automation);

    // A replacement that would break it is refused, and the old one serves.
    let refused = upload("2.0.0", "template_default").await;
    let message = expect_error(&refused, 400, "invalid_request", None)["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("automation 'loose'") && message.contains("not_a_variable"),
        "{message}"
    );
    let (_, loaded) = host.get("/v1/admin/plugins/lenient").await;
    assert_eq!(loaded["version"], "1.0.0", "the old version keeps serving");
    let (status, body) = upload("1.1.0", "misbehave").await;
    assert_eq!(
        status, 200,
        "a replacement that breaks nothing goes in: {body}"
    );

    // Removing it is refused while it is used, naming the automation.
    let removal = host.delete("/v1/admin/plugins/lenient").await;
    let message = expect_error(&removal, 409, "conflict", None)["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("automation 'loose'"), "{message}");
    let (status, body) = host.delete("/v1/admin/plugins/lenient?force=true").await;
    assert_eq!(status, 204, "{body}");
    let (_, shown) = call!(host, world.alice, GET "{PROJECT}/automations/loose");
    assert_eq!(shown["state"], "disabled", "{shown}");
    assert!(
        shown["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("'lenient' was removed"),
        "{shown}"
    );
}

on_each_store!(the_built_in_target_adapters_render_each_targets_shape);
async fn the_built_in_target_adapters_render_each_targets_shape() {
    let host = Host::start().await;
    let variables = json!({"event_type": "ADD_ARTIFACT_ALIAS", "event_author": "alice",
        "alias": "prod", "artifact_collection_name": "detector",
        "artifact_version_string": "ml/vision/detector:v3", "project_name": "vision",
        "entity_name": "ml", "artifact_version": {"version": "v3", "index": 3}});
    let render = async |adapter: &str, template: &str| {
        let (status, body) = host
            .invoke(
                adapter,
                &json!({"template": template, "variables": variables}),
            )
            .await;
        assert_eq!(status, 200, "{adapter}: {body}");
        body["output"].clone()
    };

    let slack = render("slack", "Model promoted").await;
    assert_eq!(
        slack["text"],
        "Model promoted: alias prod on ml/vision/detector:v3"
    );
    assert_eq!(slack["blocks"][0]["text"]["text"], "Model promoted");
    assert!(
        slack["blocks"][1]["fields"].as_array().unwrap().len() == 4,
        "{slack}"
    );

    let teams = render("teams", "").await;
    assert_eq!(teams["@type"], "MessageCard");
    assert_eq!(teams["@context"], "http://schema.org/extensions");
    assert_eq!(teams["summary"], "ADD_ARTIFACT_ALIAS by alice");
    let section = &teams["sections"][0];
    assert_eq!(section["activityTitle"], "ADD_ARTIFACT_ALIAS by alice");
    assert_eq!(section["text"], "alias prod on ml/vision/detector:v3");
    assert_eq!(section["markdown"], true);
    assert_eq!(
        section["facts"][3],
        json!({"name": "Version", "value": "ml/vision/detector:v3"})
    );

    let github = render("github", "model-promoted").await;
    assert_eq!(
        github,
        json!({"event_type": "model-promoted", "client_payload": {
            "event_author": "alice", "artifact_version": {"version": "v3", "index": 3},
            "artifact_version_string": "ml/vision/detector:v3",
            "artifact_collection_name": "detector", "project_name": "vision", "entity_name": "ml"}})
    );

    let discord = render("discord", "").await;
    assert_eq!(discord["content"], "ADD_ARTIFACT_ALIAS by alice");
    assert_eq!(
        discord["embeds"][0]["description"],
        "alias prod on ml/vision/detector:v3"
    );

    let (_, listing) = host.get("/v1/admin/plugins").await;
    for adapter in ["slack", "teams", "github", "discord"] {
        let plugin = listing["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == adapter)
            .unwrap_or_else(|| panic!("{adapter} is not loaded: {listing}"));
        assert_eq!(plugin["source"], "builtin");
        assert_eq!(plugin["kind"], "payload-template");
    }
    expect_error(
        &host.delete("/v1/admin/plugins/slack").await,
        409,
        "conflict",
        None,
    );
}
