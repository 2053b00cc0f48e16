//! Rate limits and budgets of keys and projects, counted as OpenAI counts
//! them: requests and tokens per minute over a sliding minute, tokens per
//! UTC day; and budgets in USD per UTC day and month, counted in nano-USD.
//!
//! The counts live in the store, so that every host on one PostgreSQL
//! database sees the same ones; a request must not wait on the store for
//! them, so each host claims a lease of 1% of a limit at a time (one atomic
//! store call) and admits requests from it until it is spent or a second
//! old. What a lease leaves unused goes back with the time it was claimed,
//! so a window never counts it twice nor forgets it early. The algorithm,
//! and what it guarantees, is in docs/operations.md.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};

use super::prices::nanos;
use crate::error::{Error, Result};
use crate::ids;
use crate::model::RateLimits;
use crate::store::{Granted, LimitClaim, Store};
use crate::tasks::{Stage, Tasks};

/// How long a host may admit from one lease.
const LEASE_MS: u64 = 1_000;
/// A lease is this share of the limit (at least what the request needs).
const LEASE_SHARE: u64 = 100;
const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;
/// The name monthly budgets' buckets end with: their claims are kept
/// longer.
const MONTHLY: &str = "usdpm";
/// Claims are forgotten this long after their period ends.
const KEPT_MS: u64 = 2 * DAY_MS;

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Requests,
    Tokens,
    /// Nano-USD.
    Usd,
}

/// Over what time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    /// The last 60 seconds.
    Minute,
    /// The current UTC day.
    Day,
    /// The current UTC month.
    Month,
}

/// One limit that applies to a request.
#[derive(Debug, Clone)]
struct Check {
    bucket: String,
    unit: Unit,
    span: Span,
    limit: u64,
    /// Who it belongs to, for messages: `API key 'ci' (sy_ab12cd)`.
    owner: String,
}

impl Check {
    fn what(&self) -> &'static str {
        match (self.unit, self.span) {
            (Unit::Requests, _) => "requests per minute",
            (Unit::Tokens, Span::Minute) => "tokens per minute",
            (Unit::Tokens, _) => "tokens per day (UTC)",
            (Unit::Usd, Span::Month) => "per month (UTC)",
            (Unit::Usd, _) => "per day (UTC)",
        }
    }

    /// Its limit as messages say it: `3 requests per minute`, `$5 per
    /// day (UTC)`.
    fn named(&self) -> String {
        format!("{} {}", self.amount(self.limit), self.what())
    }

    /// An amount of its unit, as a number in headers and messages.
    fn amount(&self, n: u64) -> String {
        match self.unit {
            Unit::Usd => format!("${}", usd(n)),
            _ => n.to_string(),
        }
    }

    fn budget(&self) -> bool {
        self.span != Span::Minute
    }

    /// The time a claim at `now` is dated: its own for a sliding minute;
    /// for a daily budget, the day's start, so the day's claims and
    /// corrections add up in one stored row instead of one each.
    fn dated(&self, now: u64) -> u64 {
        match self.span {
            Span::Minute => now,
            Span::Day => now / DAY_MS * DAY_MS,
            Span::Month => ids::month_bounds_ms(now).0,
        }
    }

    /// The window a claim at `now` counts in, (after, its date).
    fn window(&self, now: u64) -> (u64, u64) {
        match self.span {
            Span::Minute => (now.saturating_sub(MINUTE_MS), now),
            Span::Day | Span::Month => (self.dated(now).saturating_sub(1), self.dated(now)),
        }
    }

    /// How long until a budget's period ends.
    fn until_renewal(&self, now: u64) -> u64 {
        match self.span {
            Span::Minute => MINUTE_MS,
            Span::Day => DAY_MS - now % DAY_MS,
            Span::Month => ids::month_bounds_ms(now).1 - now,
        }
    }
}

/// Whose limits apply to a request: its key's and its project's.
#[derive(Debug, Clone, Default)]
pub struct Owners {
    /// The key's id, its label for messages, and its limits.
    pub key: Option<(String, String, RateLimits)>,
    /// The project (`team/project`) and its limits.
    pub project: Option<(String, RateLimits)>,
}

impl Owners {
    fn checks(&self) -> Vec<Check> {
        let mut checks = Vec::new();
        let owners = [
            self.key
                .as_ref()
                .map(|(id, label, l)| (format!("k:{id}"), label.clone(), l)),
            self.project
                .as_ref()
                .map(|(p, l)| (format!("p:{p}"), format!("project '{p}'"), l)),
        ];
        for (prefix, owner, limits) in owners.into_iter().flatten() {
            let each = [
                ("rpm", Unit::Requests, Span::Minute, limits.rpm),
                ("tpm", Unit::Tokens, Span::Minute, limits.tpm),
                ("tpd", Unit::Tokens, Span::Day, limits.tokens_per_day),
                ("usdpd", Unit::Usd, Span::Day, limits.usd_per_day.map(nanos)),
                (
                    MONTHLY,
                    Unit::Usd,
                    Span::Month,
                    limits.usd_per_month.map(nanos),
                ),
            ];
            for (name, unit, span, limit) in each {
                if let Some(limit) = limit {
                    checks.push(Check {
                        bucket: format!("{prefix}:{name}"),
                        unit,
                        span,
                        limit,
                        owner: owner.clone(),
                    });
                }
            }
        }
        checks
    }
}

/// A lease: what this host may still admit of a limit without asking the
/// store.
#[derive(Debug, Clone)]
struct Lease {
    /// The claim's date ([`Check::dated`]); what it gives back is dated so.
    at_ms: u64,
    /// When it was claimed.
    claimed_ms: u64,
    granted: u64,
    left: u64,
    /// The window's count when claimed, this lease included.
    seen: u64,
    limit: u64,
    /// Whether its successor is being claimed.
    renewing: bool,
}

impl Lease {
    fn live(&self, now: u64, limit: u64) -> bool {
        now < self.claimed_ms + LEASE_MS && self.limit == limit
    }

    /// Whether to claim its successor now, in the background, so that no
    /// request waits on the store when it runs out: half its time or half
    /// of it gone.
    fn due_for_renewal(&self, now: u64) -> bool {
        !self.renewing && (now >= self.claimed_ms + LEASE_MS / 2 || self.left < self.granted / 2)
    }
}

/// One amount taken for an admitted request.
#[derive(Debug, Clone)]
struct Taken {
    bucket: String,
    unit: Unit,
    at_ms: u64,
    amount: u64,
}

/// A request let in: what it took, to settle with its real usage, and the
/// rate-limit headers its answer carries.
#[derive(Debug, Default)]
pub struct Admitted {
    taken: Vec<Taken>,
    /// `x-ratelimit-*` for the tightest limits.
    pub headers: HeaderMap,
}

/// The host's limiter.
pub struct Limiter {
    store: Store,
    leases: Mutex<HashMap<String, Lease>>,
    /// `(bucket, claimed at)` → what goes back (negative) or was used
    /// beyond the estimate (positive); written each second.
    corrections: Mutex<HashMap<(String, u64), i64>>,
    /// Wakes the flusher when there is something to write: an idle host
    /// wakes no thread for limits.
    busy: Arc<tokio::sync::Notify>,
}

/// The limiter's loop (see [`Limiter::start`]); it ends with its limiter,
/// or when told to stop, after a last flush.
async fn upkeep(
    weak: std::sync::Weak<Limiter>,
    busy: Arc<tokio::sync::Notify>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut purged: Option<std::time::Instant> = None;
    loop {
        let Some(idle) = weak.upgrade().map(|l| l.idle()) else {
            return;
        };
        let stopped = tokio::select! {
            () = stop.cancelled() => true,
            () = busy.notified(), if idle => false,
            _ = tick.tick(), if !idle => false,
        };
        let Some(limiter) = weak.upgrade() else {
            return;
        };
        let _ = off_the_workers(async move { limiter.flush().await }).await;
        if stopped {
            return;
        }
        let Some(limiter) = weak.upgrade() else {
            return;
        };
        if purged.is_none_or(|at| at.elapsed() >= Duration::from_secs(3600)) {
            purged = Some(std::time::Instant::now());
            limiter.purge().await;
        }
    }
}

/// What remains of one limit after an admission.
struct Remaining {
    check: Check,
    left: u64,
}

impl Limiter {
    /// A limiter over `store`. While it holds leases or corrections, it
    /// writes the corrections and returns stale leases each second, and
    /// forgets claims two days old each hour; idle, it sleeps. Its loop is
    /// upkeep on `tasks`, and writes what it holds once more as it stops.
    pub fn start(store: Store, tasks: &Tasks) -> Arc<Limiter> {
        let busy = Arc::new(tokio::sync::Notify::new());
        let limiter = Arc::new(Limiter {
            store,
            leases: Mutex::default(),
            corrections: Mutex::default(),
            busy: busy.clone(),
        });
        let weak = Arc::downgrade(&limiter);
        tasks.spawn_draining(Stage::Upkeep, |stop| upkeep(weak, busy, stop));
        limiter
    }

    /// Whether there is nothing to flush.
    fn idle(&self) -> bool {
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
            && self
                .corrections
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
    }

    /// Forgets claims no window counts any more: monthly budgets' once
    /// their month is over, the rest two days on.
    async fn purge(&self) {
        let now = ids::now_ms();
        let last_month = ids::month_bounds_ms(ids::month_bounds_ms(now).0 - 1).0;
        let purges = [
            (now.saturating_sub(KEPT_MS), Some(MONTHLY)),
            (last_month.saturating_sub(KEPT_MS), None),
        ];
        for (before, except) in purges {
            if let Err(e) = self.store.purge_limits(before, except).await {
                tracing::warn!(error = %e, "forgetting old rate-limit claims failed; retried in an hour");
            }
        }
    }

    /// Admits a request needing `need` at most (its prompt and
    /// `max_tokens`, and what they cost) under `owners`' limits, or refuses
    /// it with a 429 naming the limit.
    pub async fn admit(self: &Arc<Self>, owners: &Owners, need: Need) -> Result<Admitted> {
        let checks = owners.checks();
        if checks.is_empty() {
            return Ok(Admitted::default());
        }
        let now = ids::now_ms();
        let mut admitted = Admitted::default();
        let mut remaining = Vec::with_capacity(checks.len());
        for check in checks {
            let need = match check.unit {
                Unit::Requests => 1,
                Unit::Tokens => need.tokens,
                Unit::Usd => need.nanos,
            };
            match self.take(&check, need, now).await {
                Ok((at_ms, left)) => {
                    admitted.taken.push(Taken {
                        bucket: check.bucket.clone(),
                        unit: check.unit,
                        at_ms,
                        amount: need,
                    });
                    remaining.push(Remaining { check, left });
                }
                Err(refusal) => {
                    self.give_back(&admitted.taken);
                    return Err(refusal);
                }
            }
        }
        admitted.headers = headers(&remaining, now);
        Ok(admitted)
    }

    /// Settles an admitted request with what it really used.
    pub fn settle(&self, admitted: &Admitted, used: Need) {
        for taken in &admitted.taken {
            let used = match taken.unit {
                Unit::Requests => continue,
                Unit::Tokens => used.tokens,
                Unit::Usd => used.nanos,
            };
            self.correct(
                &taken.bucket,
                taken.at_ms,
                signed(used) - signed(taken.amount),
            );
        }
    }

    /// Adds `delta` to the claim on `bucket` made at `at_ms`, to be written
    /// within a second.
    fn correct(&self, bucket: &str, at_ms: u64, delta: i64) {
        if delta == 0 {
            return;
        }
        *self
            .corrections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((bucket.to_string(), at_ms))
            .or_default() += delta;
        self.busy.notify_one();
    }

    /// Gives back all an admitted request took: it was not served.
    pub fn cancel(&self, admitted: &Admitted) {
        self.give_back(&admitted.taken);
    }

    /// Gives back what a refused request had taken of its other limits.
    fn give_back(&self, taken: &[Taken]) {
        for t in taken {
            self.correct(&t.bucket, t.at_ms, -signed(t.amount));
        }
    }

    /// Takes `need` of `check`'s limit: from this host's lease, or from a
    /// new one claimed from the store. The lease's time and what remains.
    async fn take(self: &Arc<Self>, check: &Check, need: u64, now: u64) -> Result<(u64, u64)> {
        if let Some((taken, renew)) = self.take_leased(check, need, now) {
            if renew {
                let (limiter, check) = (self.clone(), check.clone());
                drop(off_the_workers(async move { limiter.renew(&check).await }));
            }
            return Ok(taken);
        }
        if need > check.limit {
            return Err(too_large(check, need));
        }
        let granted = self.claim(check, need, now).await?;
        if granted.granted == 0 {
            return Err(refused(check, now, granted.oldest_ms));
        }
        Ok(self.install(check, &granted, need, now))
    }

    /// Claims a lease of `check`'s limit from the store: 1% of it, and at
    /// least `need`.
    async fn claim(&self, check: &Check, need: u64, now: u64) -> Result<Granted> {
        let claim = LimitClaim {
            bucket: &check.bucket,
            limit: check.limit,
            window: check.window(now),
            need,
            want: need.max(check.limit / LEASE_SHARE),
        };
        Ok(self.store.claim_limit(claim).await?)
    }

    /// Claims the successor of `check`'s lease while the current one still
    /// admits; on a refusal or an error, the lease runs out and the next
    /// request claims (and answers) for itself.
    async fn renew(&self, check: &Check) {
        let now = ids::now_ms();
        match self.claim(check, 1, now).await {
            Ok(granted) if granted.granted > 0 => {
                self.install(check, &granted, 0, now);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, bucket = %check.bucket, "renewing a rate-limit lease failed")
            }
        }
    }

    /// Makes a claim this host's lease of `check`, `used` of it taken at
    /// once, returning what the lease it replaces left; the lease's time
    /// and what remains of the limit.
    fn install(&self, check: &Check, granted: &Granted, used: u64, now: u64) -> (u64, u64) {
        let before = u64::try_from(granted.used.max(0)).unwrap_or(0);
        let lease = Lease {
            at_ms: check.dated(now),
            claimed_ms: now,
            granted: granted.granted,
            left: granted.granted - used,
            seen: before + granted.granted,
            limit: check.limit,
            renewing: false,
        };
        let left = check.limit.saturating_sub(lease.seen) + lease.left;
        let old = self
            .leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(check.bucket.clone(), lease);
        if let Some(old) = old {
            self.return_unused(&check.bucket, &old);
        }
        self.busy.notify_one();
        (check.dated(now), left)
    }

    /// Takes `need` from this host's lease; also whether its successor is
    /// now due.
    fn take_leased(&self, check: &Check, need: u64, now: u64) -> Option<((u64, u64), bool)> {
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        let lease = leases.get_mut(&check.bucket)?;
        if !lease.live(now, check.limit) || lease.left < need {
            return None;
        }
        lease.left -= need;
        let renew = lease.due_for_renewal(now);
        lease.renewing |= renew;
        let left = check.limit.saturating_sub(lease.seen) + lease.left;
        Some(((lease.at_ms, left), renew))
    }

    fn return_unused(&self, bucket: &str, lease: &Lease) {
        self.correct(bucket, lease.at_ms, -signed(lease.left));
    }

    /// Returns what stale leases left and writes the corrections.
    async fn flush(&self) {
        let now = ids::now_ms();
        let stale: Vec<(String, Lease)> = {
            let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<String> = leases
                .iter()
                .filter(|(_, l)| !l.live(now, l.limit))
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| leases.remove(&k).map(|l| (k, l)))
                .collect()
        };
        for (bucket, lease) in &stale {
            self.return_unused(bucket, lease);
        }
        let batch: Vec<(String, u64, i64)> = {
            let mut corrections = self.corrections.lock().unwrap_or_else(|p| p.into_inner());
            corrections
                .drain()
                .filter(|(_, n)| *n != 0)
                .map(|((bucket, at), n)| (bucket, at, n))
                .collect()
        };
        if let Err(e) = self.store.adjust_limits(&batch).await {
            tracing::warn!(error = %e, "writing rate-limit corrections failed; retried in a second");
            for (bucket, at, n) in batch {
                self.correct(&bucket, at, n);
            }
        }
    }
}

/// Runs `work` (store calls) on a blocking thread rather than on the
/// runtime's workers: on sled a claim reads and writes in place, and a
/// worker busy with it is one that answers no request meanwhile, which
/// showed in the limited key's p99 at low rates (6 claims a second on
/// three limits).
fn off_the_workers(
    work: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || handle.block_on(work))
}

/// Nano-USD as USD, with as many decimals as it needs (up to nine).
fn usd(nanos: u64) -> String {
    let text = format!("{}.{:09}", nanos / 1_000_000_000, nanos % 1_000_000_000);
    let text = text.trim_end_matches('0');
    let text = text.strip_suffix('.').unwrap_or(text);
    text.to_string()
}

/// What a request may use, or used: tokens, and their cost in nano-USD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    /// Prompt and completion tokens.
    pub tokens: u64,
    /// Their cost, in nano-USD.
    pub nanos: u64,
}

/// An amount as a signed correction.
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Tokens counted for each message beyond its text: its role and the
/// tokens that frame it (OpenAI's format spends three or four).
const PER_MESSAGE: u64 = 16;

/// The bytes of a chat's prompt, each message's text and other fields, and
/// how many messages it has.
fn prompt_bytes(request: &crate::plugin::ChatRequest) -> (u64, u64) {
    let bytes: usize = (request.messages.iter())
        .map(|m| m.content.len() + m.extra.as_ref().map_or(0, String::len))
        .sum();
    (bytes as u64, request.messages.len() as u64)
}

/// What a chat request may use at most: its prompt at one token a byte
/// (byte-level tokenizers never make more; typical text makes about a
/// quarter of that) plus [`PER_MESSAGE`] a message, and `max_tokens` for
/// each of its `n` choices. Inference sets `max_tokens` to the model's
/// output cap when the client gave none.
pub fn estimate(request: &crate::plugin::ChatRequest) -> Estimate {
    let (bytes, messages) = prompt_bytes(request);
    let choices = request
        .extra
        .as_deref()
        .and_then(|extra| serde_json::from_str::<Choices>(extra).ok())
        .map_or(1, |c| c.most());
    Estimate {
        prompt: bytes + PER_MESSAGE * messages,
        output: u64::from(request.max_tokens.unwrap_or(0)) * choices,
    }
}

/// About how many tokens a chat's prompt holds (four bytes a token), for
/// clients that ask (`count_tokens`); admission counts [`estimate`]'s.
pub fn likely_prompt_tokens(request: &crate::plugin::ChatRequest) -> u64 {
    let (bytes, messages) = prompt_bytes(request);
    bytes.div_ceil(4) + 4 * messages
}

/// The fields that multiply what a request generates: `n` choices, or
/// `best_of` completions made to pick from (all billed).
#[derive(serde::Deserialize)]
struct Choices {
    n: Option<u64>,
    best_of: Option<u64>,
}

impl Choices {
    fn most(&self) -> u64 {
        self.n.unwrap_or(1).max(self.best_of.unwrap_or(1)).max(1)
    }
}

/// The most a request may use: prompt tokens (at most) and output tokens
/// (asked for, times the choices asked for).
#[derive(Debug, Clone, Copy)]
pub struct Estimate {
    /// Prompt tokens, one a byte.
    pub prompt: u64,
    /// The output cap times the choices.
    pub output: u64,
}

/// The same for a request to another endpoint: its body at one token a
/// byte, and the most it asks to generate (`max_tokens`, or
/// `max_output_tokens` for a response) times `n` or `best_of`. Inference
/// sets the cap when the client gave none.
pub fn estimate_body(request: &crate::plugin::ForwardRequest) -> Estimate {
    // Counted as it would be written, without writing it anywhere.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut bytes = Count(0);
    let _ = serde_json::to_writer(&mut bytes, &request.body);
    let bytes = bytes.0;
    let most = OUTPUT_CAPS
        .iter()
        .find_map(|f| request.body.get(*f).and_then(serde_json::Value::as_u64))
        .unwrap_or(0);
    let count = |f: &str| request.body.get(f).and_then(serde_json::Value::as_u64);
    let choices = Choices {
        n: count("n"),
        best_of: count("best_of"),
    };
    Estimate {
        prompt: bytes as u64,
        output: most * choices.most(),
    }
}

/// The fields that cap what a request to an endpoint besides chat
/// generates.
const OUTPUT_CAPS: [&str; 2] = ["max_tokens", "max_output_tokens"];

/// Makes sure a request to an endpoint besides chat says how much it may
/// generate: a text completion OpenAI's default of 16 tokens, a response
/// `cap`. (Embeddings generate nothing.)
pub fn cap_output(request: &mut crate::plugin::ForwardRequest, cap: u32) {
    use crate::plugin::Endpoint;
    if OUTPUT_CAPS.iter().any(|f| request.body.contains_key(*f)) {
        return;
    }
    let (field, most) = match request.endpoint {
        Endpoint::Embeddings => return,
        Endpoint::Completions => ("max_tokens", COMPLETION_DEFAULT),
        Endpoint::Responses => ("max_output_tokens", cap),
    };
    request.body.insert(field.into(), most.into());
}

/// What a text completion generates when it does not say (OpenAI's
/// documented default).
pub const COMPLETION_DEFAULT: u32 = 16;

/// The 429 for a request that needs more than a limit allows at all.
fn too_large(check: &Check, need: u64) -> Error {
    let may = match check.unit {
        Unit::Usd => format!(
            "cost up to {} (its prompt and max_tokens at the model's prices)",
            check.amount(need)
        ),
        _ => format!("use up to {need} tokens (its prompt and max_tokens)"),
    };
    Error::OverLimit {
        message: format!(
            "Request too large: it may {may}, more than the {} limit of {}; lower max_tokens or shorten the prompt",
            check.owner,
            check.named(),
        ),
        retry_after: 60,
        budget: check.budget(),
    }
}

/// The 429 for a spent limit, with when to retry.
fn refused(check: &Check, now: u64, oldest_ms: Option<u64>) -> Error {
    let wait_ms = match check.span {
        Span::Minute => oldest_ms.map_or(1_000, |at| (at + MINUTE_MS).saturating_sub(now)),
        Span::Day | Span::Month => check.until_renewal(now),
    };
    let retry_after = wait_ms.div_ceil(1000).max(1);
    let wait = duration(retry_after * 1000);
    let (owner, limit) = (&check.owner, check.named());
    let message = match check.span {
        Span::Minute => format!(
            "Rate limit reached for {owner}: {limit}. Retry in {wait}, or ask for a higher limit"
        ),
        Span::Day => {
            format!("Budget spent: {owner} has used its {limit}; it renews at 00:00 UTC, in {wait}")
        }
        Span::Month => format!(
            "Budget spent: {owner} has used its {limit}; it renews on the 1st at 00:00 UTC, in {wait}"
        ),
    };
    Error::OverLimit {
        message,
        retry_after,
        budget: check.budget(),
    }
}

/// OpenAI's headers for the tightest request limit and the tightest token
/// limit (the one with the least left), and ours for the tightest USD
/// budget.
fn headers(remaining: &[Remaining], now: u64) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let names = [
        (
            Unit::Requests,
            [
                "x-ratelimit-limit-requests",
                "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests",
            ],
        ),
        (
            Unit::Tokens,
            [
                "x-ratelimit-limit-tokens",
                "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens",
            ],
        ),
        (
            Unit::Usd,
            [
                "x-ratelimit-limit-usd",
                "x-ratelimit-remaining-usd",
                "x-ratelimit-reset-usd",
            ],
        ),
    ];
    for (unit, names) in names {
        let Some(tightest) = remaining
            .iter()
            .filter(|r| r.check.unit == unit)
            .min_by_key(|r| r.left)
        else {
            continue;
        };
        let check = &tightest.check;
        let reset_ms = match check.span {
            // As a bucket refilling over the minute would.
            Span::Minute => {
                let used = check.limit.saturating_sub(tightest.left);
                used.saturating_mul(MINUTE_MS) / check.limit.max(1)
            }
            Span::Day | Span::Month => check.until_renewal(now),
        };
        let number = |n: u64| match unit {
            Unit::Usd => usd(n),
            _ => n.to_string(),
        };
        let values = [
            number(check.limit),
            number(tightest.left),
            duration(reset_ms),
        ];
        for (name, value) in names.into_iter().zip(values) {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
    }
    headers
}

/// A duration as OpenAI writes resets: `6m0s`, `1.5s`, `20ms`, `3h2m1s`.
fn duration(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, m, s) = (ms / 3_600_000, ms / 60_000 % 60, ms % 60_000);
    let secs = if s % 1000 == 0 {
        format!("{}s", s / 1000)
    } else {
        format!("{}s", s as f64 / 1000.0)
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A limiter over a fresh embedded store, and a key's owners at
    /// `rpm`.
    fn limited(rpm: u64) -> (tempfile::TempDir, Store, Arc<Limiter>, Owners) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_embedded(dir.path()).unwrap();
        let limits = RateLimits {
            rpm: Some(rpm),
            ..RateLimits::default()
        };
        let owners = Owners {
            key: Some(("k1".into(), "API key 'ci'".into(), limits)),
            project: None,
        };
        (
            dir,
            store.clone(),
            Limiter::start(store, &Tasks::default()),
            owners,
        )
    }

    /// What the store counts for the key's rpm now.
    async fn counted(store: &Store) -> i64 {
        let now = ids::now_ms();
        let window = (now - MINUTE_MS, now);
        let claim = LimitClaim {
            bucket: "k:k1:rpm",
            limit: 1,
            window,
            need: u64::MAX,
            want: 0,
        };
        let probe = store.claim_limit(claim).await.unwrap();
        assert_eq!(probe.granted, 0);
        probe.used
    }

    #[tokio::test]
    async fn leases_are_renewed_before_they_run_out_and_nothing_is_counted_twice() {
        let (_dir, store, limiter, owners) = limited(1_000);
        for _ in 0..30 {
            limiter.admit(&owners, Need::default()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        limiter.flush().await;
        let left = limiter.leases.lock().unwrap()["k:k1:rpm"].left;
        // Leases of 10, each renewed in the background once half is used:
        // the one in place still has some left when the 30th is admitted.
        assert!(left > 0, "the lease in place was renewed, not run dry");
        assert_eq!(counted(&store).await, 30 + left as i64);
    }

    #[tokio::test]
    async fn a_spent_limit_refuses_with_when_to_retry() {
        let (_dir, store, limiter, owners) = limited(3);
        for _ in 0..3 {
            limiter.admit(&owners, Need::default()).await.unwrap();
        }
        match limiter.admit(&owners, Need::default()).await {
            Err(Error::OverLimit {
                retry_after,
                budget: false,
                message,
            }) => {
                assert!((59..=60).contains(&retry_after), "{retry_after}");
                assert!(message.contains("3 requests per minute"), "{message}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(counted(&store).await, 3);
    }

    #[test]
    fn durations_read_as_openai_writes_them() {
        assert_eq!(duration(20), "20ms");
        assert_eq!(duration(1_500), "1.5s");
        assert_eq!(duration(360_000), "6m0s");
        assert_eq!(duration(3 * 3_600_000 + 2 * 60_000 + 1_000), "3h2m1s");
    }
}
