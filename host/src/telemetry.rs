//! Prometheus metrics at `/metrics`.
//!
//! Counters and histograms are recorded where things happen, through the
//! `metrics` facade and the functions below (one per family, so a name is
//! written once); gauges that describe state (the outbox, the queues) are
//! set when the endpoint is scraped. metrics-exporter-prometheus renders
//! the text format. The names and labels are what operators' dashboards and
//! alerts use: keep them stable.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::{LazyLock, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram, counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Bucket bounds of every `_seconds` histogram: 0.5 ms to a minute.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Installs the recorder, once per process.
pub fn install() {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics may be empty");
        }
        gauge!("switchyard_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        describe_families();
        handle
    });
}

/// Every family's help text, and the series whose labels are known before
/// anything happens, at zero: an alert on a rate needs its series from the
/// first scrape, not from the first delivery.
fn describe_families() {
    use metrics::Unit::{Count, Seconds};
    for (name, unit, help) in [
        (
            "switchyard_http_requests_total",
            Count,
            "HTTP requests answered, by method, route template and status.",
        ),
        (
            "switchyard_deliveries_total",
            Count,
            "Webhook delivery attempts recorded, by outcome: delivered, retried, failed, disabled (410 Gone).",
        ),
        (
            "switchyard_executions_skipped_total",
            Count,
            "Automation firings held back by a cooldown or rate limit (recorded as Skipped executions, nothing sent), by reason.",
        ),
        (
            "switchyard_deliveries_held_total",
            Count,
            "Due deliveries held back without an attempt, by reason: circuit (the webhook's circuit is open).",
        ),
        (
            "switchyard_circuit_transitions_total",
            Count,
            "Webhook circuit-breaker transitions on this host, by the state entered: open, half_open, closed.",
        ),
        (
            "switchyard_plugin_calls_total",
            Count,
            "Plugin calls, by plugin, kind and outcome (ok, failed).",
        ),
        (
            "switchyard_inference_requests_total",
            Count,
            "Inference requests answered, by endpoint, model and status.",
        ),
        (
            "switchyard_trace_spans_dropped_total",
            Count,
            "Trace spans dropped because the OTLP collector could not take them.",
        ),
        (
            "switchyard_inference_cache_total",
            Count,
            "Cacheable inference requests, by result: hit (answered from the response cache) or miss.",
        ),
        (
            "switchyard_inference_tokens_total",
            Count,
            "Tokens of finished inference requests, by model and kind (prompt, completion).",
        ),
    ] {
        metrics::describe_counter!(name, unit, help);
    }
    for (name, help) in [
        (
            "switchyard_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
        ),
        (
            "switchyard_delivery_duration_seconds",
            "From an event's acceptance to its delivery's acknowledgement.",
        ),
        (
            "switchyard_plugin_call_duration_seconds",
            "Time of one plugin call, by plugin and kind.",
        ),
        (
            "switchyard_queue_wait_seconds",
            "Time a job waited for a worker, by queue.",
        ),
        (
            "switchyard_inference_time_to_first_token_seconds",
            "From an inference request's arrival to its first generated piece, by model.",
        ),
    ] {
        metrics::describe_histogram!(name, Seconds, help);
    }
    for (name, unit, help) in [
        (
            "switchyard_build_info",
            Count,
            "Always 1; the version label names the build.",
        ),
        (
            "switchyard_outbox_pending",
            Count,
            "Deliveries waiting in the outbox (due or scheduled).",
        ),
        (
            "switchyard_outbox_oldest_due_seconds",
            Seconds,
            "How long the most overdue delivery has been due; 0 when none is.",
        ),
        (
            "switchyard_store_quarantined_records",
            Count,
            "Records the store could not read and set aside; above 0 needs an operator (docs/operations.md).",
        ),
        (
            "switchyard_queue_depth",
            Count,
            "Jobs waiting for a worker, by queue.",
        ),
        (
            "switchyard_webhook_circuits",
            Count,
            "Webhooks whose circuit this host holds open or half open, by state.",
        ),
    ] {
        metrics::describe_gauge!(name, unit, help);
    }
    for outcome in ["delivered", "retried", "failed", "disabled"] {
        counter!("switchyard_deliveries_total", "outcome" => outcome).increment(0);
    }
    for reason in ["cooldown", "rate_limit"] {
        counter!("switchyard_executions_skipped_total", "reason" => reason).increment(0);
    }
    for queue in ["plugin", "inference"] {
        gauge!("switchyard_queue_depth", "queue" => queue).set(0.0);
    }
    counter!("switchyard_deliveries_held_total", "reason" => "circuit").increment(0);
    for state in ["open", "half_open", "closed"] {
        counter!("switchyard_circuit_transitions_total", "to" => state).increment(0);
    }
    circuits(0, 0);
    gauge!("switchyard_outbox_pending").set(0.0);
    gauge!("switchyard_outbox_oldest_due_seconds").set(0.0);
    gauge!("switchyard_store_quarantined_records").set(0.0);
    // Registered without a sample, it shows with zero counts.
    let _ = histogram!("switchyard_delivery_duration_seconds");
}

/// The state the gauges show, read by the scrape.
pub struct Gauges {
    /// Deliveries waiting in the outbox.
    pub outbox_pending: usize,
    /// How long the most overdue delivery has been due (0 when none is).
    pub outbox_oldest_due: Duration,
    /// Jobs waiting for a worker, by queue name.
    pub queues: Vec<(&'static str, usize)>,
    /// Records set aside because they could not be read.
    pub quarantined: usize,
}

/// The text exposition, with the gauges set to `gauges`.
pub fn render(gauges: Gauges) -> String {
    gauge!("switchyard_outbox_pending").set(gauges.outbox_pending as f64);
    gauge!("switchyard_outbox_oldest_due_seconds").set(gauges.outbox_oldest_due.as_secs_f64());
    gauge!("switchyard_store_quarantined_records").set(gauges.quarantined as f64);
    for (queue, depth) in gauges.queues {
        gauge!("switchyard_queue_depth", "queue" => queue).set(depth as f64);
    }
    let mut text = HANDLE
        .get()
        .map(PrometheusHandle::render)
        .unwrap_or_default();
    render_costs(&mut text);
    text
}

/// Series handles kept by their labels. Looking a series up through the
/// recorder allocates and hashes every label on each call; a kept handle
/// is shared and updated without a lock.
type Kept<H> = LazyLock<RwLock<HashMap<String, H>>>;

static HTTP_COUNTS: Kept<Counter> = LazyLock::new(Default::default);
static HTTP_TIMES: Kept<Histogram> = LazyLock::new(Default::default);
static PLUGIN_COUNTS: Kept<Counter> = LazyLock::new(Default::default);
static PLUGIN_TIMES: Kept<Histogram> = LazyLock::new(Default::default);

thread_local! {
    /// The labels being looked up, joined: reused, so a hit allocates nothing.
    static LABELS: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The handle kept in `cache` for `labels`, registered with `register` the
/// first time.
fn kept<H: Clone>(cache: &Kept<H>, labels: std::fmt::Arguments, register: impl FnOnce() -> H) -> H {
    if HANDLE.get().is_none() {
        // No recorder yet: a handle made now would count nowhere for good.
        return register();
    }
    LABELS.with_borrow_mut(|key| {
        key.clear();
        let _ = key.write_fmt(labels);
        let read = cache.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = read.get(key.as_str()) {
            return handle.clone();
        }
        drop(read);
        let mut write = cache.write().unwrap_or_else(PoisonError::into_inner);
        write.entry(key.clone()).or_insert_with(register).clone()
    })
}

/// One HTTP request answered; `route` is the router's template.
pub fn http_request(method: &str, route: &str, status: u16, took: Duration) {
    kept(&HTTP_COUNTS, format_args!("{method}\0{route}\0{status}"), || {
        counter!("switchyard_http_requests_total", "method" => method.to_string(), "route" => route.to_string(), "status" => status.to_string())
    })
    .increment(1);
    kept(&HTTP_TIMES, format_args!("{method}\0{route}"), || {
        histogram!("switchyard_http_request_duration_seconds", "method" => method.to_string(), "route" => route.to_string())
    })
    .record(took.as_secs_f64());
}

/// What a delivery attempt came to.
#[derive(Debug, Clone, Copy)]
pub enum Attempted {
    /// Acknowledged.
    Delivered,
    /// Failed, and due again.
    Retried,
    /// Given up.
    Failed,
    /// Given up, and its webhook disabled (410 Gone).
    Disabled,
}

/// One delivery attempt; `since_event` is from the event's acceptance to
/// now, recorded when the delivery was acknowledged.
pub fn delivery(outcome: Attempted, since_event: Duration) {
    let label = match outcome {
        Attempted::Delivered => "delivered",
        Attempted::Retried => "retried",
        Attempted::Failed => "failed",
        Attempted::Disabled => "disabled",
    };
    // The histogram first: a scrape that counts a delivery sees its time.
    if let Attempted::Delivered = outcome {
        histogram!("switchyard_delivery_duration_seconds").record(since_event.as_secs_f64());
    }
    counter!("switchyard_deliveries_total", "outcome" => label).increment(1);
}

/// Deliveries held back because their webhook's circuit is open.
pub fn held(n: u64) {
    counter!("switchyard_deliveries_held_total", "reason" => "circuit").increment(n);
}

/// A circuit entered `state`.
pub fn circuit_transition(state: &'static str) {
    counter!("switchyard_circuit_transitions_total", "to" => state).increment(1);
}

/// How many circuits this host holds open and half open.
pub fn circuits(open: usize, half_open: usize) {
    gauge!("switchyard_webhook_circuits", "state" => "open").set(open as f64);
    gauge!("switchyard_webhook_circuits", "state" => "half_open").set(half_open as f64);
}

/// A firing an automation's cooldown or rate limit held back.
pub fn skipped(reason: &'static str) {
    counter!("switchyard_executions_skipped_total", "reason" => reason).increment(1);
}

/// One plugin call.
pub fn plugin_call(plugin: &str, kind: &str, failed: bool, took: Duration) {
    let outcome = if failed { "failed" } else { "ok" };
    kept(&PLUGIN_COUNTS, format_args!("{plugin}\0{kind}\0{outcome}"), || {
        counter!("switchyard_plugin_calls_total", "plugin" => plugin.to_string(), "kind" => kind.to_string(), "outcome" => outcome)
    })
    .increment(1);
    kept(&PLUGIN_TIMES, format_args!("{plugin}\0{kind}"), || {
        histogram!("switchyard_plugin_call_duration_seconds", "plugin" => plugin.to_string(), "kind" => kind.to_string())
    })
    .record(took.as_secs_f64());
}

/// How long a job waited for a worker of `queue`.
pub fn queue_wait(queue: &'static str, waited: Duration) {
    histogram!("switchyard_queue_wait_seconds", "queue" => queue).record(waited.as_secs_f64());
}

/// One inference request to `endpoint` (`chat`, `embeddings`,
/// `completions`, `responses`) answered with `status`.
pub fn inference_request(endpoint: &'static str, model: &str, status: u16) {
    counter!("switchyard_inference_requests_total", "endpoint" => endpoint, "model" => model.to_string(), "status" => status.to_string())
        .increment(1);
}

/// The inference series of the models served, at zero, so that they are
/// on the first scrape as every other family's known series are: chat
/// requests answered 200, and both kinds of tokens.
pub fn inference_models_served<'a>(models: impl IntoIterator<Item = &'a str>) {
    for model in models {
        counter!("switchyard_inference_requests_total", "endpoint" => "chat", "model" => model.to_string(), "status" => "200")
            .increment(0);
        for kind in ["prompt", "completion"] {
            counter!("switchyard_inference_tokens_total", "model" => model.to_string(), "kind" => kind)
                .increment(0);
        }
    }
}

/// Spans the trace exporter could not send.
pub fn trace_spans_dropped(n: usize) {
    counter!("switchyard_trace_spans_dropped_total").increment(n as u64);
}

/// A cacheable inference request answered from the cache (`hit`) or not.
pub fn inference_cache(hit: bool) {
    let result = if hit { "hit" } else { "miss" };
    counter!("switchyard_inference_cache_total", "result" => result).increment(1);
}

/// The (prompt, completion) tokens and cost in USD of one finished
/// inference request, billed to `project` (`team/project`, or `~user`).
pub fn inference_used(model: &str, project: &str, (prompt, completion): (u32, u32), usd: f64) {
    counter!("switchyard_inference_tokens_total", "model" => model.to_string(), "kind" => "prompt")
        .increment(prompt.into());
    counter!("switchyard_inference_tokens_total", "model" => model.to_string(), "kind" => "completion")
        .increment(completion.into());
    if usd > 0.0 {
        let mut costs = COSTS.lock().unwrap_or_else(PoisonError::into_inner);
        *costs
            .entry((model.to_string(), project.to_string()))
            .or_default() += usd;
    }
}

/// USD spent by (model, project). The facade's counters count whole
/// numbers, so this family is kept here and written by [`render`].
static COSTS: LazyLock<Mutex<BTreeMap<(String, String), f64>>> = LazyLock::new(Default::default);

/// `switchyard_inference_cost_usd_total` in the text format.
fn render_costs(out: &mut String) {
    let costs = COSTS.lock().unwrap_or_else(PoisonError::into_inner);
    if costs.is_empty() {
        return;
    }
    let name = "switchyard_inference_cost_usd_total";
    let _ = writeln!(
        out,
        "# HELP {name} USD spent on inference at [[inference.prices]], by model and project (team/project, or ~user)."
    );
    let _ = writeln!(out, "# TYPE {name} counter");
    let escape = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    for ((model, project), usd) in costs.iter() {
        let (model, project) = (escape(model), escape(project));
        let _ = writeln!(
            out,
            "{name}{{model=\"{model}\",project=\"{project}\"}} {usd}"
        );
    }
}

/// From a chat request's arrival to its first generated piece.
pub fn time_to_first_token(model: &str, took: Duration) {
    histogram!("switchyard_inference_time_to_first_token_seconds", "model" => model.to_string())
        .record(took.as_secs_f64());
}
