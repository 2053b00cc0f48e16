//! What the aggregates' SQL shares: row mapping, conversions, and the
//! three shapes most statements take ([`Postgres::optional`], [`Postgres::all`],
//! [`Postgres::execute`]).

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::Postgres;
use crate::model::{
    ApiKey, Automation, Collection, Delivery, Execution, Group, GroupKind, Handle, LabelledVersion,
    Member, Project, RateLimits, Role, Run, RunState, Scope, SealedBody, Secret, Session, Status,
    User, Version, Webhook, WebhookRef,
};
use crate::store::{Result, StoreError, changes};

/// Maps a driver error through [`Postgres::err`].
pub(super) trait Db<T> {
    fn db(self, pg: &Postgres) -> Result<T>;
}

impl<T> Db<T> for std::result::Result<T, sqlx::Error> {
    fn db(self, pg: &Postgres) -> Result<T> {
        self.map_err(|e| pg.err(e))
    }
}

/// A scope as stored: `r/<registry>`, `p/<team>/<project>`, or `c/` and
/// either, then `/<collection>`.
pub(super) fn scope_key(scope: &Scope) -> String {
    scope.parts().join("/")
}

pub(super) fn parse_scope(key: &str) -> Result<Scope> {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["r", registry] => Ok(Scope::Registry {
            registry: registry.to_string(),
        }),
        ["p", team, project] => Ok(Scope::project(team, project)),
        ["t", team] => Ok(Scope::Team {
            team: team.to_string(),
        }),
        ["c", parent @ .., collection] if !parent.is_empty() => {
            let parent = parse_scope(&parent.join("/"))?;
            Ok(Scope::collection(&parent, collection))
        }
        _ => Err(anyhow::anyhow!(
            "stored scope '{key}' is not r/<registry>, p/<team>/<project>, t/<team> or c/<either>/<collection>"
        )
        .into()),
    }
}

pub(super) fn kind_text(kind: GroupKind) -> &'static str {
    kind.noun()
}

pub(super) fn role_of(text: &str) -> Role {
    if text == "admin" {
        Role::Admin
    } else {
        Role::Member
    }
}

pub(super) fn status_text(status: Status) -> &'static str {
    match status {
        Status::Pending => "Pending",
        Status::Finished => "Finished",
        Status::Failed => "Failed",
        Status::Skipped => "Skipped",
    }
}

pub(super) fn status_of(text: &str) -> Status {
    match text {
        "Finished" => Status::Finished,
        "Failed" => Status::Failed,
        "Skipped" => Status::Skipped,
        _ => Status::Pending,
    }
}

/// The path (`store::changes`) of the record of `table` whose naming
/// columns `column` reads, if hosts keep `table`.
pub(super) fn kept_path(table: &str, column: impl Fn(&str) -> Option<String>) -> Option<String> {
    let (_, columns) = changes::KEPT.iter().find(|(t, _)| *t == table)?;
    let parts: Vec<String> = columns.iter().map(|c| column(c)).collect::<Option<_>>()?;
    Some(changes::path(table, &parts))
}

/// Whether each of `asked` is among the `id`s a statement returned (`rows`).
pub(super) fn answered<'a>(
    rows: &[PgRow],
    asked: impl Iterator<Item = &'a str>,
) -> Result<Vec<bool>> {
    let found = (rows.iter().map(|row| get::<String>(row, "id"))).collect::<Result<Vec<_>>>()?;
    let found: std::collections::HashSet<&str> = found.iter().map(String::as_str).collect();
    Ok(asked.map(|id| found.contains(id)).collect())
}

/// Unsigned counts and times as PostgreSQL's signed integers.
pub(super) fn i(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn u(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String> {
    Ok(serde_json::to_string(value)?)
}

pub(super) fn from_json<T: DeserializeOwned>(text: &str) -> Result<T> {
    Ok(serde_json::from_str(text)?)
}

pub(super) fn get<'r, T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>>(
    row: &'r PgRow,
    column: &str,
) -> Result<T> {
    row.try_get(column)
        .map_err(|e| StoreError::Other(anyhow::anyhow!("reading column {column}: {e}")))
}

/// Builds a record from a row whose columns are named as its fields; a field
/// written `field: conv` passes its column through `conv` (`u` for times).
macro_rules! read {
    ($row:expr; $ty:ident { $($field:ident $(: $conv:expr)?),* $(,)? }) => {
        Ok($ty { $($field: read!(@one $row, $field $(, $conv)?)),* })
    };
    (@one $row:expr, $field:ident) => {
        get($row, stringify!($field))?
    };
    (@one $row:expr, $field:ident, $conv:expr) => {
        ($conv)(get($row, stringify!($field))?)
    };
}

pub(super) fn user(row: &PgRow) -> Result<User> {
    read!(row; User { id, name, operator, created_at: u })
}

pub(super) fn api_key(row: &PgRow) -> Result<ApiKey> {
    let list = |column| -> Result<Option<Vec<String>>> {
        let text: Option<String> = get(row, column)?;
        text.as_deref().map(from_json).transpose()
    };
    let number = |column| -> Result<Option<u64>> { Ok(get::<Option<i64>>(row, column)?.map(u)) };
    Ok(ApiKey {
        id: get(row, "id")?,
        user_id: get(row, "user_id")?,
        name: get(row, "name")?,
        prefix: get(row, "prefix")?,
        created_at: u(get(row, "created_at")?),
        models: list("models")?,
        projects: list("projects")?,
        expires_at: number("expires_at")?,
        limits: RateLimits {
            rpm: number("rpm")?,
            tpm: number("tpm")?,
            tokens_per_day: number("tokens_per_day")?,
            usd_per_day: get(row, "usd_per_day")?,
            usd_per_month: get(row, "usd_per_month")?,
        },
    })
}

pub(super) fn session(row: &PgRow) -> Result<Session> {
    read!(row; Session { user_id, key_id, csrf, created_at: u, expires_at: u })
}

pub(super) fn group(row: &PgRow) -> Result<Group> {
    read!(row; Group { name, description, created_at: u })
}

pub(super) fn member(row: &PgRow) -> Result<Member> {
    Ok(Member {
        user_id: get(row, "user_id")?,
        user: get(row, "user_name")?,
        role: role_of(&get::<String>(row, "role")?),
        added_at: u(get(row, "added_at")?),
    })
}

pub(super) fn project(row: &PgRow) -> Result<Project> {
    let limits: Option<String> = get(row, "limits")?;
    let limits = limits.as_deref().map(from_json).transpose()?;
    read!(row; Project {
        name, team, description, created_by, created_at: u,
        limits: |_: Option<String>| limits.unwrap_or_default(),
    })
}

pub(super) fn secret(row: &PgRow) -> Result<Secret> {
    read!(row; Secret { name, sealed, created_at: u, updated_at: u })
}

pub(super) fn webhook(row: &PgRow) -> Result<Webhook> {
    let breaker: Option<String> = get(row, "circuit_breaker")?;
    let breaker = breaker.as_deref().map(from_json).transpose()?;
    let headers: Option<String> = get(row, "headers")?;
    let headers = headers.as_deref().map(from_json).transpose()?;
    let schedule: Option<String> = get(row, "retry_schedule_ms")?;
    let schedule = schedule.as_deref().map(from_json).transpose()?;
    let auth: Option<String> = get(row, "auth")?;
    let auth = auth.as_deref().map(from_json).transpose()?;
    let tls: Option<String> = get(row, "tls")?;
    let tls = tls.as_deref().map(from_json).transpose()?;
    let ordering: Option<String> = get(row, "ordering")?;
    let ordering = match ordering.as_deref() {
        Some("fifo") => crate::model::Ordering::Fifo,
        _ => crate::model::Ordering::Parallel,
    };
    read!(row; Webhook {
        name, url, access_token_secret, signing_secret, standard_webhooks, disabled_reason,
        signing_key_secret, previous_signing_secret, previous_signing_key_secret,
        previous_until: |n: Option<i64>| n.map(u),
        max_per_second, disable_after_hours,
        circuit_breaker: |_: Option<String>| breaker,
        headers: |_: Option<String>| headers.unwrap_or_default(),
        retry_schedule_ms: |_: Option<String>| schedule,
        auth: |_: Option<String>| auth,
        tls: |_: Option<String>| tls,
        ordering: |_: Option<String>| ordering,
        created_at: u, updated_at: u,
    })
}

pub(super) fn automation(row: &PgRow) -> Result<Automation> {
    from_json(&get::<String>(row, "record")?)
}

pub(super) fn collection(row: &PgRow) -> Result<Collection> {
    read!(row; Collection { name, description, versions: u, created_by, created_at: u })
}

/// Columns of a version, for `FROM versions v`.
pub(super) const VERSION_COLUMNS: &str = "v.collection, v.idx, v.metadata::text AS metadata, \
                                          v.source::text AS source, v.created_by, v.created_at";

/// The same with its aliases and tags.
pub(super) const LABELLED_VERSION_COLUMNS: &str = "v.collection, v.idx, v.metadata::text AS metadata, \
                                                   v.source::text AS source, v.created_by, v.created_at, \
                                                   ARRAY(SELECT a.alias FROM aliases a WHERE a.scope = v.scope \
                                                   AND a.collection = v.collection AND a.idx = v.idx ORDER BY a.seq) AS aliases, \
                                                   ARRAY(SELECT t.tag FROM tags t WHERE t.scope = v.scope \
                                                   AND t.collection = v.collection AND t.idx = v.idx ORDER BY t.seq) AS tags";

pub(super) fn labelled_version(row: &PgRow) -> Result<LabelledVersion> {
    Ok(LabelledVersion {
        version: version(row)?,
        aliases: get(row, "aliases")?,
        tags: get(row, "tags")?,
    })
}

pub(super) fn version(row: &PgRow) -> Result<Version> {
    let index = u(get(row, "idx")?);
    let source: Option<String> = get(row, "source")?;
    Ok(Version {
        collection: get(row, "collection")?,
        version: format!("v{index}"),
        index,
        metadata: from_json(&get::<String>(row, "metadata")?)?,
        source: source.as_deref().map(from_json).transpose()?,
        created_by: get(row, "created_by")?,
        created_at: u(get(row, "created_at")?),
    })
}

pub(super) fn run(row: &PgRow) -> Result<Run> {
    Ok(Run {
        id: get(row, "id")?,
        name: get(row, "name")?,
        creator: get(row, "creator")?,
        created_at: u(get(row, "created_at")?),
        state: RunState::parse(&get::<String>(row, "state")?).unwrap_or_default(),
    })
}

pub(super) fn delivery(row: &PgRow) -> Result<Delivery> {
    Ok(Delivery {
        id: get::<String>(row, "id")?.into(),
        automation: Handle {
            scope: parse_scope(&get::<String>(row, "scope")?)?,
            name: get(row, "automation")?,
        },
        execution_id: get::<String>(row, "execution_id")?.into(),
        webhook: WebhookRef {
            team: get(row, "webhook_team")?,
            name: get(row, "webhook_name")?,
        },
        body_sealed: SealedBody::new(get(row, "body_sealed")?),
        attempts: u32::try_from(get::<i32>(row, "attempts")?).unwrap_or(0),
        due_ms: u(get(row, "due_ms")?),
        event_at_ms: u(get(row, "event_at_ms")?),
        fifo: get(row, "fifo")?,
        trace: get(row, "trace")?,
    })
}

/// An execution as read, for a `WHERE` on `e` to follow: its status and
/// error are its last attempt's when that came at or after its own last
/// write (a replay's), and its attempts come from their table, in order.
pub(super) const EXECUTION_SELECT: &str = "SELECT e.scope, e.automation, e.id, e.delivery_id, \
     e.webhook_team, e.webhook_name, coalesce(l.status, e.status) AS status, \
     CASE WHEN l.status IS NULL THEN e.error ELSE l.error END AS error, \
     e.skipped::text AS skipped, e.event::text AS event, e.payload, \
     coalesce((SELECT jsonb_agg(a.attempt ORDER BY a.seq) FROM attempts a \
      WHERE a.scope = e.scope AND a.automation = e.automation AND a.execution_id = e.id), \
      '[]')::text AS attempts, \
     e.body_sealed, e.created_at_ms, greatest(e.updated_at_ms, l.at_ms) AS updated_at_ms \
     FROM executions e LEFT JOIN LATERAL (SELECT a.status, a.error, a.at_ms FROM attempts a \
      WHERE a.scope = e.scope AND a.automation = e.automation AND a.execution_id = e.id \
      ORDER BY a.seq DESC LIMIT 1) l ON l.at_ms >= e.updated_at_ms";

pub(super) fn execution(row: &PgRow) -> Result<Execution> {
    Ok(Execution {
        id: get::<String>(row, "id")?.into(),
        delivery_id: get::<String>(row, "delivery_id")?.into(),
        automation: Handle {
            scope: parse_scope(&get::<String>(row, "scope")?)?,
            name: get(row, "automation")?,
        },
        webhook: WebhookRef {
            team: get(row, "webhook_team")?,
            name: get(row, "webhook_name")?,
        },
        status: status_of(&get::<String>(row, "status")?),
        error: get(row, "error")?,
        skipped: get::<Option<String>>(row, "skipped")?
            .map(|text| from_json(&text))
            .transpose()?,
        event: from_json(&get::<String>(row, "event")?)?,
        payload: get(row, "payload")?,
        attempts: from_json(&get::<String>(row, "attempts")?)?,
        body_sealed: get::<Option<Vec<u8>>>(row, "body_sealed")?.map(SealedBody::new),
        created_at_ms: u(get(row, "created_at_ms")?),
        updated_at_ms: u(get(row, "updated_at_ms")?),
    })
}

/// A statement with its arguments bound.
pub(super) type Query<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Maps a row to a record.
pub(super) type MapRow<T> = fn(&PgRow) -> Result<T>;

/// `sql` with text arguments bound in order.
pub(super) fn q<'q>(sql: &'q str, args: &[&'q str]) -> Query<'q> {
    args.iter()
        .fold(sqlx::query(sql), |query, arg| query.bind(*arg))
}

impl Postgres {
    /// The row `query` finds, if any, as a record.
    pub(super) async fn optional<T>(&self, query: Query<'_>, map: MapRow<T>) -> Result<Option<T>> {
        let mut c = self.conn().await?;
        let row = query.fetch_optional(&mut *c).await.db(self)?;
        row.as_ref().map(map).transpose()
    }

    /// Every row `query` finds, as records.
    pub(super) async fn all<T>(&self, query: Query<'_>, map: MapRow<T>) -> Result<Vec<T>> {
        let mut c = self.conn().await?;
        let rows = query.fetch_all(&mut *c).await.db(self)?;
        rows.iter().map(map).collect()
    }

    /// Runs `query`; how many rows it changed.
    pub(super) async fn execute(&self, query: Query<'_>) -> Result<u64> {
        let mut c = self.conn().await?;
        Ok(query.execute(&mut *c).await.db(self)?.rows_affected())
    }

    /// Writes `record` as a row of `table`, its fields named as the table's
    /// columns; `keys` are the columns it does not carry, and `conflict`
    /// follows `ON CONFLICT` unless empty. How many rows changed.
    pub(super) async fn insert(
        &self,
        table: &str,
        keys: &[(&str, &str)],
        record: &impl Serialize,
        conflict: &str,
    ) -> Result<u64> {
        let mut row = serde_json::to_value(record)?;
        if let Some(fields) = row.as_object_mut() {
            fields.extend(keys.iter().map(|(k, v)| (k.to_string(), (*v).into())));
        }
        let conflict = match conflict {
            "" => String::new(),
            c => format!(" ON CONFLICT {c}"),
        };
        let sql = format!(
            "INSERT INTO {table} SELECT * FROM json_populate_record(NULL::{table}, $1::json){conflict}"
        );
        let changed = self
            .execute(sqlx::query(&sql).bind(row.to_string()))
            .await?;
        self.touched(table, |c| row.get(c)?.as_str().map(str::to_string));
        Ok(changed)
    }

    /// The row of `table` whose `column` holds `value`, if any.
    pub(super) async fn row_by<T>(
        &self,
        table: &str,
        key: (&str, &str),
        map: MapRow<T>,
    ) -> Result<Option<T>> {
        let (column, value) = key;
        let sql = format!("SELECT * FROM {table} WHERE {column} = $1");
        self.optional(q(&sql, &[value]), map).await
    }

    /// The row of `table` (keyed by team and name) named `name`.
    pub(super) async fn team_row<T>(
        &self,
        table: &str,
        team: &str,
        name: &str,
        map: MapRow<T>,
    ) -> Result<Option<T>> {
        let sql = format!("SELECT * FROM {table} WHERE team = $1 AND name = $2");
        self.optional(q(&sql, &[team, name]), map).await
    }

    /// A team's rows of `table`, by name.
    pub(super) async fn team_rows<T>(
        &self,
        table: &str,
        team: &str,
        map: MapRow<T>,
    ) -> Result<Vec<T>> {
        let sql = format!("SELECT * FROM {table} WHERE team = $1 ORDER BY name");
        self.all(q(&sql, &[team]), map).await
    }

    /// Deletes the row of `table` named `name`; `false` if there was none.
    pub(super) async fn delete_team_row(
        &self,
        table: &str,
        team: &str,
        name: &str,
    ) -> Result<bool> {
        let sql = format!("DELETE FROM {table} WHERE team = $1 AND name = $2");
        let deleted = self.execute(q(&sql, &[team, name])).await? > 0;
        self.touched(table, |c| match c {
            "team" => Some(team.to_string()),
            "name" => Some(name.to_string()),
            _ => None,
        });
        Ok(deleted)
    }

    /// Notes a write to the record of `table` whose naming columns
    /// `column` reads (see `store::changes::KEPT`), if hosts keep it.
    pub(super) fn touched(&self, table: &str, column: impl Fn(&str) -> Option<String>) {
        if let Some(path) = kept_path(table, column) {
            self.changed(path);
        }
    }

    /// How many rows `table` holds.
    pub(super) async fn count(&self, table: &str) -> Result<usize> {
        let mut c = self.conn().await?;
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&mut *c)
            .await
            .db(self)?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Moves a record that cannot be read into the quarantine, with why.
    pub(super) async fn quarantine(
        &self,
        kind: &str,
        key: &str,
        value: &str,
        reason: &str,
    ) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO quarantine (kind, key, reason, at_ms, value) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(kind)
        .bind(key)
        .bind(reason)
        .bind(i(crate::ids::now_ms()))
        .bind(value)
        .execute(&mut *c)
        .await
        .db(self)?;
        tracing::error!(
            table = kind,
            key,
            reason,
            "set an unreadable record aside in the quarantine"
        );
        Ok(())
    }

    /// Moves the row `id` of `table` (one of ours, keyed by `id`), which
    /// cannot be read, into the quarantine as JSON, with why.
    pub(super) async fn quarantine_row(&self, table: &str, id: &str, reason: &str) -> Result<()> {
        let sql = format!(
            "WITH gone AS (DELETE FROM {table} WHERE id = $1 RETURNING *) \
             INSERT INTO quarantine (kind, key, reason, at_ms, value) \
             SELECT $2, id, $3, $4, row_to_json(gone)::text FROM gone"
        );
        let mut c = self.conn().await?;
        sqlx::query(&sql)
            .bind(id)
            .bind(table)
            .bind(reason)
            .bind(i(crate::ids::now_ms()))
            .execute(&mut *c)
            .await
            .db(self)?;
        tracing::error!(
            table,
            key = id,
            reason,
            "set an unreadable record aside in the quarantine"
        );
        Ok(())
    }

    /// One version's row, with `columns` (for `FROM versions v`).
    pub(super) async fn version_row(
        &self,
        columns: &str,
        scope: &Scope,
        col: &str,
        index: u64,
    ) -> Result<Option<PgRow>> {
        let mut c = self.conn().await?;
        sqlx::query(&format!(
            "SELECT {columns} FROM versions v \
             WHERE v.scope = $1 AND v.collection = $2 AND v.idx = $3"
        ))
        .bind(scope_key(scope))
        .bind(col)
        .bind(i(index))
        .fetch_optional(&mut *c)
        .await
        .db(self)
    }
}
