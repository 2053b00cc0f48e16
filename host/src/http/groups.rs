//! `/v1/teams` and `/v1/registries`: the same handlers for both kinds of
//! group, chosen by a type parameter.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Caller, Json};
use crate::app::App;
use crate::auth;
use crate::error::Result;
use crate::groups::{Group, Member, Record, Role};

/// Picks the group kind a route serves.
pub trait Kind {
    /// The kind.
    const GROUP: Group;
}

/// Routes under `/v1/teams`.
pub struct Teams;
impl Kind for Teams {
    const GROUP: Group = Group::Team;
}

/// Routes under `/v1/registries`.
pub struct Registries;
impl Kind for Registries {
    const GROUP: Group = Group::Registry;
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Create {
    name: String,
    #[serde(default)]
    description: String,
}

fn shown(record: Record, role: Role) -> Value {
    json!({
        "name": record.name,
        "description": record.description,
        "created_at": record.created_at,
        "role": role,
    })
}

pub async fn create<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Json(body): Json<Create>,
) -> Result<(StatusCode, axum::Json<Value>)> {
    let record = K::GROUP.create(&app.store, &user, &body.name, &body.description)?;
    tracing::info!(kind = K::GROUP.noun(), name = %record.name, by = %user.name, "group created");
    Ok((StatusCode::CREATED, axum::Json(shown(record, Role::Admin))))
}

pub async fn list<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
) -> Result<axum::Json<Value>> {
    let data: Vec<Value> = K::GROUP
        .list_for(&app.store, &user)?
        .into_iter()
        .map(|(record, role)| shown(record, role))
        .collect();
    Ok(super::list_of(data))
}

pub async fn show<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>> {
    let role = K::GROUP.require(&app.store, &user, &name, Role::Member)?;
    Ok(axum::Json(shown(K::GROUP.get(&app.store, &name)?, role)))
}

pub async fn members<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>> {
    K::GROUP.require(&app.store, &user, &name, Role::Member)?;
    Ok(super::list_of(K::GROUP.members(&app.store, &name)?))
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
) -> Result<axum::Json<Member>> {
    K::GROUP.require(&app.store, &user, &name, Role::Admin)?;
    let target = auth::find_user(&app.store, &member)?;
    Ok(axum::Json(
        K::GROUP.set_member(&app.store, &name, &target, body.role)?,
    ))
}

pub async fn remove_member<K: Kind>(
    State(app): State<App>,
    Caller(user): Caller,
    Path((name, member)): Path<(String, String)>,
) -> Result<StatusCode> {
    K::GROUP.require(&app.store, &user, &name, Role::Admin)?;
    let target = auth::find_user(&app.store, &member)?;
    K::GROUP.remove_member(&app.store, &name, &target)?;
    Ok(StatusCode::NO_CONTENT)
}
