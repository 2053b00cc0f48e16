//! Teams and registries, their members and roles, and projects.

use async_trait::async_trait;

use super::Sled;
use super::T;
use super::decode;
use super::keys::prefix;
use super::shared::{group_trees, last_segment};
use crate::model::{Group, GroupKind, Member, Project, RateLimits};
use crate::store::Result;
use crate::store::records::*;

#[async_trait]
impl GroupRecords for Sled {
    async fn insert_group(&self, kind: GroupKind, group: &Group, first: &Member) -> Result<bool> {
        let (records, members, memberships) = group_trees(kind);
        let w = self.writer().await;
        if w.get(records, group.name.as_bytes())?.is_some() {
            return Ok(false);
        }
        w.put_json(records, group.name.as_bytes(), group)?;
        w.put_json(members, prefix(&[&group.name, &first.user_id]), first)?;
        w.put_json(memberships, prefix(&[&first.user_id, &group.name]), first)?;
        w.finish()?;
        Ok(true)
    }

    async fn group(&self, kind: GroupKind, name: &str) -> Result<Option<Group>> {
        self.get_json(group_trees(kind).0, name.as_bytes())
    }

    async fn groups(&self, kind: GroupKind) -> Result<Vec<Group>> {
        self.scan_json(group_trees(kind).0, &[])
    }

    async fn member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<Option<Member>> {
        self.get_json(group_trees(kind).1, prefix(&[group, user_id]).as_ref())
    }

    async fn members(&self, kind: GroupKind, group: &str) -> Result<Vec<Member>> {
        self.scan_json(group_trees(kind).1, prefix(&[group]).as_ref())
    }

    async fn memberships(&self, kind: GroupKind, user_id: &str) -> Result<Vec<(Group, Member)>> {
        let (records, _, memberships) = group_trees(kind);
        let mut out = Vec::new();
        for (key, value) in self.scan(memberships, prefix(&[user_id]).as_ref())? {
            let member: Member = decode(memberships, &value)?;
            if let Some(group) = self.get_json(records, last_segment(&key).as_bytes())? {
                out.push((group, member));
            }
        }
        Ok(out)
    }

    async fn put_member(&self, kind: GroupKind, group: &str, member: &Member) -> Result<()> {
        let (_, members, memberships) = group_trees(kind);
        let w = self.writer().await;
        w.put_json(members, prefix(&[group, &member.user_id]), member)?;
        w.put_json(memberships, prefix(&[&member.user_id, group]), member)?;
        w.finish()
    }

    async fn delete_member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<bool> {
        let (_, members, memberships) = group_trees(kind);
        let by_group = prefix(&[group, user_id]).into_bytes();
        let w = self.writer().await;
        if w.get(members, &by_group)?.is_none() {
            return Ok(false);
        }
        w.delete(members, by_group);
        w.delete(memberships, prefix(&[user_id, group]).into_bytes());
        w.finish()?;
        Ok(true)
    }

    async fn insert_project(&self, project: &Project) -> Result<bool> {
        self.insert_new(
            T::Projects,
            prefix(&[&project.team, &project.name]),
            project,
        )
        .await
    }

    async fn project(&self, team: &str, name: &str) -> Result<Option<Project>> {
        self.get_json(T::Projects, prefix(&[team, name]).as_ref())
    }

    async fn projects(&self, team: &str) -> Result<Vec<Project>> {
        self.scan_json(T::Projects, prefix(&[team]).as_ref())
    }

    async fn set_project_limits(
        &self,
        team: &str,
        name: &str,
        limits: &RateLimits,
    ) -> Result<bool> {
        let key = prefix(&[team, name]);
        let w = self.writer().await;
        let Some(mut project) = w.get_json::<Project>(T::Projects, key.as_ref())? else {
            return Ok(false);
        };
        project.limits = *limits;
        w.put_json(T::Projects, key.into_bytes(), &project)?;
        w.finish()?;
        Ok(true)
    }

    async fn delete_project(&self, team: &str, name: &str) -> Result<bool> {
        self.remove(T::Projects, prefix(&[team, name])).await
    }
}
