//! Teams, their members and roles.
//!
//! Visibility is by membership: a user who is not in a team is told the team
//! does not exist (404), so team names do not leak across teams. A member
//! who lacks the role for an action gets 403. Operators act as admins of
//! every team.

use serde::{Deserialize, Serialize};
use sled::Transactional;

use crate::auth::User;
use crate::error::{Error, Result};
use crate::store::{self, Store, keys};
use crate::{ids, names};

/// A member's role in a team.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads the team's objects.
    Member,
    /// Also manages members, secrets, webhooks and project automations.
    Admin,
}

/// A team.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Team {
    /// Unique name.
    pub name: String,
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

/// Creates a team with `creator` as its first admin.
pub fn create(store: &Store, creator: &User, name: &str) -> Result<Team> {
    names::validate("name", name)?;
    let team = Team {
        name: name.to_string(),
        created_at: ids::now(),
    };
    let member = Member {
        user_id: creator.id.clone(),
        user: creator.name.clone(),
        role: Role::Admin,
        added_at: team.created_at,
    };
    let (team_value, member_value) = (store::to_json(&team)?, store::to_json(&member)?);
    let t = &store.trees;
    let created = (&t.teams, &t.members, &t.memberships)
        .transaction(|(teams, members, memberships)| {
            if teams.get(name.as_bytes())?.is_some() {
                return Ok(false);
            }
            teams.insert(name.as_bytes(), team_value.as_slice())?;
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
        .map_err(|e: sled::transaction::TransactionError| anyhow::anyhow!("creating team: {e}"))?;
    if !created {
        return Err(Error::Conflict(format!(
            "a team named '{name}' already exists; pick another name"
        )));
    }
    Ok(team)
}

/// The caller's role in `team`, requiring at least `need`. Non-members get 404.
pub fn require(store: &Store, user: &User, team: &str, need: Role) -> Result<Role> {
    let not_found =
        || Error::NotFound(format!("no team named '{team}'; GET /v1/teams lists yours"));
    if store
        .trees
        .teams
        .get(team.as_bytes())
        .map_err(anyhow::Error::from)?
        .is_none()
    {
        return Err(not_found());
    }
    let role = if user.operator {
        Role::Admin
    } else {
        let member: Option<Member> =
            store::get_json(&store.trees.members, keys::prefix(&[team, &user.id]))?;
        member.ok_or_else(not_found)?.role
    };
    if role < need {
        return Err(Error::PermissionDenied(format!(
            "this needs the admin role in team '{team}'; ask a team admin"
        )));
    }
    Ok(role)
}

/// The teams the user belongs to, with their role (operators: every team, as admin).
pub fn list_for(store: &Store, user: &User) -> Result<Vec<(Team, Role)>> {
    if user.operator {
        let all: Vec<Team> = store::scan_json(&store.trees.teams, [])?;
        return Ok(all.into_iter().map(|team| (team, Role::Admin)).collect());
    }
    let mut out = Vec::new();
    for item in store
        .trees
        .memberships
        .scan_prefix(keys::prefix(&[&user.id]))
    {
        let (key, value) = item.map_err(anyhow::Error::from)?;
        let member: Member = serde_json::from_slice(&value).map_err(anyhow::Error::from)?;
        let team_name = team_from_membership_key(&key, &user.id);
        if let Some(team) = store::get_json::<Team>(&store.trees.teams, team_name.as_bytes())? {
            out.push((team, member.role));
        }
    }
    Ok(out)
}

fn team_from_membership_key(key: &[u8], user_id: &str) -> String {
    let rest = &key[user_id.len() + 1..];
    String::from_utf8_lossy(&rest[..rest.len().saturating_sub(1)]).into_owned()
}

/// The team's record.
pub fn get(store: &Store, team: &str) -> Result<Team> {
    store::get_json(&store.trees.teams, team.as_bytes())?
        .ok_or_else(|| Error::NotFound(format!("no team named '{team}'")))
}

/// The team's members.
pub fn members(store: &Store, team: &str) -> Result<Vec<Member>> {
    Ok(store::scan_json(
        &store.trees.members,
        keys::prefix(&[team]),
    )?)
}

/// Adds `user` to `team`, or changes their role.
pub fn set_member(store: &Store, team: &str, user: &User, role: Role) -> Result<Member> {
    let member = Member {
        user_id: user.id.clone(),
        user: user.name.clone(),
        role,
        added_at: ids::now(),
    };
    if role == Role::Member {
        ensure_another_admin(store, team, &user.id)?;
    }
    write_member(store, team, &user.id, Some(&member))?;
    Ok(member)
}

/// Removes `user` from `team`. The last admin cannot leave.
pub fn remove_member(store: &Store, team: &str, user: &User) -> Result<()> {
    let key = keys::prefix(&[team, &user.id]);
    if store
        .trees
        .members
        .get(&key)
        .map_err(anyhow::Error::from)?
        .is_none()
    {
        return Err(Error::NotFound(format!(
            "'{}' is not a member of team '{team}'",
            user.name
        )));
    }
    ensure_another_admin(store, team, &user.id)?;
    write_member(store, team, &user.id, None)
}

fn ensure_another_admin(store: &Store, team: &str, leaving: &str) -> Result<()> {
    let all = members(store, team)?;
    let is_admin = all
        .iter()
        .any(|m| m.user_id == leaving && m.role == Role::Admin);
    let other_admins = all
        .iter()
        .filter(|m| m.role == Role::Admin && m.user_id != leaving)
        .count();
    if is_admin && other_admins == 0 {
        return Err(Error::Conflict(format!(
            "team '{team}' must keep at least one admin; make someone else admin first"
        )));
    }
    Ok(())
}

fn write_member(store: &Store, team: &str, user_id: &str, member: Option<&Member>) -> Result<()> {
    let value = member.map(store::to_json).transpose()?;
    let (by_team, by_user) = (
        keys::prefix(&[team, user_id]),
        keys::prefix(&[user_id, team]),
    );
    (&store.trees.members, &store.trees.memberships)
        .transaction(|(members, memberships)| {
            match &value {
                Some(v) => {
                    members.insert(by_team.as_ref(), v.as_slice())?;
                    memberships.insert(by_user.as_ref(), v.as_slice())?;
                }
                None => {
                    members.remove(by_team.as_ref())?;
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
