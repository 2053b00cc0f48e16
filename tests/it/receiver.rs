//! A real HTTP receiver for webhook requests: records every request and
//! answers with a status the test sets. It stands in for the outside
//! systems webhooks call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Lower-case header names to values.
    pub headers: HashMap<String, String>,
    /// The exact body bytes.
    pub body: Vec<u8>,
    /// The status the receiver answered it with.
    pub answered: u16,
    /// When it was answered.
    pub at: std::time::Instant,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }
}

/// The receiver; stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    received: Arc<Mutex<Vec<Received>>>,
    /// The delivery id of every request, as it arrived (before any delay).
    arrivals: Arc<Mutex<Vec<String>>>,
    status: Arc<AtomicU16>,
    delay_ms: Arc<AtomicU64>,
    reply_headers: Arc<Mutex<Vec<(String, String)>>>,
    reply_body: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts answering 200 with body `ok`.
    pub async fn start() -> Receiver {
        let received = Arc::new(Mutex::new(Vec::new()));
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(AtomicU16::new(200));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let reply_headers = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let reply_body = Arc::new(Mutex::new("ok".to_string()));
        let (r, a, s, d, l, b) = (
            received.clone(),
            arrivals.clone(),
            status.clone(),
            delay_ms.clone(),
            reply_headers.clone(),
            reply_body.clone(),
        );
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let (r, a, s, d, l, b) = (
                r.clone(),
                a.clone(),
                s.clone(),
                d.clone(),
                l.clone(),
                b.clone(),
            );
            async move {
                let id = headers
                    .get("x-service-delivery")
                    .and_then(|v| v.to_str().ok());
                a.lock().unwrap().push(id.unwrap_or_default().to_string());
                let delay = d.load(Ordering::SeqCst);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                let headers = headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                    .collect();
                let answered = s.load(Ordering::SeqCst);
                r.lock().unwrap().push(Received {
                    headers,
                    body: body.to_vec(),
                    answered,
                    at: std::time::Instant::now(),
                });
                let code = StatusCode::from_u16(answered).unwrap();
                let mut reply = HeaderMap::new();
                reply.insert("x-receiver", "test".parse().unwrap());
                for (name, value) in l.lock().unwrap().iter() {
                    let name = axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap();
                    reply.insert(name, value.parse().unwrap());
                }
                let text = b.lock().unwrap().clone();
                (code, reply, text)
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            base,
            received,
            arrivals,
            status,
            delay_ms,
            reply_headers,
            reply_body,
            task,
        }
    }

    /// From now on, answer with `status`.
    pub fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// From now on, answer with this header too.
    pub fn reply_header(&self, name: &str, value: &str) {
        let mut headers = self.reply_headers.lock().unwrap();
        headers.retain(|(n, _)| n != name);
        headers.push((name.to_string(), value.to_string()));
    }

    /// From now on, answer with this body (`ok` until then).
    pub fn reply_body(&self, text: &str) {
        *self.reply_body.lock().unwrap() = text.to_string();
    }

    /// From now on, answer `307 Temporary Redirect` to `url`.
    pub fn redirect_to(&self, url: &str) {
        self.reply_header("location", url);
        self.answer(307);
    }

    /// From now on, wait `ms` before answering (the request is recorded
    /// after the wait, so an abandoned request is not counted).
    pub fn delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// How many requests have arrived, answered or not (a delayed one
    /// counts as soon as it arrives).
    pub fn arrived(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }

    /// The delivery id of each request that arrived, in order, answered
    /// or not.
    pub fn arrivals(&self) -> Vec<String> {
        self.arrivals.lock().unwrap().clone()
    }

    /// How many requests arrived per delivery id, answered or not: a
    /// receiver acts on what arrives, so more than one is a duplicate.
    pub fn arrivals_per_delivery(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for id in self.arrivals.lock().unwrap().iter() {
            *counts.entry(id.clone()).or_default() += 1;
        }
        counts
    }

    /// Waits (at most `secs` seconds) until `n` requests have been
    /// recorded, and returns them all; fails the test, saying what came,
    /// when fewer did.
    pub async fn wait_for(&self, n: usize, secs: u64) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            if tokio::time::Instant::now() > deadline {
                let ids: Vec<_> = got.iter().map(|r| r.header("x-service-delivery")).collect();
                panic!(
                    "waited {secs} s for {n} requests at {}; {} came (delivery ids {ids:?})",
                    self.base,
                    got.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The signature a receiver expects: hex HMAC-SHA256 of the body, computed
/// here independently of the host's code.
pub fn expected_signature(key: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// A loopback port nothing listens on.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
