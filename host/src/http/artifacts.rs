//! Collections and versions in a registry or project, and the actions that
//! fire artifact automations: adding an alias or a tag, and linking.
//!
//! Members of the registry (or of the project's team) read and act; its
//! admins delete a collection. Each
//! action answers once the deliveries it caused are durable in the outbox.

use axum::Router;
use axum::routing::{get, post};
use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Json;
use super::idempotency::keyed;
use super::scope::{AsAdmin, AsMember, InScope};
use super::{Reply, ReplyWith};
use crate::app::App;
use crate::automation::automations;
use crate::domain::artifacts::{
    self, Collection, Label, Labelled, LabelledVersion, Source, Target,
};
use crate::domain::groups::Role;
use crate::error::{Error, Result};
use crate::model::Scope;

/// Nested under a registry's or a project's `/collections`; the POSTs take
/// an `Idempotency-Key`.
pub fn routes(app: &App) -> Router<App> {
    Router::new()
        .route(
            "/",
            keyed(app, get(list_collections).post(create_collection)),
        )
        .route(
            "/{collection}",
            get(show_collection).delete(delete_collection),
        )
        .route(
            "/{collection}/versions",
            keyed(app, get(list_versions).post(create_version)),
        )
        .route("/{collection}/versions/{version}", get(show_version))
        .route(
            "/{collection}/versions/{version}/aliases",
            keyed(app, post(add_alias)),
        )
        .route(
            "/{collection}/versions/{version}/tags",
            keyed(app, post(add_tag)),
        )
}

/// `…/collections/{collection}`.
#[derive(Deserialize)]
struct CollectionPath {
    collection: String,
}

/// `…/collections/{collection}/versions/{version}`.
#[derive(Deserialize)]
struct VersionPath {
    collection: String,
    version: String,
}

/// What only a registry's collections have, nested under
/// `/v1/registries/{registry}/collections`: links from project versions.
pub fn registry_routes(app: &App) -> Router<App> {
    Router::new().route("/{collection}/links", keyed(app, post(link)))
}

pub async fn create_collection(
    at: InScope<AsMember>,
    Json(body): Json<super::Create>,
) -> ReplyWith<Collection> {
    let (user, scope) = (&at.user, &at.place);
    let collection = artifacts::create_collection(&at.app.store, scope, user, body.named()).await?;
    Ok((StatusCode::CREATED, axum::Json(collection)))
}

pub async fn list_collections(at: InScope<AsMember>) -> Reply<Value> {
    let scope = &at.place;
    Ok(super::list_of(
        artifacts::collections(&at.app.store, scope).await?,
    ))
}

pub async fn show_collection(at: InScope<AsMember>) -> Reply<Collection> {
    let scope = &at.place;
    let CollectionPath { collection: name } = at.path()?;
    Ok(axum::Json(
        artifacts::collection(&at.app.store, scope, &name).await?,
    ))
}

/// Deletes a collection with its versions (admins only); the automations
/// on it alone are disabled, saying why.
pub async fn delete_collection(at: InScope<AsAdmin>) -> Result<StatusCode> {
    let (user, scope) = (&at.user, &at.place);
    let CollectionPath { collection: name } = at.path()?;
    automations::delete_collection(&at.app.store, scope, &name).await?;
    super::audit(
        &user.name,
        "collection deleted",
        &format!("{} {name}", scope.describe()),
    );
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_versions(at: InScope<AsMember>) -> Reply<Value> {
    let scope = &at.place;
    let CollectionPath { collection: name } = at.path()?;
    Ok(super::list_of(
        artifacts::versions(&at.app.store, scope, &name).await?,
    ))
}

pub async fn show_version(at: InScope<AsMember>) -> Reply<LabelledVersion> {
    let scope = &at.place;
    let VersionPath {
        collection,
        version,
    } = at.path()?;
    Ok(axum::Json(
        artifacts::version(&at.app.store, scope, &collection, &version).await?,
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
    at: InScope<AsMember>,
    Json(body): Json<CreateVersion>,
) -> ReplyWith<LabelledVersion> {
    let (user, scope) = (&at.user, &at.place);
    if let Scope::Registry { registry } = &scope {
        return Err(Error::invalid(
            "metadata",
            format!(
                "registry collections get versions by linking: POST /v1/registries/{registry}/collections/{{collection}}/links"
            ),
        ));
    }
    let (CollectionPath { collection }, metadata) = (at.path()?, body.metadata);
    let (store, events) = (&at.app.store, &at.app.matcher);
    let created = artifacts::create_version(store, events, scope, user, &collection, metadata);
    let version = created.await?;
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

pub async fn add_alias(at: InScope<AsMember>, Json(body): Json<AddAliases>) -> Reply<LabelsAdded> {
    let aliases = one_or_many((body.alias, "alias"), (body.aliases, "aliases"))?;
    labelled(&at, Label::Alias, aliases).await
}

pub async fn add_tag(at: InScope<AsMember>, Json(body): Json<AddTags>) -> Reply<LabelsAdded> {
    let tags = one_or_many((body.tag, "tag"), (body.tags, "tags"))?;
    labelled(&at, Label::Tag, tags).await
}

/// What adding labels answers: the version, the labels added (under
/// `aliases` or `tags`), and for aliases which version each was taken
/// from.
#[cfg_attr(test, derive(serde::Deserialize))]
#[derive(Serialize)]
pub struct LabelsAdded {
    collection: String,
    version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    aliases: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    moved_from: Option<BTreeMap<String, String>>,
}

/// Adds the labels; the answer names the version and the labels it holds
/// now, and for aliases which version each was taken from (`moved_from`).
async fn labelled(at: &InScope<AsMember>, kind: Label, labels: Vec<String>) -> Reply<LabelsAdded> {
    let done = add_labels(at, kind, labels).await?;
    let alias = kind == Label::Alias;
    Ok(axum::Json(LabelsAdded {
        collection: done.version.collection,
        version: done.version.version,
        aliases: alias.then(|| done.labels.clone()),
        tags: (!alias).then_some(done.labels),
        moved_from: alias.then_some(done.moved_from),
    }))
}

/// Labels the version the path names.
async fn add_labels(at: &InScope<AsMember>, kind: Label, labels: Vec<String>) -> Result<Labelled> {
    let app = &at.app;
    let VersionPath {
        collection,
        version,
    } = at.path()?;
    let target = Target {
        scope: &at.place,
        user: &at.user,
        collection: &collection,
        version: &version,
    };
    artifacts::add_labels(&app.store, &app.matcher, target, kind, labels).await
}

/// Links a project version into a registry collection. The caller must be a
/// member of the registry and of the source project's team.
pub async fn link(at: InScope<AsMember>, Json(source): Json<Source>) -> ReplyWith<LabelledVersion> {
    let (user, registry) = (&at.user, &at.place);
    let project = Scope::project(&source.team, &source.project);
    let (store, events) = (&at.app.store, &at.app.matcher);
    at.app
        .access
        .authorize(user, &project, Role::Member)
        .await?;
    let CollectionPath { collection: into } = at.path()?;
    let version = artifacts::link(store, events, registry, user, &into, source).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(LabelledVersion::bare(version)),
    ))
}
