//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf) to
//! `{[telemetry] otlp_endpoint}/v1/traces` with `service.name`
//! `switchyard`. Off unless the endpoint is set; then every function here
//! that starts a span costs one atomic load.
//!
//! Spans are batched by the SDK's processor on a thread of its own, in a
//! bounded queue: a collector that is down or slow drops spans (counted in
//! `switchyard_trace_spans_dropped_total` when an export fails) and never
//! slows a request.
//!
//! A trace's context travels as W3C `traceparent` text: from clients, to
//! upstreams and receivers, and with an event through the inbox and the
//! outbox.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
};

static ON: AtomicBool = AtomicBool::new(false);

/// The tracer, made once: asking the global provider for one per span
/// allocated its scope each time.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Spans held for export at most; beyond, new spans are dropped.
const QUEUE: usize = 4_096;

/// The exporting pipeline; flushes and stops when dropped.
pub struct Exporting {
    provider: SdkTracerProvider,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        ON.store(false, Ordering::Relaxed);
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(2));
    }
}

/// Starts exporting to `endpoint` (the collector's base URL), or nothing
/// when there is none.
pub fn start(endpoint: Option<&str>) -> anyhow::Result<Option<Exporting>> {
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| {
            anyhow::anyhow!(
                "[telemetry] otlp_endpoint = \"{endpoint}\" cannot be used ({e}); give a collector's base URL, e.g. http://otel-collector:4318"
            )
        })?;
    let batches = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE)
        .with_scheduled_delay(Duration::from_millis(500))
        .build();
    let processor = BatchSpanProcessor::builder(Counted(exporter))
        .with_batch_config(batches)
        .build();
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name("switchyard")
        .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    // One provider per process: a second app in a process (tests) keeps
    // the first tracer.
    let _ = TRACER.set(provider.tracer("switchyard"));
    ON.store(true, Ordering::Relaxed);
    Ok(Some(Exporting { provider }))
}

/// The OTLP exporter, counting the spans of a batch it could not send.
#[derive(Debug)]
struct Counted(opentelemetry_otlp::SpanExporter);

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let sent = self.0.export(batch).await;
        if sent.is_err() {
            crate::telemetry::trace_spans_dropped(n);
        }
        sent
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource);
    }
}

/// Whether spans are exported.
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// A span started as a child of `parent` (a server span when `kind` says
/// so), as the context to run its work in.
pub fn start_span(
    name: impl Into<String>,
    kind: SpanKind,
    parent: &Context,
    attrs: Vec<KeyValue>,
) -> Context {
    let Some(tracer) = TRACER.get() else {
        return parent.clone();
    };
    let span = tracer
        .span_builder(name.into())
        .with_kind(kind)
        .with_attributes(attrs)
        .start_with_context(tracer, parent);
    parent.with_span(span)
}

/// A span started as a child of the current one, if spans are exported;
/// its attributes are made only then (these sites are on hot paths).
pub fn child(name: &'static str, attrs: impl FnOnce() -> Vec<KeyValue>) -> Option<Context> {
    on().then(|| start_span(name, SpanKind::Internal, &Context::current(), attrs()))
}

/// Ends the span of `cx` with `attrs`, an error status if `failed`.
pub fn end(cx: &Context, attrs: Vec<KeyValue>, failed: Option<&str>) {
    let span = cx.span();
    span.set_attributes(attrs);
    if let Some(why) = failed {
        span.set_status(Status::error(why.to_string()));
    }
    span.end();
}

/// Adds `attrs` to the current span (the request's, in a handler), if
/// spans are exported.
pub fn annotate(attrs: impl FnOnce() -> Vec<KeyValue>) {
    if on() {
        Context::current().span().set_attributes(attrs());
    }
}

/// The `traceparent` of `cx`'s span, if it has one to continue: W3C's
/// version 00, written directly (the propagator goes through a map).
pub fn traceparent(cx: &Context) -> Option<String> {
    if !on() {
        return None;
    }
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The current span's `traceparent`: what an event caused now carries.
pub fn current() -> Option<String> {
    traceparent(&Context::current())
}

/// The context a `traceparent` names (the empty one for none or a bad one).
pub fn continued(traceparent: Option<&str>) -> Context {
    let Some(value) = traceparent else {
        return Context::new();
    };
    let fields = HashMap::from([("traceparent".to_string(), value.to_string())]);
    TraceContextPropagator::new().extract(&fields)
}

/// The context a request's `traceparent` header names.
pub fn from_headers(headers: &HeaderMap) -> Context {
    continued(headers.get("traceparent").and_then(|v| v.to_str().ok()))
}

/// Adds the current span's `traceparent` to `headers`.
pub fn inject(headers: &mut HeaderMap) {
    if let Some(value) =
        traceparent(&Context::current()).and_then(|v| HeaderValue::from_str(&v).ok())
    {
        headers.insert(HeaderName::from_static("traceparent"), value);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_traceparent_is_written_as_the_propagator_writes_it() {
        use opentelemetry::propagation::TextMapPropagator;
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cx = super::continued(Some(good));
        super::ON.store(true, std::sync::atomic::Ordering::Relaxed);
        let ours = super::traceparent(&cx);
        let mut theirs = std::collections::HashMap::new();
        super::TraceContextPropagator::new().inject_context(&cx, &mut theirs);
        assert_eq!(ours.as_deref(), Some(good));
        assert_eq!(ours, theirs.remove("traceparent"));
    }

    #[test]
    fn an_endpoint_that_is_no_url_is_refused_naming_it() {
        let e = super::start(Some("not a url")).err().unwrap().to_string();
        assert!(
            e.contains("otlp_endpoint = \"not a url\"") && e.contains("e.g. http://"),
            "{e}"
        );
    }

    #[test]
    fn a_bad_traceparent_continues_nothing() {
        use opentelemetry::trace::TraceContextExt;
        let cx = super::continued(Some("00-zz-12-01"));
        assert!(!cx.span().span_context().is_valid());
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cx = super::continued(Some(good));
        assert!(cx.span().span_context().is_valid());
    }
}
