//! `Idempotency-Key`: the same key from the same caller within 24 hours
//! gets the first answer back, and the action is not done again; the same
//! key with another request is refused. Kept in the store, so a replay
//! holds across restarts and hosts.

use crate::error::{Error, Result};
use crate::ids;
use crate::model::Idempotent;
use crate::store::{Claim, Store};
use crate::tasks::{Stage, Tasks};

/// How long a key holds its answer.
pub const KEEP_MS: u64 = 24 * 60 * 60 * 1000;
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;
/// A request that held its key this long without answering was cut off
/// (its host stopped).
const STALLED_MS: u64 = 5 * 60 * 1000;

/// What to do with a request under a key.
pub enum Begun {
    /// Carry it out, then [`finish`] with its answer.
    Run(Ticket),
    /// Answer this (status, JSON body) without carrying it out.
    Replay(u16, String),
}

/// A claimed key, for [`finish`].
pub struct Ticket {
    key: String,
    request: Idempotent,
}

/// Refuses a key that is empty, too long, or not visible ASCII.
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::invalid(
            "Idempotency-Key",
            format!(
                "an Idempotency-Key is 1 to {MAX_KEY_LEN} visible ASCII characters, such as a UUID"
            ),
        ));
    }
    Ok(())
}

/// Claims `key` for `caller`'s request with `fingerprint`, or says what
/// the first request with it answered.
pub async fn begin(store: &Store, caller: &str, key: &str, fingerprint: String) -> Result<Begun> {
    check_key(key)?;
    let key = format!("{caller}:{key}");
    let now = ids::now_ms();
    let request = Idempotent {
        fingerprint,
        at_ms: now,
        status: None,
        body: None,
    };
    let held = match store
        .claim_idempotency(&key, &request, now.saturating_sub(KEEP_MS))
        .await?
    {
        Claim::Claimed => return Ok(Begun::Run(Ticket { key, request })),
        Claim::Held(held) => held,
    };
    if held.fingerprint != request.fingerprint {
        return Err(Error::IdempotencyKeyReused(
            "this Idempotency-Key was sent with a different request in the last 24 hours; use a new key for a new request".into(),
        ));
    }
    match (held.status, held.body) {
        (Some(status), Some(body)) => Ok(Begun::Replay(status, body)),
        _ if now.saturating_sub(held.at_ms) > STALLED_MS => Err(Error::Conflict(
            "the first request with this Idempotency-Key never answered (its host stopped), so whether it took effect is unknown; check, then send a new key".into(),
        )),
        _ => Err(Error::Conflict(
            "a request with this Idempotency-Key is still being carried out; retry once it has answered".into(),
        )),
    }
}

/// Keeps a success for replays. An error lets the key go instead: the
/// request did nothing (as Stripe keeps no answer a request that never ran
/// gave), so sending it again runs it again.
pub async fn finish(store: &Store, ticket: Ticket, status: u16, body: String) -> Result<()> {
    if !(200..300).contains(&status) {
        return Ok(store.settle_idempotency(&ticket.key, None).await?);
    }
    let answered = Idempotent {
        status: Some(status),
        body: Some(body),
        ..ticket.request
    };
    Ok(store
        .settle_idempotency(&ticket.key, Some(&answered))
        .await?)
}

/// How often lapsed keys are swept.
pub const SWEEP: std::time::Duration = std::time::Duration::from_secs(3600);

/// Forgets lapsed keys every `every`, from now on: a claim takes over a
/// lapsed key anyway, so this only keeps the store from growing.
pub fn spawn_sweeper(tasks: &Tasks, store: Store, every: std::time::Duration) {
    tasks.spawn(Stage::Upkeep, async move {
        loop {
            let before = ids::now_ms().saturating_sub(KEEP_MS);
            match store.purge_idempotency(before).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(keys = n, "forgot lapsed idempotency keys"),
                Err(e) => tracing::warn!(error = %e, "forgetting lapsed idempotency keys failed"),
            }
            tokio::time::sleep(every).await;
        }
    });
}
