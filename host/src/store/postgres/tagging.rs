//! Tag requests written together: each request's tags and their events
//! wait for the one statement in flight, and the next statement writes
//! every request that came meanwhile, with one commit (a group commit, as
//! the embedded store's). Under load a tag costs a fraction of a
//! statement; alone, one statement, as before.

use tokio::sync::{mpsc, oneshot};

use super::shared::i;

/// One request: its version, tags, and events (ids and JSON bodies).
pub(super) struct Tagged {
    pub scope: String,
    pub collection: String,
    pub index: u64,
    pub tags: Vec<String>,
    pub ids: Vec<String>,
    pub bodies: Vec<String>,
}

/// A request waiting, and where to say whether its version was there (and
/// so its tags and events written).
pub(super) type Job = (Tagged, oneshot::Sender<Result<bool, sqlx::Error>>);

/// Most requests in one statement.
const MOST: usize = 256;

/// The writer's end: jobs go in here. The task ends when it is dropped.
pub(super) type Jobs = mpsc::UnboundedSender<Job>;

/// Starts the writer on `pool`.
pub(super) fn start(pool: sqlx::PgPool) -> Jobs {
    let (jobs, mut queued) = mpsc::unbounded_channel::<Job>();
    tokio::spawn(async move {
        let mut batch = Vec::new();
        while queued.recv_many(&mut batch, MOST).await > 0 {
            write(&pool, std::mem::take(&mut batch)).await;
        }
    });
    jobs
}

/// No tag or event without its version. Versions are never deleted, so
/// the check needs no lock (a row lock writes the version's page);
/// deleting collections would need `FOR KEY SHARE` here.
const SQL: &str = "WITH r AS (SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::bigint[]) \
     AS r (req, scope, collection, idx)), \
     v AS (SELECT r.* FROM r WHERE EXISTS (SELECT 1 FROM versions s \
      WHERE s.scope = r.scope AND s.collection = r.collection AND s.idx = r.idx)), \
     t AS (INSERT INTO tags (scope, collection, idx, tag) \
      SELECT v.scope, v.collection, v.idx, x.tag \
      FROM unnest($5::int[], $6::text[]) WITH ORDINALITY AS x (req, tag, n) JOIN v USING (req) \
      ORDER BY x.n ON CONFLICT DO NOTHING), \
     e AS (INSERT INTO event_inbox (id, event) SELECT x.id, x.event::jsonb \
      FROM unnest($7::int[], $8::text[], $9::text[]) AS x (req, id, event) JOIN v USING (req)) \
     SELECT req FROM v";

/// Writes `batch` in one statement and answers each job.
async fn write(pool: &sqlx::PgPool, batch: Vec<Job>) {
    let (tagged, answers): (Vec<Tagged>, Vec<_>) = batch.into_iter().unzip();
    let found = query(&tagged).fetch_all(pool).await;
    for (n, answer) in answers.into_iter().enumerate() {
        let found = match &found {
            Ok(found) => Ok(found.contains(&i32::try_from(n).unwrap_or(i32::MAX))),
            Err(e) => Err(copy(e)),
        };
        let _ = answer.send(found);
    }
}

/// The statement for `batch`: the indexes of the requests whose version
/// was there.
pub(super) fn query(
    batch: &[Tagged],
) -> sqlx::query::QueryScalar<'_, sqlx::Postgres, i32, sqlx::postgres::PgArguments> {
    // One array a column: each request, each tag, each event (the last two
    // by their request's index).
    let mut requests: (Vec<i32>, Vec<&str>, Vec<&str>, Vec<i64>) = Default::default();
    let mut tags: (Vec<i32>, Vec<&str>) = Default::default();
    let mut events: (Vec<i32>, Vec<&str>, Vec<&str>) = Default::default();
    for (n, job) in batch.iter().enumerate() {
        let n = i32::try_from(n).unwrap_or(i32::MAX);
        requests.0.push(n);
        requests.1.push(&job.scope);
        requests.2.push(&job.collection);
        requests.3.push(i(job.index));
        for tag in &job.tags {
            tags.0.push(n);
            tags.1.push(tag);
        }
        for (id, body) in job.ids.iter().zip(&job.bodies) {
            events.0.push(n);
            events.1.push(id);
            events.2.push(body);
        }
    }
    sqlx::query_scalar(SQL)
        .bind(requests.0)
        .bind(requests.1)
        .bind(requests.2)
        .bind(requests.3)
        .bind(tags.0)
        .bind(tags.1)
        .bind(events.0)
        .bind(events.1)
        .bind(events.2)
}

/// A batch's error for each of its jobs: sqlx's errors do not clone, so
/// each gets one that maps as the original would (the database
/// unreachable, or a statement that failed).
fn copy(e: &sqlx::Error) -> sqlx::Error {
    if super::is_unavailable(e) {
        let lost = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, e.to_string());
        return sqlx::Error::Io(lost);
    }
    sqlx::Error::Protocol(e.to_string())
}
