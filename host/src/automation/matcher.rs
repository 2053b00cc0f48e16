//! From event to deliveries: find the automations listening (by index, not by
//! scanning), ask the filter plugin, render the payload with the template
//! plugin, and write executions and deliveries to the outbox in the same
//! transaction that takes the event out of the inbox.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::automations::{Automation, FILTER_PLUGIN};
use super::config::ConfigCache;
use super::outbox::{Delivery, Execution, Status};
use super::throttle::{self, Throttle};
use super::worker::{Caused, Dispatcher};
use crate::domain::seal::Sealer;
use crate::error::{Error, Result};
use crate::ids;
use crate::model::{Event, Scope};
use crate::plugin::Variable;
use crate::plugin::{MetricFired, PluginError, Plugins, Verdict};
use crate::store::Store;
use crate::tasks::{Stage, Tasks};
use crate::traces;
use opentelemetry::KeyValue;
use opentelemetry::context::FutureExt;
use opentelemetry::trace::SpanKind;

/// A run automation fires at most once per run in this long.
pub const RUN_REFIRE_MS: u64 = 24 * 60 * 60 * 1000;

/// Events older than this in the inbox are the sweep's: their action's own
/// request either failed to match them or is gone.
pub const SWEEP_AGE_MS: u64 = 2_000;

/// What to write for one automation that fired.
struct Fired {
    execution: Execution,
    delivery: Option<Delivery>,
    /// The run whose 24-hour allowance this firing takes.
    run: Option<String>,
    /// The automation's cooldown and rate limit.
    throttle: Throttle,
}

/// Matches events to automations and queues their deliveries. Cheap to clone.
#[derive(Clone)]
pub struct Matcher {
    store: Store,
    sealer: Sealer,
    plugins: Arc<Plugins>,
    dispatcher: Dispatcher,
    /// The configuration read for every event, cached (the dispatcher's).
    config: ConfigCache,
    /// Matched events on their way to the outbox (see [`write_loop`]).
    writes: mpsc::UnboundedSender<(Vec<Matched>, Written)>,
    /// Told when events were written to the inbox (see [`Matcher::spawn_sweeper`]).
    written: Arc<tokio::sync::Notify>,
}

/// What matching a batch of events came to.
pub struct Processed {
    /// Events taken out of the inbox (by this call, or before it).
    pub matched: usize,
    /// The deliveries queued, for the dispatcher once durable.
    pub queued: Vec<Delivery>,
    /// Events that stay in the inbox, by id, and why.
    pub left: Vec<(String, Error)>,
}

/// What one sweep of the inbox did.
pub struct Swept {
    /// Events matched.
    pub matched: usize,
    /// Whether events are still waiting that a later sweep should take:
    /// ones too young to sweep, or held back by a full plugin queue or an
    /// unavailable store.
    pub again: bool,
}

/// Where [`write_loop`] answers a batch: the deliveries queued per event,
/// or `None` if the transaction failed.
type Written = oneshot::Sender<Option<Vec<Vec<Delivery>>>>;

/// One event, matched: what to write when it leaves the inbox.
struct Matched {
    event: String,
    at_ms: u64,
    fired: Vec<Fired>,
}

/// Most batches of matched events written in one transaction.
const WRITE_BATCH: usize = 256;

/// Events matched as one job on the plugin queue: a sweep's chunk.
const MATCH_BATCH: usize = 256;

/// Writes matched events as they come, every batch matched while one
/// transaction committed going into the next, so that concurrent actions
/// share a transaction. Answers each batch with the deliveries each of its
/// events queued, or `None` if the transaction failed. Told to stop, it
/// takes no more and ends once it has written what it holds.
async fn write_loop(
    store: Store,
    mut queued: mpsc::UnboundedReceiver<(Vec<Matched>, Written)>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut batch = Vec::new();
    while crate::tasks::recv_many_until(&mut queued, &mut batch, WRITE_BATCH, &stop).await > 0 {
        let sizes: Vec<usize> = batch.iter().map(|(m, _)| m.len()).collect();
        let (matched, answers): (Vec<Vec<Matched>>, Vec<_>) = batch.drain(..).unzip();
        match write_matched(&store, matched.into_iter().flatten().collect()).await {
            Ok(queued) => {
                let mut queued = queued.into_iter();
                for (answer, size) in answers.into_iter().zip(sizes) {
                    let _ = answer.send(Some(queued.by_ref().take(size).collect()));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, events = answers.len(), "writing matched events failed; they stay in the inbox for the sweep");
                for answer in answers {
                    let _ = answer.send(None);
                }
            }
        }
    }
}

/// Takes each event out of the inbox and writes what it fired, in one
/// transaction; an event already taken (by its request, the sweep, or
/// another host) writes nothing. Returns the deliveries queued, per event.
/// The batch's rows go in set-wise: one statement each for the events taken,
/// the executions and the deliveries, whatever the batch's size.
async fn write_matched(store: &Store, matched: Vec<Matched>) -> Result<Vec<Vec<Delivery>>> {
    let decided = |f: &Fired| f.run.is_some() || (f.delivery.is_some() && f.throttle.is_set());
    if !matched.iter().any(|m| m.fired.iter().any(decided)) {
        return write_undecided(store, matched).await;
    }
    let tx = store.begin().await?;
    let ids: Vec<&str> = matched.iter().map(|m| m.event.as_str()).collect();
    let taken = tx.take_events(&ids).await?;
    let (mut executions, mut deliveries) = (Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(matched.len());
    for (m, taken) in matched.into_iter().zip(taken) {
        let mut queued = Vec::new();
        for mut f in m.fired.into_iter().filter(|_| taken) {
            if let Some(run) = &f.run
                && !tx
                    .claim_run_fire((&f.execution.automation, run), m.at_ms, RUN_REFIRE_MS)
                    .await?
            {
                continue;
            }
            if f.delivery.is_some() && f.throttle.is_set() {
                let (limits, at) = (f.throttle, m.at_ms);
                let admit = move |fires: &mut Vec<u64>| throttle::admit(&limits, fires, at);
                if let Some(skipped) = tx.admit_fire(&f.execution.automation, &admit).await? {
                    f.execution.status = Status::Skipped;
                    f.execution.skipped = Some(skipped);
                    f.delivery = None;
                }
            }
            executions.push(f.execution);
            queued.extend(f.delivery);
        }
        deliveries.extend(queued.iter().cloned());
        out.push(queued);
    }
    tx.put_executions(&executions).await?;
    tx.insert_deliveries(&deliveries).await?;
    tx.commit().await?;
    for skipped in executions.iter().filter_map(|e| e.skipped.as_ref()) {
        crate::telemetry::skipped(skipped.reason.as_str());
    }
    Ok(out)
}

/// [`write_matched`] when no firing waits on a decision at write time (a
/// run's once per window, a throttle): one write of the engine's
/// ([`crate::store::Engine::write_fired`]), one statement on PostgreSQL.
async fn write_undecided(store: &Store, matched: Vec<Matched>) -> Result<Vec<Vec<Delivery>>> {
    let ids: Vec<&str> = matched.iter().map(|m| m.event.as_str()).collect();
    let mut fired = Vec::new();
    let mut queued = Vec::with_capacity(matched.len());
    for (n, m) in matched.iter().enumerate() {
        let deliveries: Vec<Delivery> = m.fired.iter().filter_map(|f| f.delivery.clone()).collect();
        fired.extend(
            m.fired
                .iter()
                .map(|f| (n, f.execution.clone(), f.delivery.clone())),
        );
        queued.push(deliveries);
    }
    let taken = store.write_fired(&ids, &fired).await?;
    Ok(queued
        .into_iter()
        .zip(taken)
        .map(|(deliveries, taken)| if taken { deliveries } else { Vec::new() })
        .collect())
}

impl Matcher {
    /// A matcher that hands its deliveries to `dispatcher`, and matches the
    /// operational events the dispatcher wrote (`caused`) as they come.
    /// Its loops run on `tasks` as [`Stage::Matching`].
    pub fn start(
        store: Store,
        sealer: Sealer,
        plugins: Arc<Plugins>,
        (dispatcher, caused): (Dispatcher, Caused),
        tasks: &Tasks,
    ) -> Matcher {
        let (writes, queued) = mpsc::unbounded_channel();
        let writer = store.clone();
        tasks.spawn_draining(Stage::Matching, |stop| write_loop(writer, queued, stop));
        let matcher = Matcher {
            config: dispatcher.config().clone(),
            store,
            sealer,
            plugins,
            dispatcher,
            writes,
            written: Arc::default(),
        };
        tasks.spawn(Stage::Matching, matcher.clone().match_caused(caused));
        matcher
    }

    /// Matches the operational events the dispatcher wrote; what fails (or
    /// is still on its way at shutdown) is in the inbox for the sweep.
    async fn match_caused(self, mut caused: Caused) {
        use crate::domain::Matching;
        while let Some(events) = caused.recv().await {
            if let Err(e) = self.match_committed(&events).await {
                tracing::warn!(error = %e, "matching operational events failed; they stay in the inbox");
            }
        }
    }

    /// Matches `events` and queues their deliveries; each event leaves the
    /// inbox in the same transaction, which writes nothing if it already
    /// left, so an event matched twice (by its request and by the sweep, or
    /// by two hosts) fires once. Returns the deliveries queued (for the
    /// dispatcher once they are durable) and the events that stay in the
    /// inbox, with why; an error leaves every event there.
    ///
    /// The batch is one job on the plugin queue, one place in its backlog
    /// and one worker however many events it holds: a job per plugin call
    /// filled the backlog under load and left events to the sweep.
    pub async fn process(&self, events: &[Event]) -> Result<Processed> {
        let matched = self
            .plugins
            .batch(async {
                let mut matched = Vec::with_capacity(events.len());
                for event in events {
                    matched.push(self.match_event(event).await);
                }
                matched
            })
            .await
            .map_err(|e| Error::Unavailable(e.to_string()))?;
        let (mut to_write, mut left) = (Vec::new(), Vec::new());
        for (event, m) in events.iter().zip(matched) {
            match m {
                Ok(m) => to_write.push(m),
                Err(e) => left.push((event.id.clone(), e)),
            }
        }
        let matched = to_write.len();
        let queued = self.write(to_write).await?.into_iter().flatten().collect();
        Ok(Processed {
            matched,
            queued,
            left,
        })
    }

    /// What `event` fires: its automations, filtered and rendered.
    async fn match_event(&self, event: &Event) -> Result<Matched> {
        let mut fired = Vec::new();
        // The event's scope, and its collection's (no Vec per event: this
        // is the hot path).
        let in_scope = self
            .config
            .triggered(&event.scope, event.event_type)
            .await?;
        let in_collection = match event.collection() {
            Some(name) => {
                let scope = Scope::collection(&event.scope, name);
                Some(self.config.triggered(&scope, event.event_type).await?)
            }
            None => None,
        };
        let on_collection = in_collection.iter().flat_map(|a| a.iter());
        // In the trace of the request that caused the event.
        let span = traces::on().then(|| {
            let parent = traces::continued(event.trace.as_deref());
            let attrs = vec![
                KeyValue::new("switchyard.event.id", event.id.clone()),
                KeyValue::new("switchyard.event.type", event.event_type.as_str()),
            ];
            let name = format!("event {}", event.event_type.as_str());
            traces::start_span(name, SpanKind::Consumer, &parent, attrs)
        });
        for automation in in_scope.iter().chain(on_collection) {
            let firing = self.fire(automation, event);
            let fires = match &span {
                Some(cx) => firing.with_context(cx.clone()).await?,
                None => firing.await?,
            };
            if let Some(f) = fires {
                fired.push(f);
            }
        }
        if let Some(cx) = &span {
            traces::end(
                cx,
                vec![KeyValue::new("switchyard.fired", fired.len() as i64)],
                None,
            );
        }
        Ok(Matched {
            event: event.id.clone(),
            at_ms: event.at_ms,
            fired,
        })
    }

    /// Writes matched events through [`write_loop`]; the deliveries each queued.
    async fn write(&self, matched: Vec<Matched>) -> Result<Vec<Vec<Delivery>>> {
        if matched.is_empty() {
            return Ok(Vec::new());
        }
        let (answer, written) = oneshot::channel();
        let unwritten = || Error::Unavailable("the outbox could not be written".into());
        self.writes
            .send((matched, answer))
            .map_err(|_| unwritten())?;
        written.await.ok().flatten().ok_or_else(unwritten)
    }

    /// Matches every event in the inbox older than `min_age_ms`, oldest
    /// first: at start, everything a crash left; afterwards, events whose
    /// matching hit a full plugin queue.
    pub async fn sweep_inbox(&self, min_age_ms: u64) -> Result<Swept> {
        let events = self.store.inbox().await?;
        let now = ids::now_ms();
        let waiting = events.len();
        let old: Vec<Event> = events
            .into_iter()
            .filter(|e| now.saturating_sub(e.at_ms) >= min_age_ms)
            .collect();
        let mut again = old.len() < waiting;
        let (mut matched, mut deliveries) = (0, Vec::new());
        for chunk in old.chunks(MATCH_BATCH) {
            let processed = match self.process(chunk).await {
                Ok(processed) => processed,
                Err(e) => {
                    tracing::warn!(events = old.len() - matched, error = %e, "events left in the inbox for the next sweep");
                    again = true;
                    break;
                }
            };
            matched += processed.matched;
            deliveries.extend(processed.queued);
            // A store or queue that refuses for now holds the later chunks
            // back too, in order; anything else is the event's own.
            let mut held = false;
            for (event, e) in processed.left {
                if e.is_transient() {
                    tracing::warn!(event = %event, error = %e, "event left in the inbox for the next sweep");
                    held = true;
                } else {
                    tracing::error!(event = %event, error = %e, "matching an event failed; it stays in the inbox");
                }
            }
            if held {
                again = true;
                break;
            }
        }
        self.dispatcher.send_when_durable(deliveries).await?;
        Ok(Swept { matched, again })
    }

    /// Sweeps the inbox `interval` after events were written to it, and
    /// again while events wait there; otherwise every
    /// [`super::SAFETY_POLL`], for what another host left when it stopped.
    /// An action's own request takes its events, so a sweep mostly finds
    /// nothing, and an idle host does not read the inbox at all.
    pub fn spawn_sweeper(&self, tasks: &Tasks, interval: std::time::Duration) {
        let this = self.clone();
        tasks.spawn(Stage::Intake, async move {
            loop {
                tokio::select! {
                    () = this.written.notified() => {}
                    () = tokio::time::sleep(super::SAFETY_POLL) => {}
                }
                loop {
                    tokio::time::sleep(interval).await;
                    match this.sweep_inbox(SWEEP_AGE_MS).await {
                        Ok(swept) if !swept.again => break,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::error!(error = %e, "sweeping the event inbox failed");
                        }
                    }
                }
            }
        });
    }
}

#[async_trait::async_trait]
impl crate::domain::Matching for Matcher {
    /// Matches the events an action just wrote, makes the outcome durable,
    /// and hands the deliveries to the dispatcher. An event that cannot be
    /// matched now (the plugin queue is full) stays in the inbox for the
    /// sweep: the action has happened, and its event is not lost.
    async fn match_committed(&self, events: &[Event]) -> Result<()> {
        // Whatever happens below (a full queue, a request dropped midway),
        // the sweep looks in a moment.
        self.written.notify_one();
        let deliveries = match self.process(events).await {
            Ok(processed) => {
                for (event, e) in processed.left {
                    tracing::warn!(event = %event, error = %e, "event left in the inbox for the sweep");
                }
                processed.queued
            }
            Err(e) => {
                tracing::warn!(events = events.len(), error = %e, "events left in the inbox for the sweep");
                Vec::new()
            }
        };
        // Durable either way: the action's events are in the inbox.
        self.dispatcher.send_when_durable(deliveries).await
    }
}

/// Why a firing stopped short of its delivery.
enum Stop {
    /// For now (a full queue, a store that failed): the event stays in
    /// the inbox.
    Held(Error),
    /// For good: the execution is written as failed, saying why.
    Failed(String),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Held(e)
    }
}

/// A plugin's failure in step `what`: transient ones hold the event.
fn plugin_stop(what: &str) -> impl FnOnce(PluginError) -> Stop + '_ {
    move |e| match e.is_transient() {
        true => Stop::Held(e.into()),
        false => Stop::Failed(format!("{what} failed: {e}")),
    }
}

impl Matcher {
    /// Whether `automation` fires for `event`, and what to write if it
    /// does: filtered, the webhook opened, the payload rendered and sealed.
    async fn fire(&self, automation: &Automation, event: &Event) -> Result<Option<Fired>> {
        if !automation.event.accepts(event) {
            return Ok(None);
        }
        let name = || {
            vec![KeyValue::new(
                "switchyard.automation",
                automation.name.clone(),
            )]
        };
        let Some(cx) = traces::child("automation.match", name) else {
            return self.filter_and_render(automation, event).await;
        };
        let fired = self
            .filter_and_render(automation, event)
            .with_context(cx.clone())
            .await;
        let done = vec![KeyValue::new(
            "switchyard.fired",
            matches!(&fired, Ok(Some(f)) if f.delivery.is_some()),
        )];
        let failed = fired.as_ref().err().map(ToString::to_string);
        traces::end(&cx, done, failed.as_deref());
        fired
    }

    /// [`Self::fire`]: the filter, then the payload.
    async fn filter_and_render(
        &self,
        automation: &Automation,
        event: &Event,
    ) -> Result<Option<Fired>> {
        // Made once the filter has spoken: most events match no filter, and
        // need neither ids nor a copy of the event.
        let pending = || {
            let ids = (
                ids::ordered_id().into(),
                format!("dlv_{}", ids::random_hex(12)).into(),
            );
            let (handle, webhook) = (automation.handle(), automation.webhook.clone());
            Execution::pending(ids, handle, webhook, event.clone(), ids::now_ms())
        };
        let filtering = traces::child("automation.filter", Vec::new);
        let verdict = self.filter(automation, event).await;
        if let Some(cx) = &filtering {
            let matched = matches!(verdict, Ok(Some(_)));
            traces::end(cx, vec![KeyValue::new("switchyard.matched", matched)], None);
        }
        let fired = match verdict {
            Ok(Some(fired)) => fired,
            Ok(None) => return Ok(None),
            Err(stop) => return stopped(pending(), stop),
        };
        let execution = pending();
        let rendering = traces::child("automation.render", Vec::new);
        let rendered = self.render(automation, event, fired.as_ref()).await;
        if let Some(cx) = &rendering {
            traces::end(cx, Vec::new(), None);
        }
        match rendered {
            Ok(body) => Ok(Some(self.seal(automation, event, execution, body)?)),
            Err(stop) => stopped(execution, stop),
        }
    }

    /// The filter plugin's verdict: `None` if the event does not match,
    /// else the values that made it fire (for `${fired_*}`).
    async fn filter(
        &self,
        automation: &Automation,
        event: &Event,
    ) -> Result<Option<Option<MetricFired>>, Stop> {
        let team = &automation.webhook.team;
        let view = event.filter_view();
        let filter = automation.event.filter();
        let verdict = (self.plugins)
            .matches_in_batch(FILTER_PLUGIN, team, &filter, &view)
            .await
            .map_err(plugin_stop("the filter"))?;
        Ok(match verdict {
            Verdict::Matched(fired) => Some(fired),
            Verdict::NoMatch => None,
        })
    }

    /// The payload, with the secrets that went into it: the webhook's
    /// secrets open (a disabled webhook's delivery is held, not lost), the
    /// template's references carried.
    async fn render(
        &self,
        automation: &Automation,
        event: &Event,
        fired: Option<&MetricFired>,
    ) -> Result<Rendered, Stop> {
        let (team, name) = (&automation.webhook.team, &automation.webhook.name);
        let opened =
            (self.config.webhook(team, name).await).map_err(|e| Stop::Failed(e.to_string()))?;
        let secrets = &opened.secrets.by_name;
        let template = match self.config.template(automation, secrets).await?.as_deref() {
            Some(Ok(template)) => Some(template.clone()),
            Some(Err(uncarried)) => return Err(Stop::Failed(uncarried.to_string())),
            None => None,
        };
        let variables = super::variables::of(event, fired);
        let body = (self
            .run_template(automation, template, variables, secrets)
            .await)
            .map_err(plugin_stop("rendering the payload"))?;
        Ok(Rendered {
            redacted: redact(&body, secrets),
            body,
            fifo: opened.webhook.ordering == crate::model::Ordering::Fifo,
        })
    }

    /// The firing to write: the body sealed under the delivery id into the
    /// execution (for replays) and its first delivery.
    fn seal(
        &self,
        automation: &Automation,
        event: &Event,
        mut execution: Execution,
        rendered: Rendered,
    ) -> Result<Fired> {
        let sealed =
            (self.sealer).seal(execution.delivery_id.as_bytes(), rendered.body.as_bytes())?;
        let sealed = crate::model::SealedBody::new(sealed);
        let mut delivery = Delivery::first(&execution, sealed.clone(), ids::now_ms(), event.at_ms);
        // Its attempts continue the trace under this matching.
        delivery.trace = traces::current();
        if rendered.fifo {
            // The event's place, then the firing's: the order events
            // were accepted, then automations fired.
            delivery = delivery.in_line(format!("{}/{}", event.id, execution.id));
        }
        execution.payload = Some(rendered.redacted);
        execution.body_sealed = Some(sealed);
        Ok(Fired {
            execution,
            delivery: Some(delivery),
            run: event.run.as_ref().map(|r| r.id.clone()),
            throttle: automation.throttle(),
        })
    }

    /// The payload: the automation's template rendered by its plugin, or, with no
    /// template, every variable as one JSON object.
    async fn run_template(
        &self,
        automation: &Automation,
        template: Option<String>,
        variables: Vec<(&'static str, String)>,
        secrets: &BTreeMap<String, String>,
    ) -> std::result::Result<String, PluginError> {
        let Some(template) = template else {
            return Ok(object_text(&variables));
        };
        let mut vars: Vec<Variable> = variables
            .into_iter()
            .map(|(name, value)| Variable {
                name: name.to_string(),
                value,
            })
            .collect();
        vars.extend(secrets.iter().map(|(name, value)| Variable {
            name: name.clone(),
            value: Value::String(value.clone()).to_string(),
        }));
        self.plugins
            .render_in_batch(
                &automation.template_plugin,
                &automation.webhook.team,
                template,
                vars,
            )
            .await
    }
}

/// A payload rendered, and as the history shows it.
struct Rendered {
    body: String,
    /// With every secret value replaced by `[REDACTED]`.
    redacted: String,
    /// Its webhook is FIFO.
    fifo: bool,
}

/// What a firing that stopped short comes to: a failed execution, or the
/// event held in the inbox.
fn stopped(execution: Execution, stop: Stop) -> Result<Option<Fired>> {
    match stop {
        Stop::Held(e) => Err(e),
        Stop::Failed(why) => Ok(Some(Fired {
            execution: execution.failed(why),
            delivery: None,
            run: None,
            throttle: Throttle::default(),
        })),
    }
}

/// A JSON object of `fields`, each value already JSON text.
fn object_text(fields: &[(&str, String)]) -> String {
    let mut out = String::from("{");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(*name).to_string());
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    out
}

/// `body` with every secret value (as it appears inside a JSON string)
/// replaced by `[REDACTED]`, for the history.
fn redact(body: &str, secrets: &BTreeMap<String, String>) -> String {
    let mut out = body.to_string();
    for value in secrets.values().filter(|v| !v.is_empty()) {
        let quoted = Value::from(value.as_str()).to_string();
        let escaped = &quoted[1..quoted.len() - 1];
        // Most bodies carry no secret: look before copying.
        if out.contains(escaped) {
            out = out.replace(escaped, "[REDACTED]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_without_a_template_are_one_object_as_serde_json_writes_it() {
        let fields = [("a", "1".to_string()), ("b", r#""x\"y""#.to_string())];
        let expected = serde_json::json!({"a": 1, "b": "x\"y"}).to_string();
        assert_eq!(object_text(&fields), expected);
        assert_eq!(object_text(&[]), "{}");
    }

    #[test]
    fn redaction_catches_escaped_values() {
        let secrets = BTreeMap::from([("T".to_string(), "a\"b".to_string())]);
        assert_eq!(
            redact(r#"{"x":"a\"b!"}"#, &secrets),
            r#"{"x":"[REDACTED]!"}"#
        );
    }
}
