//! The dispatcher: sends deliveries from the outbox, records every attempt,
//! and reschedules failures on the retry schedule.
//!
//! New deliveries are handed over directly by the matcher (the fast path);
//! a scan of the outbox every `delivery.poll_interval_ms` picks up retries
//! that fall due and everything a previous process left behind. Sends are
//! bounded overall and per webhook, so one slow endpoint cannot take every
//! slot. A delivery in flight is never started twice by this process; after
//! a crash it may be sent again, with the same delivery id.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::context::FutureExt;
use opentelemetry::trace::SpanKind;
use tokio::sync::{Notify, Semaphore, mpsc};

use super::SAFETY_POLL;
use super::breaker::{Breakers, Change, Changed, Gate, PROBE_FAILED};
use super::config::{ConfigCache, Opened};
use super::send::{Answer, Failure, Outgoing, Sender};
use super::webhooks;
use crate::cfg::DeliveryConfig;
use crate::domain::seal::Sealer;
use crate::error::Result;
use crate::ids;
use crate::model::{
    Attempt, Circuit, Delivery, DeliveryId, Event, EventType, Health, Scope, Status, Webhook,
    WebhookEventRef, WebhookRef,
};
use crate::store::{AttemptFor, Store};
use crate::tasks::{Stage, Tasks};
use crate::telemetry;
use crate::traces;

/// Operational events the dispatcher wrote to the inbox, on their way to
/// matching: a channel, so that the dispatcher needs nothing of the
/// matcher. Whatever does not get through is in the inbox for the sweep.
pub type Caused = mpsc::UnboundedReceiver<Vec<Event>>;

/// Most deliveries one scan of the outbox takes up.
const SCAN_BATCH: usize = 1000;

/// Most deliveries in flight (sending or waiting for a slot) before a scan
/// takes up more: a large backlog waits in the outbox, not in memory.
const MAX_IN_FLIGHT: usize = 4 * SCAN_BATCH;

/// What one attempt came to.
enum Judgement {
    /// Acknowledged.
    Done,
    /// Try again, no sooner than the given delay (from `Retry-After`).
    Retry(Option<Duration>),
    /// Give up.
    Fail,
    /// Give up and disable the webhook (410 Gone).
    Gone,
}

/// Sends deliveries. Cheap to clone.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    config: ConfigCache,
    sealer: Sealer,
    sender: Sender,
    cfg: DeliveryConfig,
    wake: Notify,
    in_flight: Mutex<HashSet<DeliveryId>>,
    /// A scan stopped at [`MAX_IN_FLIGHT`]: wake it when there is room.
    starved: std::sync::atomic::AtomicBool,
    /// The scan loop rests with nothing in flight: wake it when a send is
    /// taken up (see [`scan_loop`]).
    resting: std::sync::atomic::AtomicBool,
    /// Attempts on their way to the store (see [`record_loop`]).
    records: mpsc::UnboundedSender<Outcome>,
    slots: Arc<Semaphore>,
    endpoints: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Each webhook's circuit breaker, as this host sees it.
    breakers: Breakers,
    /// Deliveries held while their webhook's circuit is open, by webhook
    /// (at most [`MAX_REMEMBERED`] each): sent as soon as it closes, not
    /// at the time they were held to.
    held: Mutex<HashMap<String, HashMap<DeliveryId, Delivery>>>,
    /// Held deliveries whose circuit closed, for the scan loop to send.
    released: Mutex<Vec<Delivery>>,
    /// Where the operational events this dispatcher wrote go (see [`Caused`]).
    caused: mpsc::UnboundedSender<Vec<Event>>,
    /// The host's loops: the scan and the sends are [`Stage::Sending`],
    /// writing what they came to is [`Stage::Recording`].
    tasks: Tasks,
}

/// Most held deliveries remembered per webhook; the rest go when due.
const MAX_REMEMBERED: usize = 10_000;

/// How long a disabled webhook's delivery is held before it is looked at
/// again; saving the webhook sends it at once.
const DISABLED_RECHECK_MS: u64 = 60 * 60 * 1000;

impl Dispatcher {
    /// Starts the dispatcher's scan and record loops on `tasks`; returns it
    /// with the operational events it will write, for matching.
    pub fn start(
        store: Store,
        sealer: Sealer,
        sender: Sender,
        cfg: DeliveryConfig,
        tasks: &Tasks,
    ) -> (Dispatcher, Caused) {
        let (records, queued) = mpsc::unbounded_channel();
        let (caused, events) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            config: ConfigCache::new(store.clone(), sealer.clone()),
            records,
            slots: Arc::new(Semaphore::new(cfg.concurrency.max(1))),
            store,
            sealer,
            sender,
            cfg,
            wake: Notify::new(),
            in_flight: Mutex::new(HashSet::new()),
            starved: Default::default(),
            resting: Default::default(),
            endpoints: Mutex::new(HashMap::new()),
            breakers: Breakers::default(),
            held: Mutex::default(),
            released: Mutex::default(),
            caused,
            tasks: tasks.clone(),
        });
        tasks.spawn(Stage::Sending, scan_loop(inner.clone()));
        let weak = Arc::downgrade(&inner);
        tasks.spawn_draining(Stage::Recording, |stop| record_loop(weak, queued, stop));
        (Dispatcher { inner }, events)
    }

    /// Sends deliveries just queued (by the matcher, or a replay) once
    /// every write before the call is durable: this host holds them, and
    /// sends them at once rather than at the next scan.
    pub async fn send_when_durable(&self, deliveries: Vec<Delivery>) -> Result<()> {
        if let Err(e) = self.inner.store.durable().await {
            // They stay in the outbox, for the scan.
            self.inner.wake.notify_one();
            return Err(e.into());
        }
        let mut in_line = false;
        for delivery in deliveries {
            match delivery.fifo {
                // Its turn comes from the outbox's order: the scan's.
                Some(_) => in_line = true,
                None => self.inner.clone().submit(delivery),
            }
        }
        if in_line {
            self.inner.wake.notify_one();
        }
        Ok(())
    }

    /// The configuration the delivery path reads, cached; the matcher
    /// shares it.
    pub fn config(&self) -> &ConfigCache {
        &self.inner.config
    }

    /// Stops sending: the scan ends, what has not started stays in the
    /// outbox, and the sends under way finish and hand their attempts to
    /// the recorder, until `until`. Returns how many sends were still under
    /// way then (those go again after a restart).
    pub async fn stop(&self, until: tokio::time::Instant) -> usize {
        let tasks = &self.inner.tasks;
        if tokio::time::timeout_at(until, tasks.stop(Stage::Sending))
            .await
            .is_err()
        {
            return tasks.running(Stage::Sending);
        }
        0
    }

    /// A webhook's health (its circuit, since when it fails): this host's
    /// view once it has sent to it, else what the store holds (what another
    /// host, or this one before a restart, last wrote).
    pub async fn health(&self, team: &str, name: &str) -> Result<Health> {
        let key = breaker_key(team, name);
        if self.inner.breakers.knows(&key) {
            return Ok(self.inner.breakers.health(&key));
        }
        let stored = self.inner.store.health(team, name).await?;
        Ok(stored.unwrap_or(Health {
            circuit: Circuit::Closed,
            failing_since_ms: None,
        }))
    }

    /// Looks at the outbox now: a webhook saved may have made deliveries
    /// due (other hosts find them at their next scan).
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }
}

fn breaker_key(team: &str, name: &str) -> String {
    format!("{team}/{name}")
}

/// The webhook a send went to, as its operational events name it.
#[derive(Clone, Copy)]
struct About<'a> {
    webhook: &'a WebhookRef,
    url: &'a str,
    /// Whether what happens to it causes events: not for a delivery an
    /// operational event caused, so that a failing alert webhook cannot
    /// feed on its own failures.
    loud: bool,
}

/// An operational event about a team's webhook.
fn operational(event_type: EventType, about: About<'_>, reason: &str, attempts: u32) -> Event {
    let About { webhook, url, .. } = about;
    Event {
        id: ids::ordered_id(),
        event_type,
        scope: Scope::Team {
            team: webhook.team.clone(),
        },
        author: "switchyard".into(),
        at_ms: ids::now_ms(),
        artifact: None,
        alias: None,
        previous_version_string: None,
        tag: None,
        run: None,
        webhook: Some(WebhookEventRef {
            name: webhook.name.clone(),
            url: url.to_string(),
            failure_reason: reason.to_string(),
            attempts,
        }),
        trace: crate::traces::current(),
    }
}

/// Scans the outbox for what falls due. While sends are in flight, at
/// least every poll interval: one may end unsent (its webhook had no free
/// slot) and wait for the next scan. Otherwise the loop rests until the
/// next delivery falls due, a send is taken up (see [`Inner::submit`]), or
/// [`SAFETY_POLL`] passes; on a shared store, no longer than half a lease,
/// since another host's deliveries become this host's when their lease
/// runs out. An idle host does not read the outbox.
async fn scan_loop(inner: Arc<Inner>) {
    let poll = Duration::from_millis(inner.cfg.poll_interval_ms.max(10));
    let rest = inner
        .store
        .lease()
        .map_or(SAFETY_POLL, |lease| (lease / 2).min(SAFETY_POLL));
    loop {
        // Set before the scan looks at what is in flight: a send taken up
        // after that sees it, and wakes the loop.
        inner.resting.store(true, Ordering::SeqCst);
        let next_due = match inner.scan().await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(error = %e, "scanning the outbox failed");
                Some(ids::now_ms() + poll.as_millis() as u64)
            }
        };
        let busy = inner.in_flight_count() > 0;
        if busy {
            inner.resting.store(false, Ordering::SeqCst);
        }
        let most = if busy { poll } else { rest };
        let wait = next_due
            .map(|due| Duration::from_millis(due.saturating_sub(ids::now_ms())))
            .map_or(most, |until| until.min(most));
        tokio::select! {
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Where a delivery taken up for sending stands when its task ends.
enum Sent {
    /// Its attempt is with [`record_loop`], which takes it out of flight.
    Recording,
    /// It was not sent (no slot, or no longer waiting): out of flight now.
    Not,
}

/// An attempt, ready to write.
struct Outcome {
    delivery: Delivery,
    rescheduled: Option<Delivery>,
    status: Status,
    error: Option<String>,
    /// `None` for a delivery held back unsent (its circuit is open).
    attempt: Option<Attempt>,
    /// What the metrics count once it is written.
    counted: Option<(telemetry::Attempted, Duration)>,
    /// The event it caused (`DELIVERY_EXHAUSTED`), written with it.
    caused: Option<Event>,
}

/// Most attempts written in one transaction.
const RECORD_BATCH: usize = 256;

/// Writes attempts as they come, every attempt that arrived while one
/// transaction committed going into the next: under load, one transaction
/// (and on PostgreSQL one commit) records many deliveries. A delivery
/// stays in flight until its attempt is written (or failed to be), so a
/// scan cannot send it again meanwhile; its send task is long gone, and
/// nobody waits for the write but the batch.
///
/// Told to stop, it takes no more attempts and ends once it has written
/// those it holds.
async fn record_loop(
    inner: std::sync::Weak<Inner>,
    mut queued: mpsc::UnboundedReceiver<Outcome>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut batch = Vec::new();
    while crate::tasks::recv_many_until(&mut queued, &mut batch, RECORD_BATCH, &stop).await > 0 {
        let Some(inner) = inner.upgrade() else { return };
        let written = match write_outcomes(&inner.store, &batch).await {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, attempts = batch.len(), "recording delivery attempts failed; their deliveries stay in the outbox");
                // For the scan, which sends them again.
                inner.wake.notify_one();
                false
            }
        };
        // A FIFO delivery that left makes way for the next in its line.
        let mut rescheduled = batch.iter().any(|o| o.delivery.fifo.is_some());
        if written {
            let caused: Vec<Event> = batch.iter().filter_map(|o| o.caused.clone()).collect();
            inner.dispatch_events(caused);
            let mut held = 0;
            for outcome in &batch {
                // Counted once recorded, never before: the outbox has lost
                // the delivery by the time a counter shows it (a scrape
                // reads its outbox gauges a moment before the counters).
                match outcome.counted {
                    Some((what, since_event)) => telemetry::delivery(what, since_event),
                    None => held += 1,
                }
                rescheduled |= outcome.rescheduled.is_some();
            }
            if held > 0 {
                telemetry::held(held);
            }
        }
        inner.landed(batch.drain(..).map(|o| o.delivery.id));
        if rescheduled {
            inner.wake.notify_one();
        }
    }
}

/// The executions' history, and each delivery removed or rescheduled, at
/// once (`Engine::write_outcomes`: one statement on PostgreSQL).
async fn write_outcomes(store: &Store, batch: &[Outcome]) -> Result<()> {
    let finished: Vec<_> = batch
        .iter()
        .map(|o| (&o.delivery, o.rescheduled.as_ref()))
        .collect();
    let attempts: Vec<_> = batch
        .iter()
        .filter_map(|o| {
            Some(AttemptFor {
                automation: &o.delivery.automation,
                execution_id: &o.delivery.execution_id,
                status: o.status,
                error: o.error.as_deref(),
                attempt: o.attempt.as_ref()?,
            })
        })
        .collect();
    let caused: Vec<Event> = batch.iter().filter_map(|o| o.caused.clone()).collect();
    Ok(store.write_outcomes(&finished, &attempts, &caused).await?)
}

impl Inner {
    /// Submits every due delivery not already in flight; returns when the
    /// next one falls due. Deliveries in flight are skipped unread: under
    /// load most of the outbox is in flight, handed over by the matcher.
    async fn scan(self: &Arc<Self>) -> Result<Option<u64>> {
        let room = MAX_IN_FLIGHT.saturating_sub(self.in_flight_count());
        if room == 0 {
            self.starved.store(true, Ordering::SeqCst);
            return Ok(None);
        }
        // Held deliveries whose circuit closed: still waiting as they were
        // held (sent meanwhile, they are gone), they go now.
        let released =
            std::mem::take(&mut *self.released.lock().unwrap_or_else(|p| p.into_inner()));
        for delivery in released {
            if self.store.delivery_waits(&delivery).await? {
                self.clone().submit(delivery);
            }
        }
        let in_flight = |id: &str| self.is_in_flight(id);
        let (due, next) = self
            .store
            .due_deliveries(ids::now_ms(), room.min(SCAN_BATCH), &in_flight)
            .await?;
        for delivery in due {
            self.clone().submit(delivery);
        }
        Ok(next)
    }

    fn in_flight_count(&self) -> usize {
        self.in_flight.lock().map_or(0, |s| s.len())
    }

    fn is_in_flight(&self, id: &str) -> bool {
        self.in_flight.lock().is_ok_and(|s| s.contains(id))
    }

    fn submit(self: Arc<Self>, delivery: Delivery) {
        if self.tasks.stopping(Stage::Sending) {
            return; // it stays in the outbox
        }
        if let Ok(mut set) = self.in_flight.lock()
            && !set.insert(delivery.id.clone())
        {
            return;
        }
        if self.resting.swap(false, Ordering::SeqCst) {
            self.wake.notify_one();
        }
        // Not cancelled when sending stops: a send under way finishes,
        // and its stop waits for it (within the grace period).
        let tasks = self.tasks.clone();
        tasks.spawn_draining(Stage::Sending, |_| async move {
            let id = delivery.id.clone();
            match self.deliver_holding(delivery).await {
                Ok(Sent::Recording) => {}
                Ok(Sent::Not) => self.landed([id]),
                Err(e) => {
                    tracing::error!(delivery = %id, error = %e, "recording a delivery attempt failed");
                    self.landed([id]);
                }
            }
        });
    }

    /// Takes deliveries out of flight once their attempt is recorded (or
    /// they were not sent), and wakes a starved scan when there is room.
    fn landed(&self, ids: impl IntoIterator<Item = DeliveryId>) {
        let left = self.in_flight.lock().map_or(0, |mut set| {
            for id in ids {
                set.remove(&id);
            }
            set.len()
        });
        if left < MAX_IN_FLIGHT / 2 && self.starved.swap(false, Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    fn endpoint_slots(&self, webhook: &WebhookRef) -> Arc<Semaphore> {
        let key = format!("{}/{}", webhook.team, webhook.name);
        let mut map = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key)
            .or_insert_with(|| Arc::new(Semaphore::new(self.cfg.per_webhook.max(1))))
            .clone()
    }

    /// [`Inner::deliver`], renewing this host's lease on the delivery while
    /// it waits and sends, so no other host takes it over meanwhile.
    async fn deliver_holding(&self, delivery: Delivery) -> Result<Sent> {
        let Some(lease) = self.store.lease() else {
            return self.deliver(delivery).await;
        };
        let held = delivery.clone();
        let send = self.deliver(delivery);
        tokio::pin!(send);
        loop {
            tokio::select! {
                done = &mut send => return done,
                () = tokio::time::sleep(lease / 3) => {
                    if let Err(e) = self.store.renew_lease(&held).await {
                        tracing::warn!(delivery = %held.id, error = %e, "renewing a delivery's lease failed");
                    }
                }
            }
        }
    }

    async fn deliver(&self, delivery: Delivery) -> Result<Sent> {
        let endpoint = self.endpoint_slots(&delivery.webhook);
        let Ok(_endpoint) = endpoint.acquire().await else {
            return Ok(Sent::Not);
        };
        // On a store without leases, a scan may have read this delivery just
        // before its last attempt was recorded; once recorded, its key is
        // gone (or moved), so skip. With leases (PostgreSQL) a scan claims
        // only what no live lease holds, and this host holds what it sends,
        // so the check would cost a round trip per delivery for nothing.
        if self.store.lease().is_none() && !self.store.delivery_waits(&delivery).await? {
            return Ok(Sent::Not);
        }
        let (team, name) = (&delivery.webhook.team, &delivery.webhook.name);
        let opened = self.config.webhook(team, name).await;
        let webhook = opened.as_ref().ok().map(|o| &o.webhook);
        if webhook.is_some_and(|w| w.disabled_reason.is_some()) {
            // Until it is saved again, which releases it.
            return self.hold(None, delivery, ids::now_ms() + DISABLED_RECHECK_MS);
        }
        let settings =
            (webhook.and_then(|w| w.circuit_breaker)).unwrap_or(self.cfg.circuit_breaker);
        let key = breaker_key(team, name);
        let gate = self.gate(&key, &delivery.webhook, &settings).await;
        if let Gate::Hold(until_ms) = gate {
            return self.hold(Some(&key), delivery, until_ms);
        }
        if let Some(rate) = webhook.and_then(|w| w.max_per_second) {
            self.pace(&delivery.webhook, rate).await?;
        }
        let Ok(_slot) = self.slots.acquire().await else {
            return Ok(Sent::Not);
        };
        if self.tasks.stopping(Stage::Sending) {
            return Ok(Sent::Not);
        }
        let (verdict, attempt) = self.attempt(&delivery, opened.as_deref()).await;
        // The receiver failing (no answer, 408, 429, 5xx) counts against
        // its circuit; a refusal of ours or a 4xx does not.
        let failed = matches!(verdict, Judgement::Retry(_));
        let probe = gate == Gate::Probe;
        let now = ids::now_ms();
        let changed = (self.breakers).record(&key, &settings, failed, probe, now);
        let url = webhook.map_or_else(String::new, |w| w.url.clone());
        // A delivery an operational event caused causes none itself, so
        // that a failing alert webhook cannot feed on its own failures.
        let quiet = matches!(delivery.automation.scope, Scope::Team { .. });
        let target = delivery.webhook.clone();
        let about = About {
            webhook: &target,
            url: &url,
            loud: !quiet,
        };
        self.health_changed(about, changed);
        if matches!(verdict, Judgement::Gone) {
            let reason = format!(
                "the endpoint answered 410 Gone at unix ms {}",
                attempt.at_ms
            );
            self.disable(&delivery, about, &reason).await;
        } else if failed {
            self.disable_if_dead(&key, &delivery, about, webhook, now)
                .await;
        }
        let schedule = webhook.and_then(|w| w.retry_schedule_ms.as_deref());
        let schedule = schedule.unwrap_or(&self.cfg.retry_schedule_ms);
        self.record(delivery, (verdict, schedule), attempt, about)
    }

    /// Disables the webhook of `delivery` for `reason`, with the
    /// `WEBHOOK_DISABLED` event that causes (once, if hosts race).
    async fn disable(&self, delivery: &Delivery, about: About<'_>, reason: &str) {
        let attempts = delivery.attempts + 1;
        let caused: Vec<Event> = (about.loud)
            .then(|| operational(EventType::WebhookDisabled, about, reason, attempts))
            .into_iter()
            .collect();
        let (team, name) = (&delivery.webhook.team, &delivery.webhook.name);
        match webhooks::disable(&self.store, team, name, reason, &caused).await {
            Ok(true) => {
                tracing::warn!(team = %team, webhook = %name, reason = %reason, "webhook disabled");
                self.dispatch_events(caused);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "disabling a webhook failed"),
        }
    }

    /// Disables a webhook whose every attempt has failed for its
    /// `disable_after_hours` (or the host's).
    async fn disable_if_dead(
        &self,
        key: &str,
        delivery: &Delivery,
        about: About<'_>,
        webhook: Option<&Webhook>,
        now: u64,
    ) {
        let hours = webhook.and_then(|w| w.disable_after_hours);
        let hours = hours.unwrap_or(self.cfg.disable_after_hours);
        let after_ms = (hours * 3_600_000.0) as u64;
        let Some((since, health)) = self.breakers.overdue(key, after_ms, now) else {
            return;
        };
        self.health_changed(
            about,
            Some(Change {
                health,
                circuit_moved: false,
            }),
        );
        let reason = format!(
            "every attempt has failed since unix ms {since}, for over {hours} hours (disable_after_hours)"
        );
        self.disable(delivery, about, &reason).await;
    }

    /// What the webhook's circuit says of a delivery due now. The first
    /// time this host sends to a webhook, its breaker starts from what
    /// the store holds.
    async fn gate(
        &self,
        key: &str,
        webhook: &WebhookRef,
        settings: &crate::model::BreakerSettings,
    ) -> Gate {
        if !self.breakers.knows(key) {
            let stored = self.store.health(&webhook.team, &webhook.name).await;
            self.breakers.seed(key, stored.ok().flatten());
        }
        // A probe may take as long as a send; then another may go.
        let probe_wait = u64::try_from(self.sender.timeout().as_millis()).unwrap_or(u64::MAX);
        let (gate, changed) = self
            .breakers
            .gate(key, settings, ids::now_ms(), probe_wait + 1000);
        // Opening a probe causes no event: no URL needed.
        let about = About {
            webhook,
            url: "",
            loud: true,
        };
        self.health_changed(about, changed);
        gate
    }

    /// Hands events this dispatcher wrote on to matching (see [`Caused`]).
    fn dispatch_events(&self, events: Vec<Event>) {
        if !events.is_empty() {
            let _ = self.caused.send(events);
        }
    }

    /// Writes a webhook's health that changed to the store (for the API,
    /// the console and a restart) with the event a circuit that moved
    /// causes, off the send path, and counts it.
    fn health_changed(&self, about: About<'_>, changed: Changed) {
        let Some(Change {
            health,
            circuit_moved,
        }) = changed
        else {
            return;
        };
        let caused = if circuit_moved {
            self.circuit_moved(about, &health.circuit)
        } else {
            Vec::new()
        };
        let (store, webhook) = (self.store.clone(), about.webhook.clone());
        let hand_on = self.caused.clone();
        self.tasks.spawn_draining(Stage::Recording, |_| async move {
            let written = async {
                let tx = store.begin().await?;
                tx.put_health(&webhook.team, &webhook.name, &health).await?;
                tx.insert_events(&caused).await?;
                tx.commit().await
            };
            if let Err(e) = written.await {
                tracing::warn!(error = %e, webhook = %webhook.name, "writing a webhook's health failed");
                return;
            }
            if !caused.is_empty() {
                let _ = hand_on.send(caused);
            }
        });
    }

    /// Logs and counts a circuit that moved, releasing what it held if it
    /// closed; the event it causes.
    fn circuit_moved(&self, about: About<'_>, circuit: &Circuit) -> Vec<Event> {
        let About { webhook, loud, .. } = about;
        let state = match circuit {
            Circuit::Open { reason, .. } => {
                tracing::warn!(team = %webhook.team, webhook = %webhook.name, reason = %reason, "webhook circuit opened");
                "open"
            }
            Circuit::HalfOpen { .. } => "half_open",
            Circuit::Closed => {
                tracing::info!(team = %webhook.team, webhook = %webhook.name, "webhook circuit closed");
                self.release(&breaker_key(&webhook.team, &webhook.name));
                "closed"
            }
        };
        telemetry::circuit_transition(state);
        let (open, half_open) = self.breakers.counts();
        telemetry::circuits(open, half_open);
        match circuit {
            Circuit::Open {
                reason, failures, ..
            } if loud && reason != PROBE_FAILED => {
                let opened = EventType::WebhookCircuitOpened;
                vec![operational(opened, about, reason, *failures)]
            }
            Circuit::Closed if loud => {
                vec![operational(EventType::WebhookRecovered, about, "", 0)]
            }
            _ => Vec::new(),
        }
    }

    /// Waits for the webhook's next send slot at `rate` a second; the slots
    /// are the store's, so the pace holds across hosts.
    async fn pace(&self, webhook: &WebhookRef, rate: f64) -> Result<()> {
        let interval_us = (1e6 / rate).round().max(1.0) as u64;
        let now_us = ids::now_ms() * 1000;
        let slot = (self.store).pace_slot(webhook, interval_us, now_us).await?;
        if slot > now_us {
            tokio::time::sleep(Duration::from_micros(slot - now_us)).await;
        }
        Ok(())
    }

    /// Holds a delivery back until `until_ms` without an attempt: its
    /// webhook is disabled, or its circuit (under `circuit`) is open. It
    /// keeps its attempt count; held by a circuit, it is remembered so
    /// that it goes as soon as the circuit closes.
    fn hold(&self, circuit: Option<&str>, delivery: Delivery, until_ms: u64) -> Result<Sent> {
        let held = delivery.held(until_ms);
        if let Some(key) = circuit {
            let mut map = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let remembered = map.entry(key.to_string()).or_default();
            if remembered.len() < MAX_REMEMBERED || remembered.contains_key(&held.id) {
                remembered.insert(held.id.clone(), held.clone());
            }
        }
        let outcome = Outcome {
            delivery,
            rescheduled: Some(held),
            status: Status::Pending,
            error: None,
            attempt: None,
            counted: None,
            caused: None,
        };
        if self.records.send(outcome).is_err() {
            return Err(crate::error::Error::Unavailable(
                "the host is stopping: the delivery stays in the outbox".into(),
            ));
        }
        Ok(Sent::Recording)
    }

    /// Hands the deliveries held for a webhook whose circuit closed to the
    /// scan loop, and wakes it.
    fn release(&self, key: &str) {
        let held = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        let Some(held) = held else { return };
        let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
        released.extend(held.into_values());
        self.wake.notify_one();
    }

    /// One send, with the webhook's current secrets, and what its answer
    /// (or its failure) is judged to be.
    async fn attempt(
        &self,
        delivery: &Delivery,
        opened: std::result::Result<&Opened, &crate::error::Error>,
    ) -> (Judgement, Attempt) {
        let started = ids::now_ms();
        let span = traces::on().then(|| attempt_span(delivery));
        let sent = match &span {
            Some(cx) => self.send(delivery, opened).with_context(cx.clone()).await,
            None => self.send(delivery, opened).await,
        };
        if let Some(cx) = &span {
            let mut attrs = vec![KeyValue::new(
                "switchyard.latency_ms",
                ids::now_ms().saturating_sub(started) as i64,
            )];
            if let Ok(answer) = &sent {
                attrs.push(KeyValue::new(
                    "http.response.status_code",
                    i64::from(answer.status),
                ));
            }
            let failed = match &sent {
                Ok(answer) if answer.status >= 300 => Some(format!("answered {}", answer.status)),
                Ok(_) => None,
                Err(failure) => Some(failure.to_string()),
            };
            traces::end(cx, attrs, failed.as_deref());
        }
        match sent {
            Ok(answer) => (judge(&answer), attempt_from(started, Some(&answer), None)),
            Err(failure) => {
                let verdict = match failure {
                    Failure::Refused(_) => Judgement::Fail,
                    _ => Judgement::Retry(None),
                };
                let error = Some(failure.to_string());
                (verdict, attempt_from(started, None, error))
            }
        }
    }

    /// Sends a delivery's body, signed with the webhook's current secrets.
    async fn send(
        &self,
        delivery: &Delivery,
        opened: std::result::Result<&Opened, &crate::error::Error>,
    ) -> std::result::Result<Answer, Failure> {
        let refused = |m: String| Failure::Refused(m);
        let opened = opened.map_err(|e| refused(e.to_string()))?;
        let webhook = &opened.webhook;
        let secrets = &opened.secrets;
        let sealed = delivery.body_sealed.bytes();
        let body = (self.sealer.open(delivery.id.as_bytes(), sealed).ok())
            .ok_or_else(|| refused("the stored payload could not be opened".into()))?;
        self.sender
            .send(&Outgoing {
                oauth: secrets.oauth.as_ref(),
                tls: secrets.tls.as_ref(),
                url: &webhook.url,
                body: &body,
                bearer: secrets.token.as_deref(),
                keys: secrets.keys(ids::now()),
                headers: &secrets.headers,
                delivery_id: delivery.id.as_str(),
                standard: webhook.standard_webhooks,
            })
            .await
    }

    /// Hands the attempt to [`record_loop`], which writes the execution's
    /// history and the delivery removed or rescheduled in one transaction.
    /// An execution that cannot be read is set aside by the store, and its
    /// delivery still leaves the outbox (or is rescheduled), so it is never
    /// sent again and again. A retry is due on `schedule` (the webhook's
    /// own, or the host's).
    fn record(
        &self,
        delivery: Delivery,
        (verdict, schedule): (Judgement, &[u64]),
        mut attempt: Attempt,
        about: About<'_>,
    ) -> Result<Sent> {
        let attempts = delivery.attempts + 1;
        let next_due = match verdict {
            Judgement::Retry(after) => self.next_due(schedule, attempts, after),
            _ => None,
        };
        attempt.next_attempt_at_ms = next_due;
        let rescheduled = next_due.map(|due_ms| delivery.retried(due_ms));
        let status = match (&verdict, next_due) {
            (Judgement::Done, _) => Status::Finished,
            (Judgement::Retry(_), Some(_)) => Status::Pending,
            _ => Status::Failed,
        };
        let error = match status {
            Status::Finished => None,
            _ => attempt
                .error
                .clone()
                .or_else(|| attempt.status.map(|s| format!("the endpoint answered {s}"))),
        };
        let outcome = match (&verdict, status) {
            (Judgement::Gone, _) => telemetry::Attempted::Disabled,
            (_, Status::Finished) => telemetry::Attempted::Delivered,
            (_, Status::Pending) => telemetry::Attempted::Retried,
            // (A send is never skipped: only the matcher skips, before any.)
            (_, Status::Failed | Status::Skipped) => telemetry::Attempted::Failed,
        };
        let since_event = ids::now_ms().saturating_sub(delivery.event_at_ms);
        // The receiver was tried and failed for good (not refused by us,
        // and not gone: that is WEBHOOK_DISABLED).
        let tried = matches!(verdict, Judgement::Retry(_)) || attempt.status.is_some();
        let exhausted = status == Status::Failed && tried && !matches!(verdict, Judgement::Gone);
        let caused = (exhausted && about.loud).then(|| {
            let reason = error.clone().unwrap_or_default();
            operational(EventType::DeliveryExhausted, about, &reason, attempts)
        });
        let outcome = Outcome {
            delivery,
            rescheduled,
            status,
            error,
            attempt: Some(attempt),
            counted: Some((outcome, Duration::from_millis(since_event))),
            caused,
        };
        if self.records.send(outcome).is_err() {
            return Err(crate::error::Error::Unavailable(
                "the host is stopping: the attempt was not recorded; the delivery stays in the outbox".into(),
            ));
        }
        Ok(Sent::Recording)
    }

    /// When attempt `attempts + 1` is due, or `None` when the schedule is used up.
    fn next_due(
        &self,
        schedule: &[u64],
        attempts: u32,
        retry_after: Option<Duration>,
    ) -> Option<u64> {
        let delay = retry_delay(schedule, self.cfg.jitter, attempts, retry_after)?;
        Some(ids::now_ms().saturating_add(delay))
    }
}

/// A delivery attempt's span, continuing the trace its event was matched
/// in; its `traceparent` goes to the receiver.
fn attempt_span(delivery: &Delivery) -> opentelemetry::Context {
    let parent = traces::continued(delivery.trace.as_deref());
    let attrs = vec![
        KeyValue::new("switchyard.delivery.id", delivery.id.to_string()),
        KeyValue::new(
            "switchyard.webhook",
            format!("{}/{}", delivery.webhook.team, delivery.webhook.name),
        ),
        KeyValue::new("switchyard.attempt", i64::from(delivery.attempts + 1)),
    ];
    traces::start_span("delivery.attempt", SpanKind::Client, &parent, attrs)
}

/// The wait before attempt `attempts + 1`: the schedule's entry, jittered,
/// or longer if the endpoint asked with `Retry-After`, but never longer than
/// the schedule's longest wait. `None` when the schedule is used up.
fn retry_delay(
    schedule: &[u64],
    fraction: f64,
    attempts: u32,
    retry_after: Option<Duration>,
) -> Option<u64> {
    let base = *schedule.get(attempts as usize)?;
    let longest = schedule.iter().copied().max().unwrap_or(0);
    let asked = retry_after.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Some(jitter(base, fraction).max(asked.min(longest)))
}

/// Retries on 408, 429 and 5xx; 410 disables; other statuses are final.
fn judge(answer: &Answer) -> Judgement {
    match answer.status {
        200..=299 => Judgement::Done,
        410 => Judgement::Gone,
        408 | 429 | 500..=599 => Judgement::Retry(answer.retry_after),
        _ => Judgement::Fail,
    }
}

fn attempt_from(started_ms: u64, answer: Option<&Answer>, error: Option<String>) -> Attempt {
    Attempt {
        at_ms: started_ms,
        status: answer.map(|a| a.status),
        latency_ms: answer.map_or((ids::now_ms() - started_ms) as f64, |a| a.latency_ms),
        error,
        next_attempt_at_ms: None,
    }
}

/// `base` ± `fraction`, so retries from a burst do not arrive together.
fn jitter(base: u64, fraction: f64) -> u64 {
    if base == 0 || fraction <= 0.0 {
        return base;
    }
    let mut byte = [0u8; 2];
    crate::ids::fill_random(&mut byte);
    let unit = u16::from_be_bytes(byte) as f64 / u16::MAX as f64; // 0..=1
    let factor = 1.0 + fraction * (2.0 * unit - 1.0);
    (base as f64 * factor).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_waits_longer_but_never_past_the_longest_step() {
        let schedule = [0, 100, 60_000];
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(retry_delay(&schedule, 0.0, 1, None), Some(100));
        assert_eq!(retry_delay(&schedule, 0.0, 1, secs(15)), Some(15_000));
        assert_eq!(retry_delay(&schedule, 0.0, 1, secs(u64::MAX)), Some(60_000));
        assert_eq!(retry_delay(&schedule, 0.0, 2, secs(0)), Some(60_000));
        assert_eq!(
            retry_delay(&schedule, 0.0, 3, secs(1)),
            None,
            "schedule used up"
        );
    }

    #[test]
    fn verdicts_follow_the_status() {
        let answer = |status| Answer {
            status,
            headers: Vec::new(),
            body: String::new(),
            truncated: false,
            latency_ms: 0.0,
            retry_after: None,
        };
        for status in [200, 204, 299] {
            assert!(
                matches!(judge(&answer(status)), Judgement::Done),
                "{status}"
            );
        }
        for status in [408, 429, 500, 503, 599] {
            assert!(
                matches!(judge(&answer(status)), Judgement::Retry(_)),
                "{status}"
            );
        }
        for status in [301, 400, 401, 404, 422] {
            assert!(
                matches!(judge(&answer(status)), Judgement::Fail),
                "{status}"
            );
        }
        assert!(matches!(judge(&answer(410)), Judgement::Gone));
    }

    #[test]
    fn jitter_stays_within_bounds() {
        for _ in 0..1000 {
            let j = jitter(1000, 0.2);
            assert!((800..=1200).contains(&j), "{j}");
        }
        assert_eq!(jitter(0, 0.2), 0);
    }
}
