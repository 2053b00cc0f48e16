//! Collections and versions in a registry or project, and the actions that
//! fire artifact automations: adding an alias or a tag, and linking.
//!
//! Members of the registry (or of the project's team) read and act. Each
//! action answers once the deliveries it caused are durable in the outbox.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::scope::{Params, param, scope};
use super::{Caller, Json};
use crate::app::App;
use crate::artifacts::{self, Collection, Source, Version};
use crate::error::{Error, Result};
use crate::groups::{self, Role};
use crate::model::Scope;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateCollection {
    name: String,
    #[serde(default)]
    description: String,
}

pub async fn create_collection(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(body): Json<CreateCollection>,
) -> Result<(StatusCode, axum::Json<Collection>)> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    let collection =
        artifacts::create_collection(&app.store, &scope, &user, &body.name, &body.description)
            .await?;
    Ok((StatusCode::CREATED, axum::Json(collection)))
}

pub async fn list_collections(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Value>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    Ok(super::list_of(
        artifacts::collections(&app.store, &scope).await?,
    ))
}

pub async fn show_collection(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Collection>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    let name = param(&params, "collection")?;
    Ok(axum::Json(
        artifacts::collection(&app.store, &scope, &name).await?,
    ))
}

pub async fn list_versions(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Value>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    let name = param(&params, "collection")?;
    Ok(super::list_of(
        artifacts::versions(&app.store, &scope, &name).await?,
    ))
}

pub async fn show_version(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
) -> Result<axum::Json<Version>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    let (collection, version) = (param(&params, "collection")?, param(&params, "version")?);
    Ok(axum::Json(
        artifacts::version(&app.store, &scope, &collection, &version).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVersion {
    #[serde(default)]
    metadata: BTreeMap<String, Value>,
}

/// Logs a version in a project collection; registries get versions by linking.
pub async fn create_version(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(body): Json<CreateVersion>,
) -> Result<(StatusCode, axum::Json<Version>)> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    if let Scope::Registry { registry } = &scope {
        return Err(Error::invalid(
            "metadata",
            format!(
                "registry collections get versions by linking: POST /v1/registries/{registry}/collections/{{collection}}/links"
            ),
        ));
    }
    let collection = param(&params, "collection")?;
    let (version, events) =
        artifacts::create_version(&app.store, &scope, &user, &collection, body.metadata).await?;
    app.matcher.dispatch(&events).await?;
    Ok((StatusCode::CREATED, axum::Json(version)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddAlias {
    alias: String,
}

pub async fn add_alias(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(body): Json<AddAlias>,
) -> Result<axum::Json<Version>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    let (collection, version) = (param(&params, "collection")?, param(&params, "version")?);
    let (version, events) = artifacts::add_alias(
        &app.store,
        &scope,
        &user,
        &collection,
        &version,
        &body.alias,
    )
    .await?;
    app.matcher.dispatch(&events).await?;
    Ok(axum::Json(version))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddTag {
    tag: String,
}

pub async fn add_tag(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(body): Json<AddTag>,
) -> Result<axum::Json<Version>> {
    let scope = scope(&params)?;
    groups::authorize(&app.store, &user, &scope, Role::Member).await?;
    let (collection, version) = (param(&params, "collection")?, param(&params, "version")?);
    let (version, events) =
        artifacts::add_tag(&app.store, &scope, &user, &collection, &version, &body.tag).await?;
    app.matcher.dispatch(&events).await?;
    Ok(axum::Json(version))
}

/// Links a project version into a registry collection. The caller must be a
/// member of the registry and of the source project's team.
pub async fn link(
    State(app): State<App>,
    Caller(user): Caller,
    Path(params): Params,
    Json(source): Json<Source>,
) -> Result<(StatusCode, axum::Json<Version>)> {
    let registry = scope(&params)?;
    groups::authorize(&app.store, &user, &registry, Role::Member).await?;
    let project = Scope::Project {
        team: source.team.clone(),
        project: source.project.clone(),
    };
    groups::authorize(&app.store, &user, &project, Role::Member).await?;
    let collection = param(&params, "collection")?;
    let (version, events) =
        artifacts::link(&app.store, &registry, &user, &collection, source).await?;
    app.matcher.dispatch(&events).await?;
    Ok((StatusCode::CREATED, axum::Json(version)))
}
