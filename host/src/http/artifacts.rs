//! Collections and versions in a registry or project, and the actions that
//! fire artifact automations: adding an alias or a tag, and linking.
//!
//! Members of the registry (or of the project's team) read and act. Each
//! action answers once the deliveries it caused are durable in the outbox.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Json;
use super::scope::{AsMember, InScope};
use crate::app::App;
use crate::domain::artifacts::{
    self, Collection, Label, Labelled, LabelledVersion, Source, Target,
};
use crate::domain::groups::{self, Role};
use crate::error::{Error, Result};
use crate::model::Scope;

pub async fn create_collection(
    State(app): State<App>,
    at: InScope<AsMember>,
    Json(body): Json<super::Create>,
) -> Result<(StatusCode, axum::Json<Collection>)> {
    let (user, scope) = (&at.user, &at.scope);
    let collection = artifacts::create_collection(&app.store, scope, user, body.named()).await?;
    Ok((StatusCode::CREATED, axum::Json(collection)))
}

pub async fn list_collections(
    State(app): State<App>,
    at: InScope<AsMember>,
) -> Result<axum::Json<Value>> {
    let scope = &at.scope;
    Ok(super::list_of(
        artifacts::collections(&app.store, scope).await?,
    ))
}

pub async fn show_collection(
    State(app): State<App>,
    at: InScope<AsMember>,
) -> Result<axum::Json<Collection>> {
    let scope = &at.scope;
    let name = at.param("collection")?;
    Ok(axum::Json(
        artifacts::collection(&app.store, scope, &name).await?,
    ))
}

pub async fn list_versions(
    State(app): State<App>,
    at: InScope<AsMember>,
) -> Result<axum::Json<Value>> {
    let scope = &at.scope;
    let name = at.param("collection")?;
    Ok(super::list_of(
        artifacts::versions(&app.store, scope, &name).await?,
    ))
}

pub async fn show_version(
    State(app): State<App>,
    at: InScope<AsMember>,
) -> Result<axum::Json<LabelledVersion>> {
    let scope = &at.scope;
    let (collection, version) = (at.param("collection")?, at.param("version")?);
    Ok(axum::Json(
        artifacts::version(&app.store, scope, &collection, &version).await?,
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
    at: InScope<AsMember>,
    Json(body): Json<CreateVersion>,
) -> Result<(StatusCode, axum::Json<LabelledVersion>)> {
    let (user, scope) = (&at.user, &at.scope);
    if let Scope::Registry { registry } = &scope {
        return Err(Error::invalid(
            "metadata",
            format!(
                "registry collections get versions by linking: POST /v1/registries/{registry}/collections/{{collection}}/links"
            ),
        ));
    }
    let collection = at.param("collection")?;
    let version = artifacts::create_version(
        &app.store,
        &app.matcher,
        scope,
        user,
        &collection,
        body.metadata,
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(LabelledVersion::bare(version)),
    ))
}

/// One label (`alias` or `tag`) or several (`aliases` or `tags`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddAliases {
    alias: Option<String>,
    aliases: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddTags {
    tag: Option<String>,
    tags: Option<Vec<String>>,
}

/// The one form given, as a list.
fn one_or_many(
    (one, one_name): (Option<String>, &str),
    (many, many_name): (Option<Vec<String>>, &str),
) -> Result<Vec<String>> {
    match (one, many) {
        (Some(one), None) => Ok(vec![one]),
        (None, Some(many)) => Ok(many),
        (Some(_), Some(_)) => Err(Error::invalid(
            many_name,
            format!("give `{one_name}` or `{many_name}`, not both"),
        )),
        (None, None) => Err(Error::invalid(
            one_name,
            format!("missing field `{one_name}` (or `{many_name}` for several)"),
        )),
    }
}

/// What adding aliases did.
#[derive(Serialize)]
pub struct AliasesAdded {
    collection: String,
    version: String,
    aliases: Vec<String>,
    /// Alias → the version it was taken from.
    moved_from: BTreeMap<String, String>,
}

/// What adding tags did.
#[derive(Serialize)]
pub struct TagsAdded {
    collection: String,
    version: String,
    tags: Vec<String>,
}

pub async fn add_alias(
    State(app): State<App>,
    at: InScope<AsMember>,
    Json(body): Json<AddAliases>,
) -> Result<axum::Json<AliasesAdded>> {
    let aliases = one_or_many((body.alias, "alias"), (body.aliases, "aliases"))?;
    let done = add_labels(&app, &at, Label::Alias, aliases).await?;
    Ok(axum::Json(AliasesAdded {
        collection: done.version.collection,
        version: done.version.version,
        aliases: done.labels,
        moved_from: done.moved_from,
    }))
}

pub async fn add_tag(
    State(app): State<App>,
    at: InScope<AsMember>,
    Json(body): Json<AddTags>,
) -> Result<axum::Json<TagsAdded>> {
    let tags = one_or_many((body.tag, "tag"), (body.tags, "tags"))?;
    let done = add_labels(&app, &at, Label::Tag, tags).await?;
    Ok(axum::Json(TagsAdded {
        collection: done.version.collection,
        version: done.version.version,
        tags: done.labels,
    }))
}

/// Labels the version the path names.
async fn add_labels(
    app: &App,
    at: &InScope<AsMember>,
    kind: Label,
    labels: Vec<String>,
) -> Result<Labelled> {
    let (collection, version) = (at.param("collection")?, at.param("version")?);
    let target = Target {
        scope: &at.scope,
        user: &at.user,
        collection: &collection,
        version: &version,
    };
    artifacts::add_labels(&app.store, &app.matcher, target, kind, labels).await
}

/// Links a project version into a registry collection. The caller must be a
/// member of the registry and of the source project's team.
pub async fn link(
    State(app): State<App>,
    at: InScope<AsMember>,
    Json(source): Json<Source>,
) -> Result<(StatusCode, axum::Json<LabelledVersion>)> {
    let (user, registry) = (&at.user, &at.scope);
    let project = Scope::Project {
        team: source.team.clone(),
        project: source.project.clone(),
    };
    groups::authorize(&app.store, user, &project, Role::Member).await?;
    let collection = at.param("collection")?;
    let version = artifacts::link(
        &app.store,
        &app.matcher,
        registry,
        user,
        &collection,
        source,
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(LabelledVersion::bare(version)),
    ))
}
