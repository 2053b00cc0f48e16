//! Teams and registries: named groups of users, each member with a role.
//!
//! Both work the same way, so one module serves both through [`Group`].
//! Visibility is by membership: a user who is not in a group is told it does
//! not exist (404), so names do not leak across groups. A member who lacks
//! the role for an action gets 403. Operators act as admins of every group.

use serde::{Deserialize, Serialize};
use sled::Transactional;

use crate::auth::User;
use crate::error::{Error, Result};
use crate::store::{self, Store, keys};
use crate::{ids, names};

/// Which kind of group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// A team: owns projects, secrets and webhooks.
    Team,
    /// A registry: holds collections shared across teams; its admins manage
    /// its automations.
    Registry,
}

impl Group {
    /// `team` or `registry`, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            Group::Team => "team",
            Group::Registry => "registry",
        }
    }

    fn list_path(self) -> &'static str {
        match self {
            Group::Team => "/v1/teams",
            Group::Registry => "/v1/registries",
        }
    }

    /// The records, members-by-group and members-by-user trees.
    fn trees(self, store: &Store) -> (&sled::Tree, &sled::Tree, &sled::Tree) {
        let t = &store.trees;
        match self {
            Group::Team => (&t.teams, &t.members, &t.memberships),
            Group::Registry => (&t.registries, &t.registry_members, &t.registry_memberships),
        }
    }
}

/// A member's role in a team.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads the team's objects.
    Member,
    /// Also manages members, secrets, webhooks and project automations.
    Admin,
}

/// A team or registry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Unique name among groups of its kind.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A user's membership of a team.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Member {
    /// The user's id.
    pub user_id: String,
    /// The user's name.
    pub user: String,
    /// Their role.
    pub role: Role,
    /// Unix seconds.
    pub added_at: u64,
}

impl Group {
    /// Creates a group with `creator` as its first admin.
    pub fn create(
        self,
        store: &Store,
        creator: &User,
        name: &str,
        description: &str,
    ) -> Result<Record> {
        names::validate("name", name)?;
        names::validate_text("description", description)?;
        let record = Record {
            name: name.to_string(),
            description: description.to_string(),
            created_at: ids::now(),
        };
        let member = Member {
            user_id: creator.id.clone(),
            user: creator.name.clone(),
            role: Role::Admin,
            added_at: record.created_at,
        };
        let (record_value, member_value) = (store::to_json(&record)?, store::to_json(&member)?);
        let created = self
            .trees(store)
            .transaction(|(records, members, memberships)| {
                if records.get(name.as_bytes())?.is_some() {
                    return Ok(false);
                }
                records.insert(name.as_bytes(), record_value.as_slice())?;
                members.insert(
                    keys::prefix(&[name, &creator.id]).as_ref(),
                    member_value.as_slice(),
                )?;
                memberships.insert(
                    keys::prefix(&[&creator.id, name]).as_ref(),
                    member_value.as_slice(),
                )?;
                Ok(true)
            })
            .map_err(|e: sled::transaction::TransactionError| {
                anyhow::anyhow!("creating {}: {e}", self.noun())
            })?;
        if !created {
            return Err(Error::Conflict(format!(
                "a {} named '{name}' already exists; pick another name",
                self.noun()
            )));
        }
        Ok(record)
    }

    /// The caller's role in the group, requiring at least `need`. Non-members get 404.
    pub fn require(self, store: &Store, user: &User, name: &str, need: Role) -> Result<Role> {
        let (records, members, _) = self.trees(store);
        let not_found = || {
            Error::NotFound(format!(
                "no {} named '{name}'; GET {} lists yours",
                self.noun(),
                self.list_path()
            ))
        };
        if records
            .get(name.as_bytes())
            .map_err(anyhow::Error::from)?
            .is_none()
        {
            return Err(not_found());
        }
        let role = if user.operator {
            Role::Admin
        } else {
            let member: Option<Member> = store::get_json(members, keys::prefix(&[name, &user.id]))?;
            member.ok_or_else(not_found)?.role
        };
        if role < need {
            return Err(Error::PermissionDenied(format!(
                "this needs the admin role in {} '{name}'; ask one of its admins",
                self.noun()
            )));
        }
        Ok(role)
    }

    /// The groups the user belongs to, with their role (operators: every
    /// group, as admin).
    pub fn list_for(self, store: &Store, user: &User) -> Result<Vec<(Record, Role)>> {
        let (records, _, memberships) = self.trees(store);
        if user.operator {
            let all: Vec<Record> = store::scan_json(records, [])?;
            return Ok(all.into_iter().map(|r| (r, Role::Admin)).collect());
        }
        let mut out = Vec::new();
        for item in memberships.scan_prefix(keys::prefix(&[&user.id])) {
            let (key, value) = item.map_err(anyhow::Error::from)?;
            let member: Member = serde_json::from_slice(&value).map_err(anyhow::Error::from)?;
            let name = group_from_membership_key(&key, &user.id);
            if let Some(record) = store::get_json::<Record>(records, name.as_bytes())? {
                out.push((record, member.role));
            }
        }
        Ok(out)
    }

    /// The group's record.
    pub fn get(self, store: &Store, name: &str) -> Result<Record> {
        store::get_json(self.trees(store).0, name.as_bytes())?
            .ok_or_else(|| Error::NotFound(format!("no {} named '{name}'", self.noun())))
    }

    /// The group's members.
    pub fn members(self, store: &Store, name: &str) -> Result<Vec<Member>> {
        Ok(store::scan_json(
            self.trees(store).1,
            keys::prefix(&[name]),
        )?)
    }

    /// Adds `user` to the group, or changes their role.
    pub fn set_member(self, store: &Store, name: &str, user: &User, role: Role) -> Result<Member> {
        let member = Member {
            user_id: user.id.clone(),
            user: user.name.clone(),
            role,
            added_at: ids::now(),
        };
        if role == Role::Member {
            self.ensure_another_admin(store, name, &user.id)?;
        }
        self.write_member(store, name, &user.id, Some(&member))?;
        Ok(member)
    }

    /// Removes `user` from the group. The last admin cannot leave.
    pub fn remove_member(self, store: &Store, name: &str, user: &User) -> Result<()> {
        let key = keys::prefix(&[name, &user.id]);
        if self
            .trees(store)
            .1
            .get(&key)
            .map_err(anyhow::Error::from)?
            .is_none()
        {
            return Err(Error::NotFound(format!(
                "'{}' is not a member of {} '{name}'",
                user.name,
                self.noun()
            )));
        }
        self.ensure_another_admin(store, name, &user.id)?;
        self.write_member(store, name, &user.id, None)
    }

    fn ensure_another_admin(self, store: &Store, name: &str, leaving: &str) -> Result<()> {
        let all = self.members(store, name)?;
        let is_admin = all
            .iter()
            .any(|m| m.user_id == leaving && m.role == Role::Admin);
        let other_admins = all
            .iter()
            .filter(|m| m.role == Role::Admin && m.user_id != leaving)
            .count();
        if is_admin && other_admins == 0 {
            return Err(Error::Conflict(format!(
                "{} '{name}' must keep at least one admin; make someone else admin first",
                self.noun()
            )));
        }
        Ok(())
    }

    fn write_member(
        self,
        store: &Store,
        name: &str,
        user_id: &str,
        member: Option<&Member>,
    ) -> Result<()> {
        let value = member.map(store::to_json).transpose()?;
        let (by_group, by_user) = (
            keys::prefix(&[name, user_id]),
            keys::prefix(&[user_id, name]),
        );
        let (_, members, memberships) = self.trees(store);
        (members, memberships)
            .transaction(|(members, memberships)| {
                match &value {
                    Some(v) => {
                        members.insert(by_group.as_ref(), v.as_slice())?;
                        memberships.insert(by_user.as_ref(), v.as_slice())?;
                    }
                    None => {
                        members.remove(by_group.as_ref())?;
                        memberships.remove(by_user.as_ref())?;
                    }
                }
                Ok(())
            })
            .map_err(|e: sled::transaction::TransactionError| {
                anyhow::anyhow!("updating members: {e}")
            })?;
        Ok(())
    }
}

fn group_from_membership_key(key: &[u8], user_id: &str) -> String {
    let rest = &key[user_id.len() + 1..];
    String::from_utf8_lossy(&rest[..rest.len().saturating_sub(1)]).into_owned()
}
