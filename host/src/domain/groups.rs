//! Teams and registries: named groups of users, each member with a role.
//!
//! Both work the same way, so one module serves both through [`GroupKind`].
//! Visibility is by membership: a user who is not in a group is told it does
//! not exist (404), so names do not leak across groups. A member who lacks
//! the role for an action gets 403. Operators act as admins of every group.

use crate::domain::auth::User;
use crate::domain::names::Named;
use crate::error::{Error, Result};
use crate::ids;
pub use crate::model::{Group, GroupKind, Member, Role};
use crate::store::Store;

fn list_path(kind: GroupKind) -> &'static str {
    match kind {
        GroupKind::Team => "/v1/teams",
        GroupKind::Registry => "/v1/registries",
    }
}

/// Creates a group with `creator` as its first admin.
pub async fn create(
    store: &Store,
    kind: GroupKind,
    creator: &User,
    new: Named<'_>,
) -> Result<Group> {
    new.check()?;
    let name = new.name;
    let group = Group {
        name: name.to_string(),
        description: new.description.to_string(),
        created_at: ids::now(),
    };
    let member = Member {
        user_id: creator.id.clone(),
        user: creator.name.clone(),
        role: Role::Admin,
        added_at: group.created_at,
    };
    if !store.insert_group(kind, &group, &member).await? {
        return Err(Error::Conflict(format!(
            "a {} named '{name}' already exists; pick another name",
            kind.noun()
        )));
    }
    Ok(group)
}

/// The caller's role in the group, requiring at least `need`. Non-members get 404.
pub async fn require(
    store: &Store,
    kind: GroupKind,
    user: &User,
    name: &str,
    need: Role,
) -> Result<Role> {
    let not_found = || {
        Error::NotFound(format!(
            "no {} named '{name}'; GET {} lists yours",
            kind.noun(),
            list_path(kind)
        ))
    };
    if store.group(kind, name).await?.is_none() {
        return Err(not_found());
    }
    let role = if user.operator {
        Role::Admin
    } else {
        store
            .member(kind, name, &user.id)
            .await?
            .ok_or_else(not_found)?
            .role
    };
    if role < need {
        return Err(Error::PermissionDenied(format!(
            "this needs the admin role in {} '{name}'; ask one of its admins",
            kind.noun()
        )));
    }
    Ok(role)
}

/// The groups the user belongs to, with their role (operators: every
/// group, as admin).
pub async fn list_for(store: &Store, kind: GroupKind, user: &User) -> Result<Vec<(Group, Role)>> {
    if user.operator {
        let all = store.groups(kind).await?;
        return Ok(all.into_iter().map(|g| (g, Role::Admin)).collect());
    }
    let memberships = store.memberships(kind, &user.id).await?;
    Ok(memberships
        .into_iter()
        .map(|(group, member)| (group, member.role))
        .collect())
}

/// The group's record.
pub async fn get(store: &Store, kind: GroupKind, name: &str) -> Result<Group> {
    store
        .group(kind, name)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no {} named '{name}'", kind.noun())))
}

/// The group's members.
pub async fn members(store: &Store, kind: GroupKind, name: &str) -> Result<Vec<Member>> {
    Ok(store.members(kind, name).await?)
}

/// Adds `user` to the group, or changes their role.
pub async fn set_member(
    store: &Store,
    kind: GroupKind,
    name: &str,
    user: &User,
    role: Role,
) -> Result<Member> {
    let member = Member {
        user_id: user.id.clone(),
        user: user.name.clone(),
        role,
        added_at: ids::now(),
    };
    let tx = store.begin().await?;
    if role == Role::Member {
        ensure_another_admin(&tx.members(kind, name).await?, kind, name, &user.id)?;
    }
    tx.put_member(kind, name, &member).await?;
    tx.commit().await?;
    Ok(member)
}

/// Removes `user` from the group. The last admin cannot leave.
pub async fn remove_member(store: &Store, kind: GroupKind, name: &str, user: &User) -> Result<()> {
    let tx = store.begin().await?;
    if tx.member(kind, name, &user.id).await?.is_none() {
        return Err(Error::NotFound(format!(
            "'{}' is not a member of {} '{name}'",
            user.name,
            kind.noun()
        )));
    }
    ensure_another_admin(&tx.members(kind, name).await?, kind, name, &user.id)?;
    tx.delete_member(kind, name, &user.id).await?;
    tx.commit().await?;
    Ok(())
}

fn ensure_another_admin(all: &[Member], kind: GroupKind, name: &str, leaving: &str) -> Result<()> {
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
            kind.noun()
        )));
    }
    Ok(())
}
