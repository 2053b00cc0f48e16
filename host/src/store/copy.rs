//! `switchyard store copy`: an embedded store into an empty PostgreSQL
//! database, through the typed operations of both, in one transaction.

use std::path::Path;

use anyhow::{Context, bail};

use super::{MASTER_KEY_CHECK, MetricAt, Records, Store, VersionAt};
use crate::cfg::StoreConfig;
use crate::model::{GroupKind, Scope, User};

/// Copies the embedded store in `from` (its host stopped) into the empty
/// PostgreSQL database at `to`. Returns how many records were copied.
pub async fn embedded_to_postgres(from: &Path, to: &str) -> anyhow::Result<usize> {
    if !from.join("db").exists() {
        bail!("{} holds no embedded store (no db/ inside)", from.display());
    }
    let source = Store::open_embedded(from)?;
    let cfg = StoreConfig {
        url: Some(to.to_string()),
        ..StoreConfig::default()
    };
    let target = Store::open(&cfg, from).await?;
    if target.has_users().await? {
        bail!("the PostgreSQL database already holds a store; copy into an empty database");
    }
    let tx = target.begin().await?;
    let copied = copy(&source, &*tx).await?;
    tx.commit().await.context("committing the copy")?;
    Ok(copied)
}

/// Copies every record of `from` into `to`.
pub async fn copy(from: &Store, to: &dyn Records) -> anyhow::Result<usize> {
    let mut n = 0;
    if let Some(check) = from.meta(MASTER_KEY_CHECK).await? {
        to.set_meta(MASTER_KEY_CHECK, &check).await?;
        n += 1;
    }
    let users = from.users().await?;
    n += copy_users(from, to, &users).await?;
    let mut scopes = Vec::new();
    n += copy_groups(from, to, &mut scopes).await?;
    for scope in &scopes {
        n += copy_scope(from, to, scope).await?;
    }
    to.insert_events(&from.inbox().await?).await?;
    n += copy_outbox(from, to).await?;
    for (name, _) in from.plugin_digests().await? {
        if let Some(plugin) = from.plugin(&name).await? {
            to.put_plugin(&plugin).await?;
            n += 1;
        }
    }
    let personal = users.iter().map(|u| format!("~{}", u.name));
    let projects = scopes.iter().filter_map(|s| match s {
        Scope::Project { team, project } => Some(format!("{team}/{project}")),
        Scope::Registry { .. } | Scope::Collection { .. } | Scope::Team { .. } => None,
    });
    for usage_scope in personal.chain(projects) {
        for row in from.usage(&usage_scope).await? {
            to.add_usage(&usage_scope, &row).await?;
            n += 1;
        }
    }
    Ok(n)
}

/// Users, and their keys.
async fn copy_users(from: &Store, to: &dyn Records, users: &[User]) -> anyhow::Result<usize> {
    let mut n = 0;
    for user in users {
        to.insert_user(user).await?;
        n += 1;
    }
    for user in users {
        for key in from.keys_of(&user.id).await? {
            // Only the hash is stored, so the copy reads it back by id.
            let hash = key_hash(from, &key.user_id, &key.id).await?;
            to.insert_key(&hash, &key).await?;
            n += 1;
        }
    }
    Ok(n)
}

/// Teams and registries with their members, and what each team holds;
/// adds their scopes to `scopes`.
async fn copy_groups(
    from: &Store,
    to: &dyn Records,
    scopes: &mut Vec<Scope>,
) -> anyhow::Result<usize> {
    let mut n = 0;
    for kind in [GroupKind::Team, GroupKind::Registry] {
        for group in from.groups(kind).await? {
            let members = from.members(kind, &group.name).await?;
            let Some((first, rest)) = members.split_first() else {
                bail!("{} '{}' has no members", kind.noun(), group.name);
            };
            to.insert_group(kind, &group, first).await?;
            for member in rest {
                to.put_member(kind, &group.name, member).await?;
            }
            n += members.len() + 1;
            match kind {
                GroupKind::Registry => scopes.push(Scope::Registry {
                    registry: group.name.clone(),
                }),
                GroupKind::Team => n += copy_team(from, to, &group.name, scopes).await?,
            }
        }
    }
    Ok(n)
}

/// The deliveries waiting in the outbox, held by no host.
async fn copy_outbox(from: &Store, to: &dyn Records) -> anyhow::Result<usize> {
    let (waiting, _) = from
        .due_deliveries(u64::MAX, usize::MAX, &|_| false)
        .await?;
    for delivery in &waiting {
        to.insert_delivery(delivery).await?;
        // Held by no host: whichever host runs first sends it.
        to.finish_delivery(delivery, Some(delivery)).await?;
    }
    Ok(waiting.len())
}

/// A team's projects (added to `scopes`), runs, secrets and webhooks.
async fn copy_team(
    from: &Store,
    to: &dyn Records,
    team: &str,
    scopes: &mut Vec<Scope>,
) -> anyhow::Result<usize> {
    let mut n = 0;
    for secret in from.secrets(team).await? {
        to.put_secret(team, &secret).await?;
        n += 1;
    }
    for webhook in from.webhooks(team).await? {
        to.insert_webhook(team, &webhook).await?;
        n += 1;
    }
    for project in from.projects(team).await? {
        to.insert_project(&project).await?;
        for run in from.runs(team, &project.name).await? {
            to.insert_run(team, &project.name, &run).await?;
            for (metric, values) in from.metrics(team, &project.name, &run.id).await? {
                for value in values {
                    to.push_metric(
                        MetricAt {
                            team,
                            project: &project.name,
                            run: &run.id,
                            metric: &metric,
                        },
                        value,
                        usize::MAX,
                    )
                    .await?;
                }
                n += 1;
            }
            n += 1;
        }
        scopes.push(Scope::project(team, &project.name));
        n += 1;
    }
    Ok(n)
}

/// A scope's automations (with their executions) and collections.
async fn copy_scope(from: &Store, to: &dyn Records, scope: &Scope) -> anyhow::Result<usize> {
    let mut automations = from.automations(scope).await?;
    // Those on one of its collections (even one deleted since) too.
    let on_collections = from
        .all_automations()
        .await?
        .into_iter()
        .filter(|a| matches!(a.scope, Scope::Collection { .. }) && a.scope.parent() == *scope);
    automations.extend(on_collections);
    let mut n = 0;
    for automation in automations {
        to.save_automation(None, &automation).await?;
        let handle = automation.handle();
        for execution in from.executions(&handle, usize::MAX).await? {
            to.put_execution(&execution).await?;
            n += 1;
        }
        for (run, at) in from.run_fires(&handle).await? {
            to.claim_run_fire((&handle, &run), at, 0).await?;
        }
        let fires = from.fires(&handle).await?;
        let copy = move |kept: &mut Vec<u64>| {
            kept.clone_from(&fires);
            Ok(())
        };
        to.admit_fire(&handle, &copy).await?;
        n += 1;
    }
    for collection in from.collections(scope).await? {
        to.insert_collection(scope, &collection).await?;
        for labelled in from.versions(scope, &collection.name).await? {
            let version = &labelled.version;
            to.insert_version(scope, version).await?;
            let at = VersionAt {
                scope,
                collection: &collection.name,
                index: version.index,
            };
            for alias in &labelled.aliases {
                to.set_alias(at, alias).await?;
            }
            for tag in &labelled.tags {
                to.add_tag(at, tag).await?;
            }
            n += 1;
        }
        n += 1;
    }
    Ok(n)
}

/// The stored hash of a key, found by its id.
async fn key_hash(from: &Store, user_id: &str, key_id: &str) -> anyhow::Result<String> {
    from.key_hash(user_id, key_id)
        .await?
        .with_context(|| format!("API key {key_id} has no stored hash"))
}
