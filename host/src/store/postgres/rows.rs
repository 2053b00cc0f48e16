//! The delivery path's rows written set-wise: each statement takes one
//! array a column and `unnest`s them, binary on the wire, whatever the
//! batch's size. Each is written once here and used alone or joined with
//! others into one statement (`Engine::write_fired`, `write_outcomes`), so
//! its parameters start where the caller says.

use super::shared::{Query, i, scope_key, status_text, to_json};
use crate::model::{Delivery, Execution, SealedBody};
use crate::store::records::AttemptFor;
use crate::store::{Finished, Result};

/// `unnest($first::type[], …) AS alias (column, …)`, `jsonb` columns sent
/// as text.
fn unnest(columns: &[(&str, &str)], first: usize, alias: &str) -> String {
    let arrays: Vec<String> = (columns.iter().enumerate())
        .map(|(k, (_, ty))| {
            let sent = if *ty == "jsonb" { "text" } else { ty };
            format!("${}::{sent}[]", first + k)
        })
        .collect();
    let names: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
    format!(
        "unnest({}) AS {alias} ({})",
        arrays.join(", "),
        names.join(", ")
    )
}

/// The select list for `columns` of [`unnest`]'s rows, casting `jsonb` ones.
fn select(columns: &[(&str, &str)], alias: &str) -> String {
    let each: Vec<String> = (columns.iter())
        .map(|(column, ty)| match *ty {
            "jsonb" => format!("{alias}.{column}::jsonb"),
            _ => format!("{alias}.{column}"),
        })
        .collect();
    each.join(", ")
}

/// An execution's columns as written, with their types; then the event it
/// was fired by (`taken_by`, not stored: what a joined write filters on).
const EXECUTION: &[(&str, &str)] = &[
    ("scope", "text"),
    ("automation", "text"),
    ("id", "text"),
    ("delivery_id", "text"),
    ("webhook_team", "text"),
    ("webhook_name", "text"),
    ("status", "text"),
    ("error", "text"),
    ("skipped", "jsonb"),
    ("event", "jsonb"),
    ("payload", "text"),
    ("body_sealed", "bytea"),
    ("created_at_ms", "bigint"),
    ("updated_at_ms", "bigint"),
    ("taken_by", "text"),
];

/// Writes executions from parameters `$first…` ([`bind_executions`]),
/// those `filter` (a `WHERE` on `e`, or "") keeps; one already written is
/// replaced (its attempts stay, in their own table). Returns each one's
/// key and whether it is new (`fresh`).
pub(super) fn executions_insert(first: usize, filter: &str) -> String {
    let stored = &EXECUTION[..EXECUTION.len() - 1];
    let names: Vec<&str> = stored.iter().map(|(c, _)| *c).collect();
    let (from, select) = (unnest(EXECUTION, first, "e"), select(stored, "e"));
    format!(
        "INSERT INTO executions ({}) SELECT {select} FROM {from} {filter} \
         ON CONFLICT (scope, automation, id) DO UPDATE SET \
         status = excluded.status, error = excluded.error, skipped = excluded.skipped, \
         payload = excluded.payload, body_sealed = excluded.body_sealed, \
         updated_at_ms = excluded.updated_at_ms \
         RETURNING scope, automation, id, (xmax = 0) AS fresh",
        names.join(", ")
    )
}

/// Binds [`executions_insert`]'s parameters; `taken_by[k]` is the event
/// execution `k` was fired by (empty when nothing filters on it).
pub(super) fn bind_executions<'q>(
    q: Query<'q>,
    executions: &'q [Execution],
    taken_by: Vec<&'q str>,
) -> Result<Query<'q>> {
    let text = |f: fn(&Execution) -> String| executions.iter().map(f).collect::<Vec<_>>();
    let time = |f: fn(&Execution) -> u64| executions.iter().map(|e| i(f(e))).collect::<Vec<_>>();
    let skipped = executions
        .iter()
        .map(|e| e.skipped.as_ref().map(to_json).transpose())
        .collect::<Result<Vec<_>>>()?;
    let events = executions
        .iter()
        .map(|e| to_json(&e.event))
        .collect::<Result<Vec<_>>>()?;
    let bodies: Vec<Option<&[u8]>> = executions
        .iter()
        .map(|e| e.body_sealed.as_ref().map(SealedBody::bytes))
        .collect();
    Ok(q.bind(text(|e| scope_key(&e.automation.scope)))
        .bind(text(|e| e.automation.name.clone()))
        .bind(text(|e| e.id.to_string()))
        .bind(text(|e| e.delivery_id.to_string()))
        .bind(text(|e| e.webhook.team.clone()))
        .bind(text(|e| e.webhook.name.clone()))
        .bind(text(|e| status_text(e.status).to_string()))
        .bind(
            executions
                .iter()
                .map(|e| e.error.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(skipped)
        .bind(events)
        .bind(
            executions
                .iter()
                .map(|e| e.payload.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(bodies)
        .bind(time(|e| e.created_at_ms))
        .bind(time(|e| e.updated_at_ms))
        .bind(taken_by))
}

/// A delivery's columns as sent, with their types; then the event it was
/// fired by, as for executions.
const DELIVERY: &[(&str, &str)] = &[
    ("id", "text"),
    ("scope", "text"),
    ("automation", "text"),
    ("execution_id", "text"),
    ("webhook_team", "text"),
    ("webhook_name", "text"),
    ("body_sealed", "bytea"),
    ("attempts", "int"),
    ("due_ms", "bigint"),
    ("event_at_ms", "bigint"),
    ("fifo", "text"),
    ("trace", "text"),
    ("taken_by", "text"),
];

/// Queues deliveries from parameters `$first…` ([`bind_deliveries`]),
/// those `filter` keeps. Those due within the lease are held by the host
/// writing them from the start: it sends them at once, and no claim sees
/// them until the lease runs out. Not a FIFO webhook's, which wait for
/// their turn in the scan's claim, nor one due later, which waits for it.
pub(super) fn outbox_insert(first: usize, filter: &str) -> String {
    let from = unnest(DELIVERY, first, "d");
    let (host, until) = (first + DELIVERY.len(), first + DELIVERY.len() + 1);
    format!(
        "INSERT INTO outbox (id, scope, automation, execution_id, webhook_team, \
         webhook_name, body_sealed, attempts, due_ms, lease_owner, visible_at, \
         event_at_ms, fifo, trace) \
         SELECT d.id, d.scope, d.automation, d.execution_id, d.webhook_team, \
         d.webhook_name, d.body_sealed, d.attempts, d.due_ms, \
         CASE WHEN d.fifo IS NULL AND d.due_ms < ${until} THEN ${host} END, \
         CASE WHEN d.fifo IS NULL AND d.due_ms < ${until} THEN ${until} ELSE d.due_ms END, \
         d.event_at_ms, d.fifo, d.trace FROM {from} {filter} \
         ON CONFLICT (id) DO UPDATE SET attempts = excluded.attempts, \
         due_ms = excluded.due_ms, lease_owner = excluded.lease_owner, \
         visible_at = excluded.visible_at, fifo = excluded.fifo"
    )
}

/// Where a delivery's body is written.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Body {
    /// In the outbox row.
    Here,
    /// Only in its execution's row, written in the same statement.
    WithExecution,
}

/// Binds [`outbox_insert`]'s parameters: the deliveries, the events they
/// were fired by, where their bodies go, and the lease (`host` until unix
/// ms `until`).
pub(super) fn bind_deliveries<'q>(
    q: Query<'q>,
    (deliveries, body): (&'q [Delivery], Body),
    taken_by: Vec<&'q str>,
    (host, until): (&'q str, u64),
) -> Query<'q> {
    let text = |f: fn(&Delivery) -> String| deliveries.iter().map(f).collect::<Vec<_>>();
    let time = |f: fn(&Delivery) -> u64| deliveries.iter().map(|d| i(f(d))).collect::<Vec<_>>();
    let attempts: Vec<i32> = deliveries
        .iter()
        .map(|d| i32::try_from(d.attempts).unwrap_or(i32::MAX))
        .collect();
    q.bind(text(|d| d.id.to_string()))
        .bind(text(|d| scope_key(&d.automation.scope)))
        .bind(text(|d| d.automation.name.clone()))
        .bind(text(|d| d.execution_id.to_string()))
        .bind(text(|d| d.webhook.team.clone()))
        .bind(text(|d| d.webhook.name.clone()))
        .bind(
            deliveries
                .iter()
                .map(|d| (body == Body::Here).then(|| d.body_sealed.bytes()))
                .collect::<Vec<_>>(),
        )
        .bind(attempts)
        .bind(time(|d| d.due_ms))
        .bind(time(|d| d.event_at_ms))
        .bind(
            deliveries
                .iter()
                .map(|d| d.fifo.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            deliveries
                .iter()
                .map(|d| d.trace.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(taken_by)
        .bind(host)
        .bind(i(until))
}

/// Parameters [`executions_insert`] takes.
pub(super) const EXECUTION_PARAMS: usize = EXECUTION.len();

/// Deletes the deliveries sent for good (`$first`: their ids), and moves
/// those rescheduled to their next due time (`$first + 1…`: ids, attempts,
/// due times): visible again then, held by no host.
pub(super) fn finish(first: usize) -> (String, String) {
    let (gone, ids, attempts, due) = (first, first + 1, first + 2, first + 3);
    (
        format!("DELETE FROM outbox WHERE id = ANY(${gone})"),
        format!(
            "UPDATE outbox o SET attempts = r.attempts, due_ms = r.due_ms, \
             lease_owner = NULL, visible_at = r.due_ms \
             FROM unnest(${ids}::text[], ${attempts}::int[], ${due}::bigint[]) \
             AS r (id, attempts, due_ms) WHERE o.id = r.id"
        ),
    )
}

/// Binds [`finish`]'s parameters.
pub(super) fn bind_finish<'q>(q: Query<'q>, finished: &'q [Finished<'q>]) -> Query<'q> {
    let done: Vec<&str> = finished
        .iter()
        .filter(|(_, next)| next.is_none())
        .map(|(d, _)| d.id.as_str())
        .collect();
    let retried: Vec<&Delivery> = finished.iter().filter_map(|(_, next)| *next).collect();
    q.bind(done)
        .bind(retried.iter().map(|d| d.id.as_str()).collect::<Vec<_>>())
        .bind(
            retried
                .iter()
                .map(|d| i32::try_from(d.attempts).unwrap_or(i32::MAX))
                .collect::<Vec<_>>(),
        )
        .bind(retried.iter().map(|d| i(d.due_ms)).collect::<Vec<_>>())
}

/// Parameters [`finish`] takes.
pub(super) const FINISH_PARAMS: usize = 4;

/// Appends each attempt to its execution's, with the status and error it
/// leaves (`$first…`), at unix ms `$first + 6` or the execution's own last
/// write if later (a replay on a host whose clock is ahead must not hide
/// the attempt); returns the ids of the executions found (an attempt for
/// one that is gone is not written).
pub(super) fn attempts_insert(first: usize) -> String {
    let p: Vec<usize> = (first..first + 7).collect();
    format!(
        "INSERT INTO attempts (scope, automation, execution_id, status, error, at_ms, attempt) \
         SELECT a.scope, a.automation, a.id, a.status, a.error, \
         greatest(${}, e.updated_at_ms), a.attempt::jsonb \
         FROM unnest(${}::text[], ${}::text[], ${}::text[], ${}::text[], ${}::text[], ${}::text[]) \
         WITH ORDINALITY AS a (scope, automation, id, status, error, attempt, n) \
         JOIN executions e ON e.scope = a.scope AND e.automation = a.automation AND e.id = a.id \
         ORDER BY a.n RETURNING execution_id AS id",
        p[6], p[0], p[1], p[2], p[3], p[4], p[5]
    )
}

/// The attempts executions carry when first written (a copy from another
/// store; a new one has none), from `$first…`, for those the statement's
/// `ex` (an [`executions_insert`]) wrote new.
pub(super) fn carried_attempts_insert(first: usize) -> String {
    let p: Vec<usize> = (first..first + 7).collect();
    format!(
        "INSERT INTO attempts (scope, automation, execution_id, status, error, at_ms, attempt) \
         SELECT x.scope, x.automation, x.id, x.status, x.error, x.at_ms, x.attempt::jsonb \
         FROM unnest(${}::text[], ${}::text[], ${}::text[], ${}::text[], ${}::text[], \
         ${}::bigint[], ${}::text[]) WITH ORDINALITY \
         AS x (scope, automation, id, status, error, at_ms, attempt, n) \
         JOIN ex ON ex.scope = x.scope AND ex.automation = x.automation AND ex.id = x.id \
         WHERE ex.fresh ORDER BY x.n",
        p[0], p[1], p[2], p[3], p[4], p[5], p[6]
    )
}

/// Binds [`carried_attempts_insert`]'s parameters: every attempt of each
/// execution, with the execution's status and error (the last decides).
pub(super) fn bind_carried<'q>(q: Query<'q>, executions: &'q [Execution]) -> Result<Query<'q>> {
    let carried: Vec<(&Execution, &crate::model::Attempt)> = executions
        .iter()
        .flat_map(|e| e.attempts.iter().map(move |a| (e, a)))
        .collect();
    let attempts = carried
        .iter()
        .map(|(_, a)| to_json(a))
        .collect::<Result<Vec<_>>>()?;
    let of = |f: fn(&Execution) -> String| carried.iter().map(|(e, _)| f(e)).collect::<Vec<_>>();
    Ok(q.bind(of(|e| scope_key(&e.automation.scope)))
        .bind(of(|e| e.automation.name.clone()))
        .bind(of(|e| e.id.to_string()))
        .bind(of(|e| status_text(e.status).to_string()))
        .bind(
            carried
                .iter()
                .map(|(e, _)| e.error.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            carried
                .iter()
                .map(|(e, _)| i(e.updated_at_ms))
                .collect::<Vec<_>>(),
        )
        .bind(attempts))
}

/// Binds [`attempts_insert`]'s parameters, at `now_ms`.
pub(super) fn bind_attempts<'q>(
    q: Query<'q>,
    attempts: &'q [AttemptFor<'q>],
    now_ms: u64,
) -> Result<Query<'q>> {
    let added = attempts
        .iter()
        .map(|a| to_json(a.attempt))
        .collect::<Result<Vec<_>>>()?;
    Ok(q.bind(
        attempts
            .iter()
            .map(|a| scope_key(&a.automation.scope))
            .collect::<Vec<_>>(),
    )
    .bind(
        attempts
            .iter()
            .map(|a| a.automation.name.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        attempts
            .iter()
            .map(|a| a.execution_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        attempts
            .iter()
            .map(|a| status_text(a.status))
            .collect::<Vec<_>>(),
    )
    .bind(attempts.iter().map(|a| a.error).collect::<Vec<_>>())
    .bind(added)
    .bind(i(now_ms)))
}
