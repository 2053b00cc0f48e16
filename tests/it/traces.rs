//! OpenTelemetry traces: what the host posts to `{otlp_endpoint}/v1/traces`,
//! decoded with the OTLP protobuf messages (`opentelemetry-proto`), as a
//! collector would. The tree of one chat request, continuing the client's
//! `traceparent` and passing it upstream; and a collector that is down
//! costs the request nothing and counts the spans lost.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};

use crate::harness::Host;

/// A span as received, with the service that sent it.
#[derive(Clone, Debug)]
pub(crate) struct Got {
    pub service: String,
    pub span: Span,
}

impl Got {
    pub fn trace(&self) -> String {
        hex(&self.span.trace_id)
    }
    pub fn id(&self) -> String {
        hex(&self.span.span_id)
    }
    pub fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }
    pub fn attr(&self, key: &str) -> Option<String> {
        use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
        let value = self
            .span
            .attributes
            .iter()
            .find(|a| a.key == key)?
            .value
            .clone()?;
        Some(match value.value? {
            V::StringValue(s) => s,
            V::IntValue(i) => i.to_string(),
            V::DoubleValue(d) => d.to_string(),
            V::BoolValue(b) => b.to_string(),
            other => format!("{other:?}"),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) type Spans = Arc<Mutex<Vec<Got>>>;

/// An OTLP/HTTP collector on a loopback port: its base URL and what it got.
pub(crate) async fn collector() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                assert_eq!(headers["content-type"], "application/x-protobuf");
                let request =
                    ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .and_then(|a| a.value.as_ref())
                        .map(|v| format!("{:?}", v.value))
                        .unwrap_or_default();
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            kept.lock().unwrap().push(Got {
                                service: service.clone(),
                                span,
                            });
                        }
                    }
                }
                ().into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), spans)
}

/// Waits up to 10 s for a span named `name` in `trace`.
pub(crate) async fn wait_for(spans: &Spans, trace: &str, name: &str) -> Got {
    for _ in 0..100 {
        let found = spans
            .lock()
            .unwrap()
            .iter()
            .find(|g| g.trace() == trace && g.span.name == name)
            .cloned();
        if let Some(found) = found {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let names: Vec<String> = spans
        .lock()
        .unwrap()
        .iter()
        .map(|g| format!("{} {}", g.trace(), g.span.name))
        .collect();
    panic!("no span '{name}' in trace {trace} within 10 s; got {names:?}")
}

/// The spans of `trace` as an indented tree, for the log.
pub(crate) fn tree(spans: &Spans, trace: &str) -> String {
    let all: Vec<Got> = spans
        .lock()
        .unwrap()
        .iter()
        .filter(|g| g.trace() == trace)
        .cloned()
        .collect();
    fn walk(all: &[Got], parent: &str, depth: usize, out: &mut String) {
        let mut children: Vec<&Got> = all.iter().filter(|g| g.parent() == parent).collect();
        children.sort_by_key(|g| g.span.start_time_unix_nano);
        for child in children {
            let ms = (child.span.end_time_unix_nano - child.span.start_time_unix_nano) as f64 / 1e6;
            out.push_str(&format!(
                "{}{} ({ms:.2} ms)\n",
                "  ".repeat(depth),
                child.span.name
            ));
            walk(all, &child.id(), depth + 1, out);
        }
    }
    let ids: Vec<String> = all.iter().map(Got::id).collect();
    let roots: std::collections::BTreeSet<String> = all
        .iter()
        .filter(|g| !ids.contains(&g.parent()))
        .map(Got::parent)
        .collect();
    let mut out = String::new();
    for root in roots {
        walk(&all, &root, 0, &mut out);
    }
    out
}

/// An OpenAI-shaped upstream that notes each request's `traceparent`.
async fn recording_upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let noted = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let noted = noted.clone();
            async move {
                let parent = headers.get("traceparent").map_or("", |v| v.to_str().unwrap());
                noted.lock().unwrap().push(parent.to_string());
                let usage = json!({"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4});
                if body["stream"] == true {
                    let chunk = json!({"id": "t", "object": "chat.completion.chunk", "created": 1, "model": "m",
                        "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]});
                    let last = json!({"id": "t", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [], "usage": usage});
                    let text = format!("data: {chunk}\n\ndata: {last}\n\ndata: [DONE]\n\n");
                    return ([("content-type", "text/event-stream")], text).into_response();
                }
                axum::Json(json!({"id": "t", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
                    "usage": usage})).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("127.0.0.1:{}", addr.port()), seen)
}

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

on_each_store!(a_chat_request_is_one_trace_from_the_client_to_the_upstream);
async fn a_chat_request_is_one_trace_from_the_client_to_the_upstream() {
    let (collector, spans) = collector().await;
    let (upstream, seen) = recording_upstream().await;
    let host = Host::builder()
        .config(&format!(
            "[telemetry]\notlp_endpoint = \"{collector}\"\n[inference]\nembedded = false\n\
             [[inference.upstreams]]\nname = \"rec\"\nbase_url = \"http://{upstream}/v1\"\nmodels = [\"traced=m\"]\n"
        ))
        .start()
        .await;
    let alice = host.create_user("alice").await;
    let response = host
        .http
        .post(host.url("/v1/chat/completions"))
        .bearer_auth(&alice)
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .json(&json!({"model": "traced", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let server = wait_for(&spans, TRACE, "POST /v1/chat/completions").await;
    assert_eq!(server.parent(), CLIENT_SPAN, "continues the client's span");
    assert!(server.service.contains("switchyard"), "{}", server.service);
    assert_eq!(
        server.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(server.attr("switchyard.team").as_deref(), Some("~alice"));
    for name in ["inference.admit", "inference.queue", "inference.route"] {
        let span = wait_for(&spans, TRACE, name).await;
        assert_eq!(span.parent(), server.id(), "{name} is the request's child");
    }
    let route = wait_for(&spans, TRACE, "inference.route").await;
    assert_eq!(
        route.attr("gen_ai.usage.output_tokens").as_deref(),
        Some("1")
    );
    let call = wait_for(&spans, TRACE, "plugin.call").await;
    assert_eq!(call.parent(), route.id());
    // The upstream was asked in the plugin call's span.
    let sent = seen.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].starts_with(&format!("00-{TRACE}-{}", call.id())),
        "traceparent {} under the plugin call {}",
        sent[0],
        call.id()
    );
    eprintln!("the trace of one chat request:\n{}", tree(&spans, TRACE));
}

on_each_store!(a_collector_that_is_down_costs_requests_nothing_and_is_counted);
async fn a_collector_that_is_down_costs_requests_nothing_and_is_counted() {
    // A port nothing listens on.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let host = Host::builder()
        .config(&format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{closed}\"\n"
        ))
        .start()
        .await;
    let alice = host.create_user("alice").await;
    for _ in 0..20 {
        let (status, _) = call!(host, alice, GET "/v1/me");
        assert_eq!(status, 200);
    }
    for _ in 0..50 {
        let scrape = crate::metrics::scrape(&host).await;
        let dropped = crate::metrics::sample(&scrape, "switchyard_trace_spans_dropped_total", &[])
            .unwrap_or(0.0);
        if dropped >= 20.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the spans sent to a closed port were not counted as dropped within 10 s");
}

const EVENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const EVENT_CLIENT_SPAN: &str = "00f067aa0ba902b7";

on_each_store!(a_delivered_event_is_in_the_trace_of_the_request_that_caused_it);
async fn a_delivered_event_is_in_the_trace_of_the_request_that_caused_it() {
    let (collector, spans) = collector().await;
    let receiver = crate::receiver::Receiver::start().await;
    let host = Host::builder()
        .config(&format!(
            "[telemetry]\notlp_endpoint = \"{collector}\"\n[webhooks]\nallow_private = [\"127.0.0.0/8\"]\n"
        ))
        .start()
        .await;
    let world = crate::world::World::build(&host, Some(&format!("{}/hook", receiver.base))).await;
    let automation = json!({"name": "low-loss", "action": "Webhooks",
        "event": {"type": "RUN_METRIC_THRESHOLD", "metric": {"name": "loss", "window": 1,
            "aggregation": "min", "comparison": "<", "threshold": 0.5}},
        "webhook": {"team": "ml", "name": "ci"},
        "payload": "{\"loss\": ${metric_value}}"});
    ok!(host, world.alice, POST "/v1/teams/ml/projects/vision/automations", automation);
    let run = ok!(host, world.bob, POST "/v1/teams/ml/projects/vision/runs", {"name": "sweep"});
    let path = format!(
        "/v1/teams/ml/projects/vision/runs/{}/metrics",
        run["id"].as_str().unwrap()
    );
    let logged = host
        .http
        .post(host.url(&path))
        .bearer_auth(&world.bob)
        .header(
            "traceparent",
            format!("00-{EVENT_TRACE}-{EVENT_CLIENT_SPAN}-01"),
        )
        .json(&json!({"metrics": {"loss": 0.25}}))
        .send()
        .await
        .unwrap();
    assert!(logged.status().is_success(), "{}", logged.status());
    let sent = receiver.wait_for(1, 10).await;

    let server = wait_for(
        &spans,
        EVENT_TRACE,
        "POST /v1/teams/{team}/projects/{project}/runs/{run}/metrics",
    )
    .await;
    assert_eq!(server.parent(), EVENT_CLIENT_SPAN);
    assert_eq!(server.attr("switchyard.team").as_deref(), Some("ml"));
    let event = wait_for(&spans, EVENT_TRACE, "event RUN_METRIC_THRESHOLD").await;
    assert_eq!(event.parent(), server.id(), "the event is the request's");
    let matched = wait_for(&spans, EVENT_TRACE, "automation.match").await;
    assert_eq!(matched.parent(), event.id());
    assert_eq!(
        matched.attr("switchyard.automation").as_deref(),
        Some("low-loss")
    );
    for step in ["automation.filter", "automation.render"] {
        assert_eq!(
            wait_for(&spans, EVENT_TRACE, step).await.parent(),
            matched.id(),
            "{step}"
        );
    }
    let attempt = wait_for(&spans, EVENT_TRACE, "delivery.attempt").await;
    assert_eq!(attempt.parent(), matched.id());
    assert_eq!(
        attempt.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(attempt.attr("switchyard.webhook").as_deref(), Some("ml/ci"));
    // The receiver was called in the attempt's span.
    let traceparent = sent[0]
        .header("traceparent")
        .unwrap_or_default()
        .to_string();
    assert!(
        traceparent.starts_with(&format!("00-{EVENT_TRACE}-{}", attempt.id())),
        "traceparent {traceparent} under the attempt {}",
        attempt.id()
    );
    eprintln!(
        "the trace of one delivered event:\n{}",
        tree(&spans, EVENT_TRACE)
    );
}
