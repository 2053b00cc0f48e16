//! Teams and registries, their members and roles, and projects.

use async_trait::async_trait;

use super::Postgres;
use super::shared::Db;
use super::shared::{group, i, kind_text, member, project, q, to_json};
use crate::model::{Group, GroupKind, Member, Project, RateLimits};
use crate::store::records::*;
use crate::store::{Result, changes};

#[async_trait]
impl GroupRecords for Postgres {
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
        let sql = "SELECT * FROM groups WHERE kind = $1 AND name = $2";
        self.optional(q(sql, &[kind_text(kind), name]), group).await
    }

    async fn groups(&self, kind: GroupKind) -> Result<Vec<Group>> {
        let sql = "SELECT * FROM groups WHERE kind = $1 ORDER BY name";
        self.all(q(sql, &[kind_text(kind)]), group).await
    }

    async fn member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<Option<Member>> {
        let sql = "SELECT * FROM members WHERE kind = $1 AND group_name = $2 AND user_id = $3";
        let query = q(sql, &[kind_text(kind), group, user_id]);
        self.optional(query, member).await
    }

    async fn members(&self, kind: GroupKind, group: &str) -> Result<Vec<Member>> {
        let sql = "SELECT * FROM members WHERE kind = $1 AND group_name = $2 ORDER BY user_id";
        self.all(q(sql, &[kind_text(kind), group]), member).await
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
        self.execute(
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
            .bind(i(member.added_at)),
        )
        .await?;
        self.changed(changes::path(
            "members",
            &[kind_text(kind), group, member.user_id.as_str()],
        ));
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
        self.changed(changes::path("members", &[kind_text(kind), group, user_id]));
        Ok(done.rows_affected() > 0)
    }

    async fn insert_project(&self, p: &Project) -> Result<bool> {
        Ok(self.insert("projects", &[], p, "DO NOTHING").await? == 1)
    }

    async fn project(&self, team: &str, name: &str) -> Result<Option<Project>> {
        self.team_row("projects", team, name, project).await
    }

    async fn projects(&self, team: &str) -> Result<Vec<Project>> {
        self.team_rows("projects", team, project).await
    }

    async fn set_project_limits(
        &self,
        team: &str,
        name: &str,
        limits: &RateLimits,
    ) -> Result<bool> {
        let sql = "UPDATE projects SET limits = $3 WHERE team = $1 AND name = $2";
        let changed = self
            .execute(
                sqlx::query(sql)
                    .bind(team)
                    .bind(name)
                    .bind(to_json(limits)?),
            )
            .await?;
        self.changed(changes::path("projects", &[team, name]));
        Ok(changed > 0)
    }

    async fn delete_project(&self, team: &str, name: &str) -> Result<bool> {
        self.delete_team_row("projects", team, name).await
    }
}
