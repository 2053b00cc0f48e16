//! `/v1/teams` and `/v1/registries`: the same handlers for both kinds of
//! group, chosen by a type parameter.

use super::{Reply, ReplyWith};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, put};
use serde::Deserialize;
use serde_json::Value;

use super::{Caller, Json};
use crate::app::App;
use crate::domain::auth;
use crate::domain::groups::{self, Group, GroupKind, Member, Role};
use crate::error::Result;

/// Nested under `/v1/teams/{team}` or `/v1/registries/{registry}`.
pub fn routes<K: Kind + 'static>() -> Router<App> {
    Router::new()
        .route("/", get(show::<K>))
        .route("/members", get(members::<K>))
        .route(
            "/members/{user}",
            put(set_member::<K>).delete(remove_member::<K>),
        )
}

/// Picks the group kind a route serves.
pub trait Kind {
    /// The kind.
    const GROUP: GroupKind;
}

/// Routes under `/v1/teams`.
pub struct Teams;
impl Kind for Teams {
    const GROUP: GroupKind = GroupKind::Team;
}

/// Routes under `/v1/registries`.
pub struct Registries;
impl Kind for Registries {
    const GROUP: GroupKind = GroupKind::Registry;
}

/// A team or registry as the caller sees it: with the caller's role.
#[derive(serde::Serialize)]
#[cfg_attr(test, derive(Deserialize))]
pub struct GroupShown {
    name: String,
    description: String,
    created_at: u64,
    role: Role,
}

fn shown(record: Group, role: Role) -> GroupShown {
    GroupShown {
        name: record.name,
        description: record.description,
        created_at: record.created_at,
        role,
    }
}

pub async fn create<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Json(body): Json<super::Create>,
) -> ReplyWith<GroupShown> {
    let record = groups::create(&app.store, K::GROUP, &user, body.named()).await?;
    tracing::info!(kind = K::GROUP.noun(), name = %record.name, by = %user.name, "group created");
    Ok((StatusCode::CREATED, axum::Json(shown(record, Role::Admin))))
}

pub async fn list<K: Kind>(State(app): State<App>, Caller(user): Caller) -> Reply<Value> {
    let data: Vec<GroupShown> = groups::list_for(&app.store, K::GROUP, &user)
        .await?
        .into_iter()
        .map(|(record, role)| shown(record, role))
        .collect();
    Ok(super::list_of(data))
}

pub async fn show<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Path(name): Path<String>,
) -> Reply<GroupShown> {
    let role = app
        .access
        .require(K::GROUP, &user, &name, Role::Member)
        .await?;
    Ok(axum::Json(shown(
        groups::get(&app.store, K::GROUP, &name).await?,
        role,
    )))
}

pub async fn members<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Path(name): Path<String>,
) -> Reply<Value> {
    app.access
        .require(K::GROUP, &user, &name, Role::Member)
        .await?;
    Ok(super::list_of(
        groups::members(&app.store, K::GROUP, &name).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetMember {
    role: Role,
}

pub async fn set_member<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Path((name, member)): Path<(String, String)>,
    Json(body): Json<SetMember>,
) -> Reply<Member> {
    app.access
        .require(K::GROUP, &user, &name, Role::Admin)
        .await?;
    let target = auth::find_user(&app.store, &member).await?;
    Ok(axum::Json(
        groups::set_member(&app.store, K::GROUP, &name, &target, body.role).await?,
    ))
}

pub async fn remove_member<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Path((name, member)): Path<(String, String)>,
) -> Result<StatusCode> {
    app.access
        .require(K::GROUP, &user, &name, Role::Admin)
        .await?;
    let target = auth::find_user(&app.store, &member).await?;
    groups::remove_member(&app.store, K::GROUP, &name, &target).await?;
    Ok(StatusCode::NO_CONTENT)
}
