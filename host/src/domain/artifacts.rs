//! Artifact collections and versions in registries and projects: the event
//! sources of artifact automations.
//!
//! Projects hold collections whose versions are logged with metadata.
//! Registries hold collections whose versions are links to project versions.
//! Adding an alias or a tag, and linking, emit events in the same
//! transaction as the change (a link fires in the registry and in the
//! source's project). An alias is held by one version of a
//! collection at a time, so adding it moves it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::domain::Matching;
use crate::domain::auth::User;
use crate::domain::names::{self, Named};
use crate::error::{Error, Result};
use crate::ids;
use crate::model::{ArtifactRef, Event, EventType, Scope};
pub use crate::model::{Collection, LabelledVersion, Source, Version};
use crate::store::{Store, VersionAt};

/// Longest alias or tag.
pub const MAX_LABEL_LEN: usize = 128;
/// Largest metadata object, as JSON.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;

fn not_found_collection(scope: &Scope, name: &str) -> Error {
    Error::NotFound(format!(
        "{} has no collection named '{name}'",
        scope.describe()
    ))
}

/// Parses `v3` (or `3`) into 3.
pub fn parse_version(text: &str) -> Result<u64> {
    text.strip_prefix('v').unwrap_or(text).parse().map_err(|_| {
        Error::NotFound(format!(
            "'{text}' is not a version; versions look like v0, v1, …"
        ))
    })
}

/// Creates a collection.
pub async fn create_collection(
    store: &Store,
    scope: &Scope,
    user: &User,
    new: Named<'_>,
) -> Result<Collection> {
    new.check()?;
    let name = new.name;
    let collection = Collection {
        name: name.to_string(),
        description: new.description.to_string(),
        versions: 0,
        created_by: user.name.clone(),
        created_at: ids::now(),
    };
    if !store.insert_collection(scope, &collection).await? {
        return Err(Error::Conflict(format!(
            "{} already has a collection named '{name}'",
            scope.describe()
        )));
    }
    Ok(collection)
}

/// One collection.
pub async fn collection(store: &Store, scope: &Scope, name: &str) -> Result<Collection> {
    let found = store.collection(scope, name).await?;
    found.ok_or_else(|| not_found_collection(scope, name))
}

/// The scope's collections.
pub async fn collections(store: &Store, scope: &Scope) -> Result<Vec<Collection>> {
    Ok(store.collections(scope).await?)
}

fn no_version(scope: &Scope, collection: &str, version: &str) -> Error {
    Error::NotFound(format!(
        "collection '{collection}' in {} has no version {version}",
        scope.describe()
    ))
}

/// One version, with its labels.
pub async fn version(
    store: &Store,
    scope: &Scope,
    collection: &str,
    version: &str,
) -> Result<LabelledVersion> {
    let index = parse_version(version)?;
    let found = store.labelled_version(scope, collection, index).await?;
    found.ok_or_else(|| no_version(scope, collection, version))
}

/// A collection's versions with their labels, oldest first.
pub async fn versions(
    store: &Store,
    scope: &Scope,
    collection_name: &str,
) -> Result<Vec<LabelledVersion>> {
    collection(store, scope, collection_name).await?;
    Ok(store.versions(scope, collection_name).await?)
}

fn check_metadata(metadata: &BTreeMap<String, Value>) -> Result<()> {
    let size = serde_json::to_vec(metadata).map_or(0, |v| v.len());
    if size > MAX_METADATA_BYTES {
        return Err(Error::invalid(
            "metadata",
            format!("metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}"),
        ));
    }
    Ok(())
}

/// Logs a new version of a project collection, and hands on the events it
/// caused (as do the other changes here).
pub async fn create_version(
    store: &Store,
    events: &dyn Matching,
    scope: &Scope,
    user: &User,
    collection_name: &str,
    metadata: BTreeMap<String, Value>,
) -> Result<Version> {
    check_metadata(&metadata)?;
    let into = (scope, collection_name);
    add_version(store, events, into, user, metadata, None).await
}

/// Links a project version into a registry collection, as its next version;
/// emits `LINK_ARTIFACT`.
pub async fn link(
    store: &Store,
    events: &dyn Matching,
    registry: &Scope,
    user: &User,
    collection_name: &str,
    source: Source,
) -> Result<Version> {
    let project = Scope::project(&source.team, &source.project);
    let original = store
        .version(
            &project,
            &source.collection,
            parse_version(&source.version)?,
        )
        .await?
        .ok_or_else(|| no_version(&project, &source.collection, &source.version))?;
    let source = Source {
        version: original.version.clone(),
        ..source
    };
    let into = (registry, collection_name);
    add_version(store, events, into, user, original.metadata, Some(source)).await
}

/// Adds the next version to `into`, a collection of a scope.
async fn add_version(
    store: &Store,
    events: &dyn Matching,
    into: (&Scope, &str),
    user: &User,
    metadata: BTreeMap<String, Value>,
    source: Option<Source>,
) -> Result<Version> {
    let (scope, collection_name) = into;
    let tx = store.begin().await?;
    let index = tx
        .next_version(scope, collection_name)
        .await?
        .ok_or_else(|| not_found_collection(scope, collection_name))?;
    let version = Version {
        collection: collection_name.to_string(),
        version: format!("v{index}"),
        index,
        metadata,
        source,
        created_by: user.name.clone(),
        created_at: ids::now(),
    };
    tx.insert_version(scope, &version).await?;
    let mut caused = Vec::new();
    let created = EventType::CreateArtifact;
    let in_collection = Scope::collection(scope, collection_name);
    if tx.listens(scope, created).await? || tx.listens(&in_collection, created).await? {
        caused.push(event_for(scope, user, &version, EventType::CreateArtifact));
    }
    caused.extend(link_events(scope, user, &version));
    tx.insert_events(&caused).await?;
    tx.commit().await?;
    events.match_committed(&caused).await?;
    Ok(version)
}

/// Most labels one request may add.
pub const MAX_LABELS_PER_REQUEST: usize = 1000;

/// What adding labels to a version did.
#[derive(Debug, Clone)]
pub struct Labelled {
    /// The version labelled.
    pub version: Version,
    /// The labels, in the order given (each fired its own event).
    pub labels: Vec<String>,
    /// For aliases: the version each alias was taken from, where another held it.
    pub moved_from: BTreeMap<String, String>,
}

/// Which kind of label a request adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// Unique within a collection; moves from version to version.
    Alias,
    /// Any number of versions may carry a tag.
    Tag,
}

impl Label {
    fn field(self) -> &'static str {
        match self {
            Label::Alias => "alias",
            Label::Tag => "tag",
        }
    }

    /// `aliases` or `tags`.
    pub fn plural(self) -> &'static str {
        match self {
            Label::Alias => "aliases",
            Label::Tag => "tags",
        }
    }
}

/// The version a request labels, as the caller named it, and who asks.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The project or registry.
    pub scope: &'a Scope,
    /// Who asks (the events' author).
    pub user: &'a User,
    /// The collection's name.
    pub collection: &'a str,
    /// `v3`, `3`, or an alias.
    pub version: &'a str,
}

impl Target<'_> {
    /// The answer when the version named is not there.
    fn gone(&self) -> Error {
        no_version(self.scope, self.collection, self.version)
    }
}

fn check_labels(kind: Label, values: &[String]) -> Result<()> {
    let (field, plural) = (kind.field(), kind.plural());
    if values.is_empty() || values.len() > MAX_LABELS_PER_REQUEST {
        return Err(Error::invalid(
            plural,
            format!(
                "{} {plural} given: give `{field}` for one, or `{plural}` with 1 to {MAX_LABELS_PER_REQUEST}",
                values.len()
            ),
        ));
    }
    values.iter().try_for_each(|v| check_label(field, v))?;
    match values
        .iter()
        .find(|v| kind == Label::Alias && is_reserved_alias(v))
    {
        Some(alias) => Err(Error::invalid(
            "alias",
            format!("'{alias}' is reserved: aliases may not look like versions or be 'latest'"),
        )),
        None => Ok(()),
    }
}

/// `v3` and `latest` name versions already, so they cannot be aliases.
fn is_reserved_alias(alias: &str) -> bool {
    alias.starts_with('v') && alias[1..].parse::<u64>().is_ok() || alias == "latest"
}

fn check_label(field: &str, value: &str) -> Result<()> {
    let ok = (1..=MAX_LABEL_LEN).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':' | '/'));
    names::check(ok, field, || {
        format!(
            "{field} '{value}' is not valid: use 1 to {MAX_LABEL_LEN} letters, digits, '_', '.', '-', ':' or '/'"
        )
    })
}

/// Adds `labels` to a version, all at once; each emits its own
/// `ADD_ARTIFACT_ALIAS` or `ADD_ARTIFACT_TAG`. An alias moves from
/// whichever version held it.
pub async fn add_labels(
    store: &Store,
    events: &dyn Matching,
    target: Target<'_>,
    kind: Label,
    labels: Vec<String>,
) -> Result<Labelled> {
    check_labels(kind, &labels)?;
    let at = VersionAt {
        scope: target.scope,
        collection: target.collection,
        index: parse_version(target.version)?,
    };
    match kind {
        Label::Alias => add_aliases(store, events, target, at, labels).await,
        Label::Tag => add_tags(store, events, target, at, labels).await,
    }
}

/// Aliases, in one transaction: each may move from another version, which
/// the answer and the events name.
async fn add_aliases(
    store: &Store,
    events: &dyn Matching,
    target: Target<'_>,
    at: VersionAt<'_>,
    aliases: Vec<String>,
) -> Result<Labelled> {
    let tx = store.begin().await?;
    let version = tx
        .version(at.scope, at.collection, at.index)
        .await?
        .ok_or_else(|| target.gone())?;
    let template = event_for(at.scope, target.user, &version, EventType::AddArtifactAlias);
    let mut caused = Vec::with_capacity(aliases.len());
    let mut moved_from = BTreeMap::new();
    for alias in &aliases {
        let moved = tx.set_alias(at, alias).await?;
        if let Some(old) = moved {
            moved_from.insert(alias.clone(), format!("v{old}"));
        }
        caused.push(Event {
            id: ids::ordered_id(),
            alias: Some(alias.clone()),
            ..alias_event(&template, moved)
        });
    }
    tx.insert_events(&caused).await?;
    tx.commit().await?;
    events.match_committed(&caused).await?;
    Ok(Labelled {
        version,
        labels: aliases,
        moved_from,
    })
}

/// An alias's event: `ADD_ARTIFACT_ALIAS`, or `UPDATE_ARTIFACT_ALIAS`
/// naming the version it `moved` from.
fn alias_event(added: &Event, moved: Option<u64>) -> Event {
    let Some(old) = moved else {
        return added.clone();
    };
    let previous = added.artifact.as_ref().map(|a| {
        let path = a
            .version_string
            .rsplit_once(':')
            .map_or("", |(path, _)| path);
        format!("{path}:v{old}")
    });
    Event {
        event_type: EventType::UpdateArtifactAlias,
        previous_version_string: previous,
        ..added.clone()
    }
}

/// Tags, in one store operation with their events (one statement on
/// PostgreSQL): tags never move, so the version is read first, for the
/// events, and the write only checks it is still there.
async fn add_tags(
    store: &Store,
    events: &dyn Matching,
    target: Target<'_>,
    at: VersionAt<'_>,
    tags: Vec<String>,
) -> Result<Labelled> {
    let version = store
        .version(at.scope, at.collection, at.index)
        .await?
        .ok_or_else(|| target.gone())?;
    let template = event_for(at.scope, target.user, &version, EventType::AddArtifactTag);
    let caused: Vec<Event> = tags
        .iter()
        .map(|tag| Event {
            id: ids::ordered_id(),
            tag: Some(tag.clone()),
            ..template.clone()
        })
        .collect();
    if !store.tag_version(at, &tags, &caused).await? {
        return Err(target.gone());
    }
    events.match_committed(&caused).await?;
    Ok(Labelled {
        version,
        labels: tags,
        moved_from: BTreeMap::new(),
    })
}

/// A link fires `LINK_ARTIFACT` twice: in the registry linked to, and in
/// the project that owns the source version. Both describe the registry's
/// new version, so `${artifact_collection_name}` is the collection linked to.
fn link_events(scope: &Scope, user: &User, version: &Version) -> Vec<Event> {
    let Some(source) = &version.source else {
        return Vec::new();
    };
    let in_registry = event_for(scope, user, version, EventType::LinkArtifact);
    let in_project = Event {
        id: ids::ordered_id(),
        scope: Scope::project(&source.team, &source.project),
        ..in_registry.clone()
    };
    vec![in_registry, in_project]
}

/// The event for `version` in `scope`.
fn event_for(scope: &Scope, user: &User, version: &Version, event_type: EventType) -> Event {
    let (entity, project, path) = match (&scope.parent(), &version.source) {
        (Scope::Project { team, project }, _) => {
            (team.clone(), project.clone(), format!("{team}/{project}"))
        }
        (Scope::Collection { .. } | Scope::Team { .. }, _) => {
            (String::new(), String::new(), String::new())
        }
        (Scope::Registry { registry }, Some(source)) => (
            source.team.clone(),
            source.project.clone(),
            format!("registry/{registry}"),
        ),
        (Scope::Registry { registry }, None) => (
            registry.clone(),
            String::new(),
            format!("registry/{registry}"),
        ),
    };
    let version_string = format!("{path}/{}:{}", version.collection, version.version);
    Event {
        id: ids::ordered_id(),
        event_type,
        scope: scope.clone(),
        author: user.name.clone(),
        at_ms: ids::now_ms(),
        artifact: Some(std::sync::Arc::new(ArtifactRef {
            entity,
            project,
            collection: version.collection.clone(),
            version: json!({
                "name": format!("{}:{}", version.collection, version.version),
                "path": version_string,
                "collection": version.collection,
                "version": version.version,
                "index": version.index,
                "metadata": version.metadata,
                "source": version.source,
                "created_by": version.created_by,
                "created_at": version.created_at,
            }),
            version_string,
            metadata: version.metadata.clone(),
        })),
        alias: None,
        previous_version_string: None,
        tag: None,
        run: None,
        webhook: None,
        trace: crate::traces::current(),
    }
}
