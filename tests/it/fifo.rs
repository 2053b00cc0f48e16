//! FIFO webhooks: one delivery in flight at a time, in the order their
//! events were accepted; a failing one holds the line. Checked by a
//! receiver that watches the sequence, under load and through a kill -9.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::delivery::CONFIG;
use crate::harness::Host;
use crate::world::{PROJECT, World};

/// A receiver that notes each request's tag, refuses the first try of
/// every fifth tag with 503, and counts requests in flight at once.
#[derive(Clone, Default)]
pub(crate) struct Sequencer {
    /// (tag number, status answered), in arrival order.
    arrivals: Arc<Mutex<Vec<(usize, u16)>>>,
    in_flight: Arc<AtomicUsize>,
    pub(crate) most_at_once: Arc<AtomicUsize>,
}

impl Sequencer {
    pub(crate) async fn start() -> (Sequencer, String) {
        let seq = Sequencer::default();
        let s = seq.clone();
        let app = axum::Router::new().fallback(async move |body: String| {
            let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            s.most_at_once.fetch_max(now, Ordering::SeqCst);
            // Out of flight however the request ends: a killed host's
            // request is dropped mid-way.
            let _landed = Landed(s.in_flight.clone());
            // Long enough that a second request in flight would overlap.
            tokio::time::sleep(Duration::from_millis(3)).await;
            let body: Value = serde_json::from_str(&body).unwrap_or_default();
            let tag = body["tag"].as_str().unwrap_or_default();
            let n: usize = tag.trim_start_matches('t').parse().unwrap_or(usize::MAX);
            let status = {
                let mut arrivals = s.arrivals.lock().unwrap();
                let tried = arrivals.iter().any(|(m, _)| *m == n);
                let refuse = n.is_multiple_of(5) && !tried;
                let status = if refuse { 503 } else { 200 };
                arrivals.push((n, status));
                status
            };
            StatusCode::from_u16(status).unwrap()
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (seq, format!("{base}/hook"))
    }

    fn arrivals(&self) -> Vec<(usize, u16)> {
        self.arrivals.lock().unwrap().clone()
    }

    /// The tags answered 200, in order, once `n` different ones have been
    /// (20 s at most).
    pub(crate) async fn delivered(&self, n: usize) -> Vec<usize> {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ok: Vec<usize> = (self.arrivals().into_iter())
                .filter(|(_, status)| *status == 200)
                .map(|(n, _)| n)
                .collect();
            let mut distinct = ok.clone();
            distinct.dedup();
            if distinct.len() >= n {
                return ok;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {n} delivered: {:?}",
                ok.len(),
                self.arrivals()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Never back: each request is for the same tag as the one before
    /// (its retry, or a resend after a crash) or a later one.
    pub(crate) fn assert_in_order(&self) {
        let arrivals = self.arrivals();
        let back = arrivals.windows(2).find(|w| w[1].0 < w[0].0);
        assert!(back.is_none(), "out of order at {back:?}: {arrivals:?}");
    }
}

/// Takes a request out of flight when dropped.
struct Landed(Arc<AtomicUsize>);

impl Drop for Landed {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Webhook `ci`, FIFO, to `hook`, and an automation on every tag.
async fn fifo_to(host: &Host, hook: &str) -> World {
    let world = World::build(host, Some(hook)).await;
    let settings = json!({"url": hook, "ordering": "fifo"});
    let saved = ok!(host, world.alice, PUT "/v1/teams/ml/webhooks/ci", settings);
    assert_eq!(saved["ordering"], "fifo");
    let automation = json!({"name": "tags", "event": {"type": "ADD_ARTIFACT_TAG"},
        "webhook": {"team": "ml", "name": "ci"}, "action": "Webhooks",
        "payload": r#"{"tag": "${tag}"}"#});
    ok!(host, world.alice, POST "{PROJECT}/automations", automation);
    ok!(host, world.bob, POST "{PROJECT}/collections/detector/versions", {"metadata": {}});
    world
}

/// Tags `from..to` in requests of `per` tags, one after another.
async fn tag(host: &Host, bob: &str, range: std::ops::Range<usize>, per: usize) {
    let all: Vec<String> = range.map(|i| format!("t{i}")).collect();
    for tags in all.chunks(per) {
        ok!(host, bob, POST "{PROJECT}/collections/detector/versions/v0/tags", {"tags": tags});
    }
}

on_each_store!(a_fifo_webhook_gets_one_delivery_at_a_time_in_event_order);
async fn a_fifo_webhook_gets_one_delivery_at_a_time_in_event_order() {
    let (receiver, hook) = Sequencer::start().await;
    let host = Host::with_config(CONFIG).await;
    let world = fifo_to(&host, &hook).await;
    const EVENTS: usize = 100;
    tag(&host, &world.bob, 0..EVENTS, 10).await;
    let delivered = receiver.delivered(EVENTS).await;
    assert_eq!(
        delivered,
        (0..EVENTS).collect::<Vec<_>>(),
        "each once, in order"
    );
    receiver.assert_in_order();
    let refused = receiver
        .arrivals()
        .iter()
        .filter(|(_, s)| *s == 503)
        .count();
    assert_eq!(refused, EVENTS / 5, "every fifth held the line once");
    assert_eq!(
        receiver.most_at_once.load(Ordering::SeqCst),
        1,
        "one at a time"
    );
    let console = crate::console::Visitor::signed_in(&host, &world.alice).await;
    let page = console.get("/teams/ml/webhooks/ci").await.body;
    assert!(
        page.contains("FIFO: one at a time, in the order of their events"),
        "{page}"
    );
}

on_each_store!(a_fifo_line_survives_a_kill_9_in_order);
async fn a_fifo_line_survives_a_kill_9_in_order() {
    let (receiver, hook) = Sequencer::start().await;
    let mut host = Host::with_config(CONFIG).await;
    let world = fifo_to(&host, &hook).await;
    const EVENTS: usize = 60;
    tag(&host, &world.bob, 0..EVENTS, 5).await;
    // Killed mid-line, some delivered and some not.
    receiver.delivered(10).await;
    host.kill9();
    let restarted = Host::builder()
        .config(CONFIG)
        .same_store(&host)
        .start()
        .await;
    let delivered = receiver.delivered(EVENTS).await;
    let mut once = delivered.clone();
    once.dedup();
    assert_eq!(
        once,
        (0..EVENTS).collect::<Vec<_>>(),
        "every one, in order: {delivered:?}"
    );
    receiver.assert_in_order();
    assert_eq!(receiver.most_at_once.load(Ordering::SeqCst), 1);
    drop(restarted);
}
