//! Artifact collections and versions in registries and projects: the event
//! sources of artifact automations.
//!
//! Projects hold collections whose versions are logged with metadata.
//! Registries hold collections whose versions are links to project versions.
//! Adding an alias or a tag, and linking, emit events in the same sled
//! transaction as the change (a link fires in the registry and in the
//! source's project). An alias is held by one version of a
//! collection at a time, so adding it moves it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sled::Transactional;

use crate::auth::User;
use crate::automation::automations::Scope;
use crate::automation::events::{ArtifactRef, Event};
use crate::error::{Error, Result};
use crate::store::tx::{abort, decode, encode, finish};
use crate::store::{self, Store};
use crate::{ids, names};

/// Longest alias or tag.
pub const MAX_LABEL_LEN: usize = 128;
/// Largest metadata object, as JSON.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;

/// A collection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Collection {
    /// Unique within its scope.
    pub name: String,
    /// Free text.
    pub description: String,
    /// How many versions it has had; the next is `v{versions}`.
    pub versions: u64,
    /// Who created it.
    pub created_by: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A version of a collection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Version {
    /// The collection.
    pub collection: String,
    /// `v0`, `v1`, …
    pub version: String,
    /// The number in `version`.
    pub index: u64,
    /// Aliases it holds.
    pub aliases: Vec<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Top-level metadata.
    pub metadata: BTreeMap<String, Value>,
    /// For a registry version: the project version it links to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Who created it.
    pub created_by: String,
    /// Unix seconds.
    pub created_at: u64,
}

/// A project version, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The owning team.
    pub team: String,
    /// The project.
    pub project: String,
    /// The collection.
    pub collection: String,
    /// `v3`.
    pub version: String,
}

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
pub fn create_collection(
    store: &Store,
    scope: &Scope,
    user: &User,
    name: &str,
    description: &str,
) -> Result<Collection> {
    names::validate("name", name)?;
    names::validate_text("description", description)?;
    let collection = Collection {
        name: name.to_string(),
        description: description.to_string(),
        versions: 0,
        created_by: user.name.clone(),
        created_at: ids::now(),
    };
    if !store::insert_new(&store.trees.collections, scope.key(&[name]), &collection)? {
        return Err(Error::Conflict(format!(
            "{} already has a collection named '{name}'",
            scope.describe()
        )));
    }
    Ok(collection)
}

/// One collection.
pub fn collection(store: &Store, scope: &Scope, name: &str) -> Result<Collection> {
    store::get_json(&store.trees.collections, scope.key(&[name]))?
        .ok_or_else(|| not_found_collection(scope, name))
}

/// The scope's collections.
pub fn collections(store: &Store, scope: &Scope) -> Result<Vec<Collection>> {
    Ok(store::scan_json(&store.trees.collections, scope.key(&[]))?)
}

fn version_key(scope: &Scope, collection: &str, index: u64) -> Vec<u8> {
    scope.key(&[collection]).num(index).into_bytes()
}

/// One version.
pub fn version(store: &Store, scope: &Scope, collection: &str, version: &str) -> Result<Version> {
    let index = parse_version(version)?;
    store::get_json(&store.trees.versions, version_key(scope, collection, index))?.ok_or_else(
        || {
            Error::NotFound(format!(
                "collection '{collection}' in {} has no version {version}",
                scope.describe()
            ))
        },
    )
}

/// A collection's versions, oldest first.
pub fn versions(store: &Store, scope: &Scope, collection_name: &str) -> Result<Vec<Version>> {
    collection(store, scope, collection_name)?;
    Ok(store::scan_json(
        &store.trees.versions,
        scope.key(&[collection_name]),
    )?)
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

/// Logs a new version of a project collection. Returns it and the events
/// it caused (as do the other changes here).
pub fn create_version(
    store: &Store,
    scope: &Scope,
    user: &User,
    collection_name: &str,
    metadata: BTreeMap<String, Value>,
) -> Result<(Version, Vec<Event>)> {
    check_metadata(&metadata)?;
    add_version(store, scope, user, collection_name, metadata, None)
}

/// Links a project version into a registry collection, as its next version;
/// emits `LINK_ARTIFACT`.
pub fn link(
    store: &Store,
    registry: &Scope,
    user: &User,
    collection_name: &str,
    source: Source,
) -> Result<(Version, Vec<Event>)> {
    let project = Scope::Project {
        team: source.team.clone(),
        project: source.project.clone(),
    };
    let original = version(store, &project, &source.collection, &source.version)?;
    let source = Source {
        version: original.version.clone(),
        ..source
    };
    add_version(
        store,
        registry,
        user,
        collection_name,
        original.metadata,
        Some(source),
    )
}

fn add_version(
    store: &Store,
    scope: &Scope,
    user: &User,
    collection_name: &str,
    metadata: BTreeMap<String, Value>,
    source: Option<Source>,
) -> Result<(Version, Vec<Event>)> {
    let collection_key = scope.key(&[collection_name]);
    let t = &store.trees;
    let result = (&t.collections, &t.versions, &t.event_inbox).transaction(
        |(collections, versions, inbox)| {
            let Some(bytes) = collections.get(collection_key.as_ref())? else {
                return abort(not_found_collection(scope, collection_name));
            };
            let mut collection: Collection = decode(&bytes)?;
            let index = collection.versions;
            collection.versions += 1;
            let version = Version {
                collection: collection_name.to_string(),
                version: format!("v{index}"),
                index,
                aliases: Vec::new(),
                tags: Vec::new(),
                metadata: metadata.clone(),
                source: source.clone(),
                created_by: user.name.clone(),
                created_at: ids::now(),
            };
            collections.insert(collection_key.as_ref(), encode(&collection)?)?;
            versions.insert(
                version_key(scope, collection_name, index),
                encode(&version)?,
            )?;
            let events = link_events(scope, user, &version);
            for event in &events {
                inbox.insert(event.id.as_bytes(), encode(event)?)?;
            }
            Ok((version, events))
        },
    );
    finish(result)
}

/// Adds `alias` to a version, moving it from whichever version held it;
/// emits `ADD_ARTIFACT_ALIAS`.
pub fn add_alias(
    store: &Store,
    scope: &Scope,
    user: &User,
    collection: &str,
    version_text: &str,
    alias: &str,
) -> Result<(Version, Vec<Event>)> {
    check_label("alias", alias)?;
    if alias.starts_with('v') && alias[1..].parse::<u64>().is_ok() || alias == "latest" {
        return Err(Error::invalid(
            "alias",
            format!("'{alias}' is reserved: aliases may not look like versions or be 'latest'"),
        ));
    }
    label(
        store,
        scope,
        user,
        collection,
        version_text,
        Label::Alias(alias),
    )
}

/// Adds `tag` to a version; emits `ADD_ARTIFACT_TAG`.
pub fn add_tag(
    store: &Store,
    scope: &Scope,
    user: &User,
    collection: &str,
    version_text: &str,
    tag: &str,
) -> Result<(Version, Vec<Event>)> {
    check_label("tag", tag)?;
    label(
        store,
        scope,
        user,
        collection,
        version_text,
        Label::Tag(tag),
    )
}

fn check_label(field: &str, value: &str) -> Result<()> {
    let ok = (1..=MAX_LABEL_LEN).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':' | '/'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!(
                "{field} '{value}' is not valid: use 1 to {MAX_LABEL_LEN} letters, digits, '_', '.', '-', ':' or '/'"
            ),
        ))
    }
}

enum Label<'a> {
    Alias(&'a str),
    Tag(&'a str),
}

fn label(
    store: &Store,
    scope: &Scope,
    user: &User,
    collection: &str,
    version_text: &str,
    label: Label<'_>,
) -> Result<(Version, Vec<Event>)> {
    let index = parse_version(version_text)?;
    let key = version_key(scope, collection, index);
    let t = &store.trees;
    let result =
        (&t.versions, &t.aliases, &t.event_inbox).transaction(|(versions, aliases, inbox)| {
            let Some(bytes) = versions.get(&key)? else {
                return abort(Error::NotFound(format!(
                    "collection '{collection}' in {} has no version {version_text}",
                    scope.describe()
                )));
            };
            let mut version: Version = decode(&bytes)?;
            let event = match label {
                Label::Alias(alias) => {
                    let alias_key = scope.key(&[collection, alias]);
                    if let Some(held) = aliases.get(alias_key.as_ref())? {
                        let old_key = version_key(scope, collection, decode_index(&held));
                        if let Some(old) = versions.get(&old_key)? {
                            let mut old: Version = decode(&old)?;
                            old.aliases.retain(|a| a != alias);
                            versions.insert(old_key.as_slice(), encode(&old)?)?;
                            if old.index == version.index {
                                version = old;
                            }
                        }
                    }
                    aliases.insert(alias_key.as_ref(), &index.to_be_bytes())?;
                    version.aliases.push(alias.to_string());
                    let mut event = event_for(scope, user, &version, "ADD_ARTIFACT_ALIAS");
                    event.alias = Some(alias.to_string());
                    event
                }
                Label::Tag(tag) => {
                    if !version.tags.iter().any(|t| t == tag) {
                        version.tags.push(tag.to_string());
                    }
                    let mut event = event_for(scope, user, &version, "ADD_ARTIFACT_TAG");
                    event.tag = Some(tag.to_string());
                    event
                }
            };
            versions.insert(key.as_slice(), encode(&version)?)?;
            inbox.insert(event.id.as_bytes(), encode(&event)?)?;
            Ok((version, vec![event]))
        });
    finish(result)
}

/// A link fires `LINK_ARTIFACT` twice: in the registry linked to, and in
/// the project that owns the source version. Both describe the registry's
/// new version, so `${artifact_collection_name}` is the collection linked to.
fn link_events(scope: &Scope, user: &User, version: &Version) -> Vec<Event> {
    let Some(source) = &version.source else {
        return Vec::new();
    };
    let in_registry = event_for(scope, user, version, "LINK_ARTIFACT");
    let in_project = Event {
        id: ids::ordered_id(),
        scope: Scope::Project {
            team: source.team.clone(),
            project: source.project.clone(),
        },
        ..in_registry.clone()
    };
    vec![in_registry, in_project]
}

fn decode_index(bytes: &[u8]) -> u64 {
    bytes.try_into().map_or(u64::MAX, u64::from_be_bytes)
}

/// The event for `version` in `scope`.
fn event_for(scope: &Scope, user: &User, version: &Version, event_type: &str) -> Event {
    let (entity, project, path) = match (scope, &version.source) {
        (Scope::Project { team, project }, _) => {
            (team.clone(), project.clone(), format!("{team}/{project}"))
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
        event_type: event_type.to_string(),
        scope: scope.clone(),
        author: user.name.clone(),
        at_ms: ids::now_ms(),
        artifact: Some(ArtifactRef {
            entity,
            project,
            collection: version.collection.clone(),
            version: json!({
                "name": format!("{}:{}", version.collection, version.version),
                "path": version_string,
                "collection": version.collection,
                "version": version.version,
                "index": version.index,
                "aliases": version.aliases,
                "tags": version.tags,
                "metadata": version.metadata,
                "source": version.source,
                "created_by": version.created_by,
                "created_at": version.created_at,
            }),
            version_string,
            metadata: version.metadata.clone(),
        }),
        alias: None,
        tag: None,
        run: None,
    }
}
