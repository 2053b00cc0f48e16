//! The typed operations as SQL.

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::Postgres;
use crate::model::{
    ApiKey, Attempt, Automation, Collection, Delivery, Event, EventType, Execution, Group,
    GroupKind, Handle, LabelledVersion, Member, Project, Role, Run, Scope, Secret, Session, Status,
    StoredPlugin, Totals, UsageRow, User, Version, Webhook, WebhookRef,
};
use crate::store::{Records, Result, StoreError};

/// Maps a driver error through [`Postgres::err`].
trait Db<T> {
    fn db(self, pg: &Postgres) -> Result<T>;
}

impl<T> Db<T> for std::result::Result<T, sqlx::Error> {
    fn db(self, pg: &Postgres) -> Result<T> {
        self.map_err(|e| pg.err(e))
    }
}

/// A scope as stored: `r/<registry>` or `p/<team>/<project>`.
fn scope_key(scope: &Scope) -> String {
    scope.parts().join("/")
}

fn parse_scope(key: &str) -> Result<Scope> {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["r", registry] => Ok(Scope::Registry {
            registry: registry.to_string(),
        }),
        ["p", team, project] => Ok(Scope::project(team, project)),
        _ => Err(
            anyhow::anyhow!("stored scope '{key}' is not r/<registry> or p/<team>/<project>")
                .into(),
        ),
    }
}

fn kind_text(kind: GroupKind) -> &'static str {
    kind.noun()
}

fn role_of(text: &str) -> Role {
    if text == "admin" {
        Role::Admin
    } else {
        Role::Member
    }
}

fn status_text(status: Status) -> &'static str {
    match status {
        Status::Pending => "Pending",
        Status::Finished => "Finished",
        Status::Failed => "Failed",
    }
}

fn status_of(text: &str) -> Status {
    match text {
        "Finished" => Status::Finished,
        "Failed" => Status::Failed,
        _ => Status::Pending,
    }
}

/// Unsigned counts and times as PostgreSQL's signed integers.
fn i(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn u(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn to_json<T: Serialize>(value: &T) -> Result<String> {
    Ok(serde_json::to_string(value)?)
}

fn from_json<T: DeserializeOwned>(text: &str) -> Result<T> {
    Ok(serde_json::from_str(text)?)
}

fn get<'r, T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>>(
    row: &'r PgRow,
    column: &str,
) -> Result<T> {
    row.try_get(column)
        .map_err(|e| StoreError::Other(anyhow::anyhow!("reading column {column}: {e}")))
}

fn user(row: &PgRow) -> Result<User> {
    Ok(User {
        id: get(row, "id")?,
        name: get(row, "name")?,
        operator: get(row, "operator")?,
        created_at: u(get(row, "created_at")?),
    })
}

fn api_key(row: &PgRow) -> Result<ApiKey> {
    Ok(ApiKey {
        id: get(row, "id")?,
        user_id: get(row, "user_id")?,
        name: get(row, "name")?,
        prefix: get(row, "prefix")?,
        created_at: u(get(row, "created_at")?),
    })
}

fn session(row: &PgRow) -> Result<Session> {
    Ok(Session {
        user_id: get(row, "user_id")?,
        csrf: get(row, "csrf")?,
        created_at: u(get(row, "created_at")?),
        expires_at: u(get(row, "expires_at")?),
    })
}

fn group(row: &PgRow) -> Result<Group> {
    Ok(Group {
        name: get(row, "name")?,
        description: get(row, "description")?,
        created_at: u(get(row, "created_at")?),
    })
}

fn member(row: &PgRow) -> Result<Member> {
    Ok(Member {
        user_id: get(row, "user_id")?,
        user: get(row, "user_name")?,
        role: role_of(&get::<String>(row, "role")?),
        added_at: u(get(row, "added_at")?),
    })
}

fn project(row: &PgRow) -> Result<Project> {
    Ok(Project {
        name: get(row, "name")?,
        team: get(row, "team")?,
        description: get(row, "description")?,
        created_by: get(row, "created_by")?,
        created_at: u(get(row, "created_at")?),
    })
}

fn secret(row: &PgRow) -> Result<Secret> {
    Ok(Secret {
        name: get(row, "name")?,
        sealed: get(row, "sealed")?,
        created_at: u(get(row, "created_at")?),
        updated_at: u(get(row, "updated_at")?),
    })
}

fn webhook(row: &PgRow) -> Result<Webhook> {
    Ok(Webhook {
        name: get(row, "name")?,
        url: get(row, "url")?,
        access_token_secret: get(row, "access_token_secret")?,
        signing_secret: get(row, "signing_secret")?,
        standard_webhooks: get(row, "standard_webhooks")?,
        disabled_reason: get(row, "disabled_reason")?,
        created_at: u(get(row, "created_at")?),
        updated_at: u(get(row, "updated_at")?),
    })
}

fn automation(row: &PgRow) -> Result<Automation> {
    from_json(&get::<String>(row, "record")?)
}

fn collection(row: &PgRow) -> Result<Collection> {
    Ok(Collection {
        name: get(row, "name")?,
        description: get(row, "description")?,
        versions: u(get(row, "versions")?),
        created_by: get(row, "created_by")?,
        created_at: u(get(row, "created_at")?),
    })
}

/// Columns of a version, for `FROM versions v`.
const VERSION_COLUMNS: &str = "v.collection, v.idx, v.metadata::text AS metadata, \
     v.source::text AS source, v.created_by, v.created_at";

/// The same with its aliases and tags.
const LABELLED_VERSION_COLUMNS: &str = "v.collection, v.idx, v.metadata::text AS metadata, \
     v.source::text AS source, v.created_by, v.created_at, \
     ARRAY(SELECT a.alias FROM aliases a WHERE a.scope = v.scope \
           AND a.collection = v.collection AND a.idx = v.idx ORDER BY a.seq) AS aliases, \
     ARRAY(SELECT t.tag FROM tags t WHERE t.scope = v.scope \
           AND t.collection = v.collection AND t.idx = v.idx ORDER BY t.seq) AS tags";

fn labelled_version(row: &PgRow) -> Result<LabelledVersion> {
    Ok(LabelledVersion {
        version: version(row)?,
        aliases: get(row, "aliases")?,
        tags: get(row, "tags")?,
    })
}

fn version(row: &PgRow) -> Result<Version> {
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

fn run(row: &PgRow) -> Result<Run> {
    Ok(Run {
        id: get(row, "id")?,
        name: get(row, "name")?,
        creator: get(row, "creator")?,
        created_at: u(get(row, "created_at")?),
    })
}

fn delivery(row: &PgRow) -> Result<Delivery> {
    Ok(Delivery {
        id: get(row, "id")?,
        execution: Handle {
            scope: parse_scope(&get::<String>(row, "scope")?)?,
            name: get(row, "automation")?,
        },
        execution_id: get(row, "execution_id")?,
        webhook: WebhookRef {
            team: get(row, "webhook_team")?,
            name: get(row, "webhook_name")?,
        },
        body_sealed: get(row, "body_sealed")?,
        attempts: u32::try_from(get::<i32>(row, "attempts")?).unwrap_or(0),
        due_ms: u(get(row, "due_ms")?),
        event_at_ms: u(get(row, "event_at_ms")?),
    })
}

const EXECUTION_COLUMNS: &str = "scope, automation, id, delivery_id, webhook_team, webhook_name, \
     status, error, event::text AS event, payload, attempts::text AS attempts, body_sealed, \
     created_at_ms, updated_at_ms";

fn execution(row: &PgRow) -> Result<Execution> {
    Ok(Execution {
        id: get(row, "id")?,
        delivery_id: get(row, "delivery_id")?,
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
        event: from_json(&get::<String>(row, "event")?)?,
        payload: get(row, "payload")?,
        attempts: from_json(&get::<String>(row, "attempts")?)?,
        body_sealed: get(row, "body_sealed")?,
        created_at_ms: u(get(row, "created_at_ms")?),
        updated_at_ms: u(get(row, "updated_at_ms")?),
    })
}

impl Postgres {
    /// Moves a record that cannot be read into the quarantine, with why.
    async fn quarantine(&self, kind: &str, key: &str, value: &str, reason: &str) -> Result<()> {
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

    /// One version's row, with `columns` (for `FROM versions v`).
    async fn version_row(
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

#[async_trait]
impl Records for Postgres {
    async fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let mut c = self.conn().await?;
        sqlx::query_scalar("SELECT value FROM meta WHERE key = $1")
            .bind(key)
            .fetch_optional(&mut *c)
            .await
            .db(self)
    }

    async fn set_meta(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value)
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn has_users(&self) -> Result<bool> {
        let mut c = self.conn().await?;
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM users)")
            .fetch_one(&mut *c)
            .await
            .db(self)
    }

    async fn insert_user(&self, user: &User) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query(
            "INSERT INTO users (id, name, operator, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&user.id)
        .bind(&user.name)
        .bind(user.operator)
        .bind(i(user.created_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(done.rows_affected() == 1)
    }

    async fn user(&self, id: &str) -> Result<Option<User>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(user).transpose()
    }

    async fn user_named(&self, name: &str) -> Result<Option<User>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM users WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(user).transpose()
    }

    async fn users(&self) -> Result<Vec<User>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM users ORDER BY id")
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(user).collect()
    }

    async fn insert_key(&self, hash: &str, key: &ApiKey) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO api_keys (hash, id, user_id, name, prefix, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(hash)
        .bind(&key.id)
        .bind(&key.user_id)
        .bind(&key.name)
        .bind(&key.prefix)
        .bind(i(key.created_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn key(&self, hash: &str) -> Result<Option<ApiKey>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM api_keys WHERE hash = $1")
            .bind(hash)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(api_key).transpose()
    }

    async fn keys_of(&self, user_id: &str) -> Result<Vec<ApiKey>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM api_keys WHERE user_id = $1 ORDER BY id")
            .bind(user_id)
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(api_key).collect()
    }

    async fn key_hash(&self, user_id: &str, key_id: &str) -> Result<Option<String>> {
        let mut c = self.conn().await?;
        sqlx::query_scalar("SELECT hash FROM api_keys WHERE user_id = $1 AND id = $2")
            .bind(user_id)
            .bind(key_id)
            .fetch_optional(&mut *c)
            .await
            .db(self)
    }

    async fn delete_key(&self, user_id: &str, key_id: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM api_keys WHERE user_id = $1 AND id = $2")
            .bind(user_id)
            .bind(key_id)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_session(&self, hash: &str, session: &Session) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO sessions (hash, user_id, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(hash)
        .bind(&session.user_id)
        .bind(&session.csrf)
        .bind(i(session.created_at))
        .bind(i(session.expires_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn session(&self, hash: &str) -> Result<Option<Session>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM sessions WHERE hash = $1")
            .bind(hash)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(session).transpose()
    }

    async fn delete_session(&self, hash: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM sessions WHERE hash = $1")
            .bind(hash)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_group(&self, kind: GroupKind, group: &Group, first: &Member) -> Result<bool> {
        let mut c = self.conn().await?;
        let created: Option<i32> = sqlx::query_scalar(
            "WITH g AS (INSERT INTO groups (kind, name, description, created_at) \
                        VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING 1), \
                  m AS (INSERT INTO members (kind, group_name, user_id, user_name, role, added_at) \
                        SELECT $1, $2, $5, $6, $7, $8 FROM g RETURNING 1) \
             SELECT 1 FROM g",
        )
        .bind(kind_text(kind))
        .bind(&group.name)
        .bind(&group.description)
        .bind(i(group.created_at))
        .bind(&first.user_id)
        .bind(&first.user)
        .bind(first.role.as_str())
        .bind(i(first.added_at))
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(created.is_some())
    }

    async fn group(&self, kind: GroupKind, name: &str) -> Result<Option<Group>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM groups WHERE kind = $1 AND name = $2")
            .bind(kind_text(kind))
            .bind(name)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(group).transpose()
    }

    async fn groups(&self, kind: GroupKind) -> Result<Vec<Group>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM groups WHERE kind = $1 ORDER BY name")
            .bind(kind_text(kind))
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(group).collect()
    }

    async fn member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<Option<Member>> {
        let mut c = self.conn().await?;
        let row = sqlx::query(
            "SELECT * FROM members WHERE kind = $1 AND group_name = $2 AND user_id = $3",
        )
        .bind(kind_text(kind))
        .bind(group)
        .bind(user_id)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        row.as_ref().map(member).transpose()
    }

    async fn members(&self, kind: GroupKind, group: &str) -> Result<Vec<Member>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(
            "SELECT * FROM members WHERE kind = $1 AND group_name = $2 ORDER BY user_id",
        )
        .bind(kind_text(kind))
        .bind(group)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter().map(member).collect()
    }

    async fn memberships(&self, kind: GroupKind, user_id: &str) -> Result<Vec<(Group, Member)>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(
            "SELECT g.name, g.description, g.created_at, m.user_id, m.user_name, m.role, \
             m.added_at FROM members m JOIN groups g ON g.kind = m.kind AND g.name = m.group_name \
             WHERE m.kind = $1 AND m.user_id = $2 ORDER BY g.name",
        )
        .bind(kind_text(kind))
        .bind(user_id)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter().map(|r| Ok((group(r)?, member(r)?))).collect()
    }

    async fn put_member(&self, kind: GroupKind, group: &str, member: &Member) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO members (kind, group_name, user_id, user_name, role, added_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (kind, group_name, user_id) \
             DO UPDATE SET user_name = excluded.user_name, role = excluded.role, \
             added_at = excluded.added_at",
        )
        .bind(kind_text(kind))
        .bind(group)
        .bind(&member.user_id)
        .bind(&member.user)
        .bind(member.role.as_str())
        .bind(i(member.added_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn delete_member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done =
            sqlx::query("DELETE FROM members WHERE kind = $1 AND group_name = $2 AND user_id = $3")
                .bind(kind_text(kind))
                .bind(group)
                .bind(user_id)
                .execute(&mut *c)
                .await
                .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_project(&self, p: &Project) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query(
            "INSERT INTO projects (team, name, description, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        )
        .bind(&p.team)
        .bind(&p.name)
        .bind(&p.description)
        .bind(&p.created_by)
        .bind(i(p.created_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(done.rows_affected() == 1)
    }

    async fn project(&self, team: &str, name: &str) -> Result<Option<Project>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM projects WHERE team = $1 AND name = $2")
            .bind(team)
            .bind(name)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(project).transpose()
    }

    async fn projects(&self, team: &str) -> Result<Vec<Project>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM projects WHERE team = $1 ORDER BY name")
            .bind(team)
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(project).collect()
    }

    async fn delete_project(&self, team: &str, name: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM projects WHERE team = $1 AND name = $2")
            .bind(team)
            .bind(name)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn put_secret(&self, team: &str, s: &Secret) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO secrets (team, name, sealed, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (team, name) \
             DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at",
        )
        .bind(team)
        .bind(&s.name)
        .bind(&s.sealed)
        .bind(i(s.created_at))
        .bind(i(s.updated_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn secret(&self, team: &str, name: &str) -> Result<Option<Secret>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM secrets WHERE team = $1 AND name = $2")
            .bind(team)
            .bind(name)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(secret).transpose()
    }

    async fn secrets(&self, team: &str) -> Result<Vec<Secret>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM secrets WHERE team = $1 ORDER BY name")
            .bind(team)
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(secret).collect()
    }

    async fn delete_secret(&self, team: &str, name: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM secrets WHERE team = $1 AND name = $2")
            .bind(team)
            .bind(name)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_webhook(&self, team: &str, w: &Webhook) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query(
            "INSERT INTO webhooks (team, name, url, access_token_secret, signing_secret, \
             standard_webhooks, disabled_reason, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
        )
        .bind(team)
        .bind(&w.name)
        .bind(&w.url)
        .bind(&w.access_token_secret)
        .bind(&w.signing_secret)
        .bind(w.standard_webhooks)
        .bind(&w.disabled_reason)
        .bind(i(w.created_at))
        .bind(i(w.updated_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(done.rows_affected() == 1)
    }

    async fn put_webhook(&self, team: &str, w: &Webhook) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO webhooks (team, name, url, access_token_secret, signing_secret, \
             standard_webhooks, disabled_reason, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (team, name) DO UPDATE SET \
             url = excluded.url, access_token_secret = excluded.access_token_secret, \
             signing_secret = excluded.signing_secret, \
             standard_webhooks = excluded.standard_webhooks, \
             disabled_reason = excluded.disabled_reason, updated_at = excluded.updated_at",
        )
        .bind(team)
        .bind(&w.name)
        .bind(&w.url)
        .bind(&w.access_token_secret)
        .bind(&w.signing_secret)
        .bind(w.standard_webhooks)
        .bind(&w.disabled_reason)
        .bind(i(w.created_at))
        .bind(i(w.updated_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn webhook(&self, team: &str, name: &str) -> Result<Option<Webhook>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM webhooks WHERE team = $1 AND name = $2")
            .bind(team)
            .bind(name)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(webhook).transpose()
    }

    async fn webhooks(&self, team: &str) -> Result<Vec<Webhook>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM webhooks WHERE team = $1 ORDER BY name")
            .bind(team)
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(webhook).collect()
    }

    async fn delete_webhook(&self, team: &str, name: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM webhooks WHERE team = $1 AND name = $2")
            .bind(team)
            .bind(name)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn save_automation(&self, replacing: Option<&str>, a: &Automation) -> Result<bool> {
        let scope = scope_key(&a.scope);
        let mut c = self.conn().await?;
        let mut t = sqlx::Connection::begin(&mut *c).await.db(self)?;
        if let Some(old) = replacing {
            sqlx::query("DELETE FROM automations WHERE scope = $1 AND name = $2")
                .bind(&scope)
                .bind(old)
                .execute(&mut *t)
                .await
                .db(self)?;
        }
        let state = match a.state {
            crate::model::State::Active => "active",
            crate::model::State::Disabled => "disabled",
        };
        let done = sqlx::query(
            "INSERT INTO automations (scope, name, event_type, webhook_team, webhook_name, state, \
             record) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT DO NOTHING",
        )
        .bind(&scope)
        .bind(&a.name)
        .bind(a.event.event_type().as_str())
        .bind(&a.webhook.team)
        .bind(&a.webhook.name)
        .bind(state)
        .bind(to_json(a)?)
        .execute(&mut *t)
        .await
        .db(self)?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        t.commit().await.db(self)?;
        Ok(true)
    }

    async fn automation(&self, scope: &Scope, name: &str) -> Result<Option<Automation>> {
        let mut c = self.conn().await?;
        let row = sqlx::query(
            "SELECT record::text AS record FROM automations WHERE scope = $1 AND name = $2",
        )
        .bind(scope_key(scope))
        .bind(name)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        row.as_ref().map(automation).transpose()
    }

    async fn automations(&self, scope: &Scope) -> Result<Vec<Automation>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(
            "SELECT record::text AS record FROM automations WHERE scope = $1 ORDER BY name",
        )
        .bind(scope_key(scope))
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter().map(automation).collect()
    }

    async fn all_automations(&self) -> Result<Vec<Automation>> {
        let mut c = self.conn().await?;
        let rows =
            sqlx::query("SELECT record::text AS record FROM automations ORDER BY scope, name")
                .fetch_all(&mut *c)
                .await
                .db(self)?;
        rows.iter().map(automation).collect()
    }

    async fn triggered(&self, scope: &Scope, event: EventType) -> Result<Vec<Automation>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(
            "SELECT record::text AS record FROM automations \
             WHERE scope = $1 AND event_type = $2 AND state = 'active' ORDER BY name",
        )
        .bind(scope_key(scope))
        .bind(event.as_str())
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter().map(automation).collect()
    }

    async fn listens(&self, scope: &Scope, event: EventType) -> Result<bool> {
        let mut c = self.conn().await?;
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM automations WHERE scope = $1 AND event_type = $2)",
        )
        .bind(scope_key(scope))
        .bind(event.as_str())
        .fetch_one(&mut *c)
        .await
        .db(self)
    }

    async fn automations_using(&self, team: &str, webhook: &str) -> Result<Vec<Handle>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(
            "SELECT scope, name FROM automations WHERE webhook_team = $1 AND webhook_name = $2 \
             ORDER BY scope, name",
        )
        .bind(team)
        .bind(webhook)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter()
            .map(|r| {
                Ok(Handle {
                    scope: parse_scope(&get::<String>(r, "scope")?)?,
                    name: get(r, "name")?,
                })
            })
            .collect()
    }

    async fn delete_automation(&self, scope: &Scope, name: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM automations WHERE scope = $1 AND name = $2")
            .bind(scope_key(scope))
            .bind(name)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_collection(&self, scope: &Scope, col: &Collection) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query(
            "INSERT INTO collections (scope, name, description, versions, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        )
        .bind(scope_key(scope))
        .bind(&col.name)
        .bind(&col.description)
        .bind(i(col.versions))
        .bind(&col.created_by)
        .bind(i(col.created_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(done.rows_affected() == 1)
    }

    async fn collection(&self, scope: &Scope, name: &str) -> Result<Option<Collection>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM collections WHERE scope = $1 AND name = $2")
            .bind(scope_key(scope))
            .bind(name)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(collection).transpose()
    }

    async fn collections(&self, scope: &Scope) -> Result<Vec<Collection>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM collections WHERE scope = $1 ORDER BY name")
            .bind(scope_key(scope))
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(collection).collect()
    }

    async fn next_version(&self, scope: &Scope, name: &str) -> Result<Option<u64>> {
        let mut c = self.conn().await?;
        let index: Option<i64> = sqlx::query_scalar(
            "UPDATE collections SET versions = versions + 1 WHERE scope = $1 AND name = $2 \
             RETURNING versions - 1",
        )
        .bind(scope_key(scope))
        .bind(name)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(index.map(u))
    }

    async fn insert_version(&self, scope: &Scope, v: &Version) -> Result<()> {
        let mut c = self.conn().await?;
        let source = v.source.as_ref().map(to_json).transpose()?;
        sqlx::query(
            "INSERT INTO versions (scope, collection, idx, metadata, source, created_by, \
             created_at) VALUES ($1, $2, $3, $4::jsonb, $5::jsonb, $6, $7)",
        )
        .bind(scope_key(scope))
        .bind(&v.collection)
        .bind(i(v.index))
        .bind(to_json(&v.metadata)?)
        .bind(source)
        .bind(&v.created_by)
        .bind(i(v.created_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn version(&self, scope: &Scope, col: &str, index: u64) -> Result<Option<Version>> {
        let row = self.version_row(VERSION_COLUMNS, scope, col, index).await?;
        row.as_ref().map(version).transpose()
    }

    async fn labelled_version(
        &self,
        scope: &Scope,
        col: &str,
        index: u64,
    ) -> Result<Option<LabelledVersion>> {
        let row = self
            .version_row(LABELLED_VERSION_COLUMNS, scope, col, index)
            .await?;
        row.as_ref().map(labelled_version).transpose()
    }

    async fn versions(&self, scope: &Scope, col: &str) -> Result<Vec<LabelledVersion>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(&format!(
            "SELECT {LABELLED_VERSION_COLUMNS} FROM versions v \
             WHERE v.scope = $1 AND v.collection = $2 ORDER BY v.idx"
        ))
        .bind(scope_key(scope))
        .bind(col)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter().map(labelled_version).collect()
    }

    async fn set_alias(
        &self,
        scope: &Scope,
        col: &str,
        index: u64,
        alias: &str,
    ) -> Result<Option<u64>> {
        let mut c = self.conn().await?;
        // The row as it was before the upsert: its version, if another held it.
        let held: Option<i64> = sqlx::query_scalar(
            "WITH old AS (SELECT idx FROM aliases WHERE scope = $1 AND collection = $2 \
                          AND alias = $3 FOR UPDATE), \
                  up AS (INSERT INTO aliases (scope, collection, alias, idx) \
                         VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (scope, collection, alias) DO UPDATE SET idx = excluded.idx, \
                         seq = CASE WHEN aliases.idx = excluded.idx THEN aliases.seq \
                                    ELSE excluded.seq END) \
             SELECT idx FROM old",
        )
        .bind(scope_key(scope))
        .bind(col)
        .bind(alias)
        .bind(i(index))
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(held.map(u).filter(|old| *old != index))
    }

    async fn add_tag(&self, scope: &Scope, col: &str, index: u64, tag: &str) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO tags (scope, collection, idx, tag) VALUES ($1, $2, $3, $4) \
             ON CONFLICT DO NOTHING",
        )
        .bind(scope_key(scope))
        .bind(col)
        .bind(i(index))
        .bind(tag)
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn insert_run(&self, team: &str, project: &str, r: &Run) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO runs (team, project, id, name, creator, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(team)
        .bind(project)
        .bind(&r.id)
        .bind(&r.name)
        .bind(&r.creator)
        .bind(i(r.created_at))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn run(&self, team: &str, project: &str, id: &str) -> Result<Option<Run>> {
        let mut c = self.conn().await?;
        let row = sqlx::query("SELECT * FROM runs WHERE team = $1 AND project = $2 AND id = $3")
            .bind(team)
            .bind(project)
            .bind(id)
            .fetch_optional(&mut *c)
            .await
            .db(self)?;
        row.as_ref().map(run).transpose()
    }

    async fn runs(&self, team: &str, project: &str) -> Result<Vec<Run>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query("SELECT * FROM runs WHERE team = $1 AND project = $2 ORDER BY id")
            .bind(team)
            .bind(project)
            .fetch_all(&mut *c)
            .await
            .db(self)?;
        rows.iter().map(run).collect()
    }

    async fn push_metric(
        &self,
        team: &str,
        project: &str,
        run: &str,
        metric: &str,
        value: f64,
        keep: usize,
    ) -> Result<Vec<f64>> {
        let mut c = self.conn().await?;
        sqlx::query_scalar(
            "INSERT INTO run_metrics (team, project, run, metric, vals) \
             VALUES ($1, $2, $3, $4, ARRAY[$5::double precision]) \
             ON CONFLICT (team, project, run, metric) DO UPDATE SET vals = \
             (run_metrics.vals || $5::double precision)\
             [greatest(1, cardinality(run_metrics.vals) + 2 - $6):] \
             RETURNING vals",
        )
        .bind(team)
        .bind(project)
        .bind(run)
        .bind(metric)
        .bind(value)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .fetch_one(&mut *c)
        .await
        .db(self)
    }

    async fn metrics(
        &self,
        team: &str,
        project: &str,
        run: &str,
    ) -> Result<Vec<(String, Vec<f64>)>> {
        let mut c = self.conn().await?;
        sqlx::query_as(
            "SELECT metric, vals FROM run_metrics WHERE team = $1 AND project = $2 AND run = $3 \
             ORDER BY metric",
        )
        .bind(team)
        .bind(project)
        .bind(run)
        .fetch_all(&mut *c)
        .await
        .db(self)
    }

    async fn run_fires(&self, automation: &Handle) -> Result<Vec<(String, u64)>> {
        let mut c = self.conn().await?;
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT run, at_ms FROM run_fired WHERE scope = $1 AND automation = $2 ORDER BY run",
        )
        .bind(scope_key(&automation.scope))
        .bind(&automation.name)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        Ok(rows.into_iter().map(|(run, at)| (run, u(at))).collect())
    }

    async fn claim_run_fire(
        &self,
        automation: &Handle,
        run: &str,
        now_ms: u64,
        window_ms: u64,
    ) -> Result<bool> {
        let mut c = self.conn().await?;
        let claimed: Option<i32> = sqlx::query_scalar(
            "INSERT INTO run_fired (scope, automation, run, at_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (scope, automation, run) DO UPDATE SET at_ms = excluded.at_ms \
             WHERE run_fired.at_ms <= excluded.at_ms - $5 RETURNING 1",
        )
        .bind(scope_key(&automation.scope))
        .bind(&automation.name)
        .bind(run)
        .bind(i(now_ms))
        .bind(i(window_ms))
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        Ok(claimed.is_some())
    }

    async fn insert_events(&self, events: &[Event]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
        let bodies = events.iter().map(to_json).collect::<Result<Vec<_>>>()?;
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO event_inbox (id, event) \
             SELECT id, event::jsonb FROM unnest($1::text[], $2::text[]) AS e (id, event)",
        )
        .bind(&ids)
        .bind(&bodies)
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn inbox(&self) -> Result<Vec<Event>> {
        let rows = {
            let mut c = self.conn().await?;
            sqlx::query("SELECT id, event::text AS event FROM event_inbox ORDER BY id")
                .fetch_all(&mut *c)
                .await
                .db(self)?
        };
        let mut out = Vec::new();
        for row in rows {
            let (id, text): (String, String) = (get(&row, "id")?, get(&row, "event")?);
            match serde_json::from_str(&text) {
                Ok(event) => out.push(event),
                Err(e) => {
                    self.quarantine("event_inbox", &id, &text, &e.to_string())
                        .await?;
                    self.take_event(&id).await?;
                }
            }
        }
        Ok(out)
    }

    async fn take_event(&self, id: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM event_inbox WHERE id = $1")
            .bind(id)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_delivery(&self, d: &Delivery) -> Result<()> {
        // Held by this host from the start: it sends the delivery at once.
        let lease_until = crate::ids::now_ms().saturating_add(self.shared.lease_ms);
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO outbox (id, scope, automation, execution_id, webhook_team, webhook_name, \
             body_sealed, attempts, due_ms, lease_owner, lease_until_ms, event_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (id) DO UPDATE SET attempts = excluded.attempts, \
             due_ms = excluded.due_ms, lease_owner = excluded.lease_owner, \
             lease_until_ms = excluded.lease_until_ms",
        )
        .bind(&d.id)
        .bind(scope_key(&d.execution.scope))
        .bind(&d.execution.name)
        .bind(&d.execution_id)
        .bind(&d.webhook.team)
        .bind(&d.webhook.name)
        .bind(&d.body_sealed)
        .bind(i32::try_from(d.attempts).unwrap_or(i32::MAX))
        .bind(i(d.due_ms))
        .bind(&self.shared.host_id)
        .bind(i(lease_until))
        .bind(i(d.event_at_ms))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn due_deliveries(
        &self,
        now_ms: u64,
        limit: usize,
        _skip: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
    ) -> Result<(Vec<Delivery>, Option<u64>)> {
        // This host's deliveries in flight hold live leases, so the claim
        // below never returns them.
        let mut c = self.conn().await?;
        // Claims what is due and not held by a live lease; a host that died
        // holding deliveries lets them go when its leases run out.
        let rows = sqlx::query(
            "UPDATE outbox SET lease_owner = $1, lease_until_ms = $2 + $3 \
             WHERE id IN (SELECT id FROM outbox WHERE due_ms <= $2 \
                          AND (lease_until_ms IS NULL OR lease_until_ms < $2) \
                          ORDER BY due_ms LIMIT $4 FOR UPDATE SKIP LOCKED) \
             RETURNING *",
        )
        .bind(&self.shared.host_id)
        .bind(i(now_ms))
        .bind(i(self.shared.lease_ms))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT min(greatest(due_ms, coalesce(lease_until_ms, 0))) FROM outbox \
             WHERE lease_owner IS DISTINCT FROM $1 OR lease_until_ms < $2",
        )
        .bind(&self.shared.host_id)
        .bind(i(now_ms))
        .fetch_one(&mut *c)
        .await
        .db(self)?;
        let due = rows.iter().map(delivery).collect::<Result<Vec<_>>>()?;
        Ok((due, next.map(u)))
    }

    async fn delivery_waits(&self, d: &Delivery) -> Result<bool> {
        let mut c = self.conn().await?;
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM outbox WHERE id = $1 AND due_ms = $2 AND attempts = $3)",
        )
        .bind(&d.id)
        .bind(i(d.due_ms))
        .bind(i32::try_from(d.attempts).unwrap_or(i32::MAX))
        .fetch_one(&mut *c)
        .await
        .db(self)
    }

    async fn renew_lease(&self, d: &Delivery) -> Result<()> {
        let until = crate::ids::now_ms().saturating_add(self.shared.lease_ms);
        let mut c = self.conn().await?;
        sqlx::query("UPDATE outbox SET lease_until_ms = $3 WHERE id = $1 AND lease_owner = $2")
            .bind(&d.id)
            .bind(&self.shared.host_id)
            .bind(i(until))
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(())
    }

    async fn finish_delivery(&self, d: &Delivery, next: Option<&Delivery>) -> Result<()> {
        let mut c = self.conn().await?;
        match next {
            Some(next) => {
                sqlx::query(
                    "UPDATE outbox SET attempts = $2, due_ms = $3, lease_owner = NULL, \
                     lease_until_ms = NULL WHERE id = $1",
                )
                .bind(&d.id)
                .bind(i32::try_from(next.attempts).unwrap_or(i32::MAX))
                .bind(i(next.due_ms))
                .execute(&mut *c)
                .await
                .db(self)?;
            }
            None => {
                sqlx::query("DELETE FROM outbox WHERE id = $1")
                    .bind(&d.id)
                    .execute(&mut *c)
                    .await
                    .db(self)?;
            }
        }
        Ok(())
    }

    async fn pending_deliveries(&self) -> Result<usize> {
        let mut c = self.conn().await?;
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(&mut *c)
            .await
            .db(self)?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn first_due(&self) -> Result<Option<u64>> {
        let mut c = self.conn().await?;
        let first: Option<i64> = sqlx::query_scalar("SELECT min(due_ms) FROM outbox")
            .fetch_one(&mut *c)
            .await
            .db(self)?;
        Ok(first.map(u))
    }

    async fn put_execution(&self, e: &Execution) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO executions (scope, automation, id, delivery_id, webhook_team, \
             webhook_name, status, error, event, payload, attempts, body_sealed, created_at_ms, \
             updated_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11::jsonb, \
             $12, $13, $14) ON CONFLICT (scope, automation, id) DO UPDATE SET \
             status = excluded.status, error = excluded.error, payload = excluded.payload, \
             attempts = excluded.attempts, body_sealed = excluded.body_sealed, \
             updated_at_ms = excluded.updated_at_ms",
        )
        .bind(scope_key(&e.automation.scope))
        .bind(&e.automation.name)
        .bind(&e.id)
        .bind(&e.delivery_id)
        .bind(&e.webhook.team)
        .bind(&e.webhook.name)
        .bind(status_text(e.status))
        .bind(&e.error)
        .bind(to_json(&e.event)?)
        .bind(&e.payload)
        .bind(to_json(&e.attempts)?)
        .bind(&e.body_sealed)
        .bind(i(e.created_at_ms))
        .bind(i(e.updated_at_ms))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn execution(&self, automation: &Handle, id: &str) -> Result<Option<Execution>> {
        let mut c = self.conn().await?;
        let row = sqlx::query(&format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions \
             WHERE scope = $1 AND automation = $2 AND id = $3"
        ))
        .bind(scope_key(&automation.scope))
        .bind(&automation.name)
        .bind(id)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        row.as_ref().map(execution).transpose()
    }

    async fn executions(&self, automation: &Handle, limit: usize) -> Result<Vec<Execution>> {
        let rows = {
            let mut c = self.conn().await?;
            sqlx::query(&format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions \
                 WHERE scope = $1 AND automation = $2 ORDER BY id DESC LIMIT $3"
            ))
            .bind(scope_key(&automation.scope))
            .bind(&automation.name)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *c)
            .await
            .db(self)?
        };
        let mut out = Vec::new();
        for row in rows {
            match execution(&row) {
                Ok(e) => out.push(e),
                Err(e) => {
                    let id: String = get(&row, "id")?;
                    let text: String = get(&row, "event")?;
                    self.quarantine("executions", &id, &text, &e.to_string())
                        .await?;
                    let mut c = self.conn().await?;
                    sqlx::query(
                        "DELETE FROM executions WHERE scope = $1 AND automation = $2 AND id = $3",
                    )
                    .bind(scope_key(&automation.scope))
                    .bind(&automation.name)
                    .bind(&id)
                    .execute(&mut *c)
                    .await
                    .db(self)?;
                }
            }
        }
        Ok(out)
    }

    async fn record_attempt(
        &self,
        automation: &Handle,
        id: &str,
        status: Status,
        error: Option<&str>,
        attempt: &Attempt,
    ) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query(
            "UPDATE executions SET status = $4, error = $5, \
             attempts = attempts || jsonb_build_array($6::jsonb), updated_at_ms = $7 \
             WHERE scope = $1 AND automation = $2 AND id = $3",
        )
        .bind(scope_key(&automation.scope))
        .bind(&automation.name)
        .bind(id)
        .bind(status_text(status))
        .bind(error)
        .bind(to_json(attempt)?)
        .bind(i(crate::ids::now_ms()))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn add_usage(
        &self,
        scope: &str,
        day: &str,
        model: &str,
        key_id: &str,
        add: &Totals,
    ) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO usage (scope, day, model, key_id, requests, prompt_tokens, \
             completion_tokens, total_tokens) VALUES ($1, $2::date, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (scope, day, model, key_id) DO UPDATE SET \
             requests = usage.requests + excluded.requests, \
             prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens, \
             completion_tokens = usage.completion_tokens + excluded.completion_tokens, \
             total_tokens = usage.total_tokens + excluded.total_tokens",
        )
        .bind(scope)
        .bind(day)
        .bind(model)
        .bind(key_id)
        .bind(i(add.requests))
        .bind(i(add.prompt_tokens))
        .bind(i(add.completion_tokens))
        .bind(i(add.total_tokens))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn usage(&self, scope: &str) -> Result<Vec<UsageRow>> {
        let mut c = self.conn().await?;
        let rows = sqlx::query(
            "SELECT day::text AS day, model, key_id, requests, prompt_tokens, completion_tokens, \
             total_tokens FROM usage WHERE scope = $1 ORDER BY day, model, key_id",
        )
        .bind(scope)
        .fetch_all(&mut *c)
        .await
        .db(self)?;
        rows.iter()
            .map(|r| {
                Ok(UsageRow {
                    day: get(r, "day")?,
                    model: get(r, "model")?,
                    key_id: get(r, "key_id")?,
                    totals: Totals {
                        requests: u(get(r, "requests")?),
                        prompt_tokens: u(get(r, "prompt_tokens")?),
                        completion_tokens: u(get(r, "completion_tokens")?),
                        total_tokens: u(get(r, "total_tokens")?),
                    },
                })
            })
            .collect()
    }

    async fn put_plugin(&self, p: &StoredPlugin) -> Result<()> {
        let mut c = self.conn().await?;
        sqlx::query(
            "INSERT INTO plugins (name, kind, version, sha256, settings, wasm, uploaded_at_ms) \
             VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7) ON CONFLICT (name) DO UPDATE SET \
             kind = excluded.kind, version = excluded.version, sha256 = excluded.sha256, \
             settings = excluded.settings, wasm = excluded.wasm, \
             uploaded_at_ms = excluded.uploaded_at_ms",
        )
        .bind(&p.name)
        .bind(&p.kind)
        .bind(&p.version)
        .bind(&p.sha256)
        .bind(to_json(&p.settings)?)
        .bind(&p.wasm)
        .bind(i(p.uploaded_at_ms))
        .execute(&mut *c)
        .await
        .db(self)?;
        Ok(())
    }

    async fn plugin_digests(&self) -> Result<Vec<(String, String)>> {
        let mut c = self.conn().await?;
        sqlx::query_as("SELECT name, sha256 FROM plugins ORDER BY name")
            .fetch_all(&mut *c)
            .await
            .db(self)
    }

    async fn plugin(&self, name: &str) -> Result<Option<StoredPlugin>> {
        let mut c = self.conn().await?;
        let row = sqlx::query(
            "SELECT name, kind, version, sha256, settings::text AS settings, wasm, uploaded_at_ms \
             FROM plugins WHERE name = $1",
        )
        .bind(name)
        .fetch_optional(&mut *c)
        .await
        .db(self)?;
        row.map(|r| {
            Ok(StoredPlugin {
                name: get(&r, "name")?,
                kind: get(&r, "kind")?,
                version: get(&r, "version")?,
                sha256: get(&r, "sha256")?,
                settings: from_json(&get::<String>(&r, "settings")?)?,
                wasm: get(&r, "wasm")?,
                uploaded_at_ms: u(get(&r, "uploaded_at_ms")?),
            })
        })
        .transpose()
    }

    async fn delete_plugin(&self, name: &str) -> Result<bool> {
        let mut c = self.conn().await?;
        let done = sqlx::query("DELETE FROM plugins WHERE name = $1")
            .bind(name)
            .execute(&mut *c)
            .await
            .db(self)?;
        Ok(done.rows_affected() > 0)
    }

    async fn quarantined(&self) -> Result<usize> {
        let mut c = self.conn().await?;
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM quarantine")
            .fetch_one(&mut *c)
            .await
            .db(self)?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}
