//! The typed operations on sled's trees.

use async_trait::async_trait;

use super::keys::{Key, prefix};
use super::{Sled, T, decode, io};
use crate::model::{
    ApiKey, Attempt, Automation, Collection, Delivery, Event, EventType, Execution, Group,
    GroupKind, Handle, LabelledVersion, Member, Project, Run, Scope, Secret, Session, State,
    Status, StoredPlugin, Totals, UsageRow, User, Version, Webhook,
};
use crate::store::{Records, Result};

/// The key of `rest` under `scope`.
fn scoped(scope: &Scope, rest: &[&str]) -> Key {
    let mut segments = scope.parts();
    segments.extend_from_slice(rest);
    prefix(&segments)
}

fn version_key(scope: &Scope, collection: &str, index: u64) -> Vec<u8> {
    scoped(scope, &[collection]).num(index).into_bytes()
}

/// The key of a label (`Key::text` of it) of version `index`.
fn label_key(scope: &Scope, collection: &str, index: u64, label: &[u8]) -> Vec<u8> {
    [version_key(scope, collection, index).as_slice(), label].concat()
}

fn trigger_key(a: &Automation) -> Key {
    scoped(&a.scope, &[a.event.event_type().as_str(), &a.name])
}

fn webhook_key(a: &Automation) -> Key {
    let mut segments = vec![a.webhook.team.as_str(), a.webhook.name.as_str()];
    segments.extend(a.scope.parts());
    segments.push(&a.name);
    prefix(&segments)
}

fn execution_key(automation: &Handle, id: &str) -> Key {
    scoped(&automation.scope, &[&automation.name, id])
}

fn outbox_key(d: &Delivery) -> Vec<u8> {
    Key::new().num(d.due_ms).text(&d.id).into_bytes()
}

fn usage_prefix(scope: &str) -> String {
    format!("{scope}\0")
}

/// The trees of a kind of group: records, members by group, members by user.
fn group_trees(kind: GroupKind) -> (T, T, T) {
    match kind {
        GroupKind::Team => (T::Teams, T::Members, T::Memberships),
        GroupKind::Registry => (T::Registries, T::RegistryMembers, T::RegistryMemberships),
    }
}

/// The last text segment of a key.
fn last_segment(key: &[u8]) -> &str {
    let body = &key[..key.len().saturating_sub(1)];
    let start = body.iter().rposition(|b| *b == 0).map_or(0, |i| i + 1);
    std::str::from_utf8(&body[start..]).unwrap_or("")
}

impl Sled {
    /// `version` with its aliases and tags, each in the order it got them.
    fn with_labels(&self, scope: &Scope, version: Version) -> Result<LabelledVersion> {
        let key = version_key(scope, &version.collection, version.index);
        let labels = |t: T| -> Result<Vec<String>> {
            let mut found = self.scan(t, &key)?;
            found.sort_by(|a, b| a.1.cmp(&b.1));
            // After the version's key: the label, then its 0x00.
            Ok(found
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(&k[key.len()..k.len() - 1]).into_owned())
                .collect())
        };
        Ok(LabelledVersion {
            aliases: labels(T::VersionAliases)?,
            tags: labels(T::Tags)?,
            version,
        })
    }

    /// A number larger than any this store gave before: orders labels.
    fn next_seq(&self) -> Result<Vec<u8>> {
        Ok(self
            .shared
            .db
            .generate_id()
            .map_err(io)?
            .to_be_bytes()
            .to_vec())
    }

    /// Stores `value` under `key` unless the key is taken; `false` if it was.
    async fn insert_new<V: serde::Serialize + Sync>(
        &self,
        t: T,
        key: impl Into<Vec<u8>>,
        value: &V,
    ) -> Result<bool> {
        let key = key.into();
        let w = self.writer().await;
        if w.get(t, &key)?.is_some() {
            return Ok(false);
        }
        w.put_json(t, key, value)?;
        w.finish()?;
        Ok(true)
    }

    /// Deletes `key`; `false` if it was not there.
    async fn remove(&self, t: T, key: impl Into<Vec<u8>>) -> Result<bool> {
        let key = key.into();
        let w = self.writer().await;
        if w.get(t, &key)?.is_none() {
            return Ok(false);
        }
        w.delete(t, key);
        w.finish()?;
        Ok(true)
    }

    async fn replace<V: serde::Serialize + Sync>(
        &self,
        t: T,
        key: impl Into<Vec<u8>>,
        value: &V,
    ) -> Result<()> {
        let w = self.writer().await;
        w.put_json(t, key, value)?;
        w.finish()
    }
}

#[async_trait]
impl Records for Sled {
    async fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.get(T::Meta, key.as_bytes())
    }

    async fn set_meta(&self, key: &str, value: &[u8]) -> Result<()> {
        let w = self.writer().await;
        w.put(T::Meta, key.as_bytes(), value.to_vec());
        w.finish()
    }

    async fn has_users(&self) -> Result<bool> {
        // At every start: the first key answers, not the whole tree.
        Ok(!self.tree(T::Users).is_empty())
    }

    async fn insert_user(&self, user: &User) -> Result<bool> {
        let w = self.writer().await;
        if w.get(T::UserNames, user.name.as_bytes())?.is_some() {
            return Ok(false);
        }
        w.put_json(T::Users, user.id.as_bytes(), user)?;
        w.put(
            T::UserNames,
            user.name.as_bytes(),
            user.id.clone().into_bytes(),
        );
        w.finish()?;
        Ok(true)
    }

    async fn user(&self, id: &str) -> Result<Option<User>> {
        self.get_json(T::Users, id.as_bytes())
    }

    async fn user_named(&self, name: &str) -> Result<Option<User>> {
        match self.get(T::UserNames, name.as_bytes())? {
            Some(id) => self.get_json(T::Users, &id),
            None => Ok(None),
        }
    }

    async fn users(&self) -> Result<Vec<User>> {
        self.scan_json(T::Users, &[])
    }

    async fn insert_key(&self, hash: &str, key: &ApiKey) -> Result<()> {
        let w = self.writer().await;
        w.put_json(T::ApiKeys, hash.as_bytes(), key)?;
        w.put(
            T::UserKeys,
            prefix(&[&key.user_id, &key.id]).into_bytes(),
            hash.as_bytes().to_vec(),
        );
        w.finish()
    }

    async fn key(&self, hash: &str) -> Result<Option<ApiKey>> {
        self.get_json(T::ApiKeys, hash.as_bytes())
    }

    async fn keys_of(&self, user_id: &str) -> Result<Vec<ApiKey>> {
        let mut keys = Vec::new();
        for (_, hash) in self.scan(T::UserKeys, prefix(&[user_id]).as_ref())? {
            if let Some(key) = self.get_json(T::ApiKeys, &hash)? {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    async fn key_hash(&self, user_id: &str, key_id: &str) -> Result<Option<String>> {
        let hash = self.get(T::UserKeys, prefix(&[user_id, key_id]).as_ref())?;
        Ok(hash.map(|h| String::from_utf8_lossy(&h).into_owned()))
    }

    async fn delete_key(&self, user_id: &str, key_id: &str) -> Result<bool> {
        let index = prefix(&[user_id, key_id]).into_bytes();
        let w = self.writer().await;
        let Some(hash) = w.get(T::UserKeys, &index)? else {
            return Ok(false);
        };
        w.delete(T::ApiKeys, hash);
        w.delete(T::UserKeys, index);
        w.finish()?;
        Ok(true)
    }

    async fn insert_session(&self, hash: &str, session: &Session) -> Result<()> {
        let w = self.writer().await;
        w.put_json(T::Sessions, hash.as_bytes(), session)?;
        w.finish()
    }

    async fn session(&self, hash: &str) -> Result<Option<Session>> {
        self.get_json(T::Sessions, hash.as_bytes())
    }

    async fn delete_session(&self, hash: &str) -> Result<bool> {
        let w = self.writer().await;
        if w.get(T::Sessions, hash.as_bytes())?.is_none() {
            return Ok(false);
        }
        w.delete(T::Sessions, hash.as_bytes().to_vec());
        w.finish()?;
        Ok(true)
    }

    async fn insert_group(&self, kind: GroupKind, group: &Group, first: &Member) -> Result<bool> {
        let (records, members, memberships) = group_trees(kind);
        let w = self.writer().await;
        if w.get(records, group.name.as_bytes())?.is_some() {
            return Ok(false);
        }
        w.put_json(records, group.name.as_bytes(), group)?;
        w.put_json(members, prefix(&[&group.name, &first.user_id]), first)?;
        w.put_json(memberships, prefix(&[&first.user_id, &group.name]), first)?;
        w.finish()?;
        Ok(true)
    }

    async fn group(&self, kind: GroupKind, name: &str) -> Result<Option<Group>> {
        self.get_json(group_trees(kind).0, name.as_bytes())
    }

    async fn groups(&self, kind: GroupKind) -> Result<Vec<Group>> {
        self.scan_json(group_trees(kind).0, &[])
    }

    async fn member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<Option<Member>> {
        self.get_json(group_trees(kind).1, prefix(&[group, user_id]).as_ref())
    }

    async fn members(&self, kind: GroupKind, group: &str) -> Result<Vec<Member>> {
        self.scan_json(group_trees(kind).1, prefix(&[group]).as_ref())
    }

    async fn memberships(&self, kind: GroupKind, user_id: &str) -> Result<Vec<(Group, Member)>> {
        let (records, _, memberships) = group_trees(kind);
        let mut out = Vec::new();
        for (key, value) in self.scan(memberships, prefix(&[user_id]).as_ref())? {
            let member: Member = decode(memberships, &value)?;
            if let Some(group) = self.get_json(records, last_segment(&key).as_bytes())? {
                out.push((group, member));
            }
        }
        Ok(out)
    }

    async fn put_member(&self, kind: GroupKind, group: &str, member: &Member) -> Result<()> {
        let (_, members, memberships) = group_trees(kind);
        let w = self.writer().await;
        w.put_json(members, prefix(&[group, &member.user_id]), member)?;
        w.put_json(memberships, prefix(&[&member.user_id, group]), member)?;
        w.finish()
    }

    async fn delete_member(&self, kind: GroupKind, group: &str, user_id: &str) -> Result<bool> {
        let (_, members, memberships) = group_trees(kind);
        let by_group = prefix(&[group, user_id]).into_bytes();
        let w = self.writer().await;
        if w.get(members, &by_group)?.is_none() {
            return Ok(false);
        }
        w.delete(members, by_group);
        w.delete(memberships, prefix(&[user_id, group]).into_bytes());
        w.finish()?;
        Ok(true)
    }

    async fn insert_project(&self, project: &Project) -> Result<bool> {
        self.insert_new(
            T::Projects,
            prefix(&[&project.team, &project.name]),
            project,
        )
        .await
    }

    async fn project(&self, team: &str, name: &str) -> Result<Option<Project>> {
        self.get_json(T::Projects, prefix(&[team, name]).as_ref())
    }

    async fn projects(&self, team: &str) -> Result<Vec<Project>> {
        self.scan_json(T::Projects, prefix(&[team]).as_ref())
    }

    async fn delete_project(&self, team: &str, name: &str) -> Result<bool> {
        self.remove(T::Projects, prefix(&[team, name])).await
    }

    async fn put_secret(&self, team: &str, secret: &Secret) -> Result<()> {
        self.replace(T::Secrets, prefix(&[team, &secret.name]), secret)
            .await
    }

    async fn secret(&self, team: &str, name: &str) -> Result<Option<Secret>> {
        self.get_json(T::Secrets, prefix(&[team, name]).as_ref())
    }

    async fn secrets(&self, team: &str) -> Result<Vec<Secret>> {
        self.scan_json(T::Secrets, prefix(&[team]).as_ref())
    }

    async fn delete_secret(&self, team: &str, name: &str) -> Result<bool> {
        self.remove(T::Secrets, prefix(&[team, name])).await
    }

    async fn insert_webhook(&self, team: &str, webhook: &Webhook) -> Result<bool> {
        self.insert_new(T::Webhooks, prefix(&[team, &webhook.name]), webhook)
            .await
    }

    async fn put_webhook(&self, team: &str, webhook: &Webhook) -> Result<()> {
        self.replace(T::Webhooks, prefix(&[team, &webhook.name]), webhook)
            .await
    }

    async fn webhook(&self, team: &str, name: &str) -> Result<Option<Webhook>> {
        self.get_json(T::Webhooks, prefix(&[team, name]).as_ref())
    }

    async fn webhooks(&self, team: &str) -> Result<Vec<Webhook>> {
        self.scan_json(T::Webhooks, prefix(&[team]).as_ref())
    }

    async fn delete_webhook(&self, team: &str, name: &str) -> Result<bool> {
        self.remove(T::Webhooks, prefix(&[team, name])).await
    }

    async fn save_automation(
        &self,
        replacing: Option<&str>,
        automation: &Automation,
    ) -> Result<bool> {
        let scope = &automation.scope;
        let new_key = scoped(scope, &[&automation.name]).into_bytes();
        let w = self.writer().await;
        if replacing != Some(automation.name.as_str()) && w.get(T::Automations, &new_key)?.is_some()
        {
            return Ok(false);
        }
        if let Some(old_name) = replacing {
            let old_key = scoped(scope, &[old_name]).into_bytes();
            if let Some(old) = w.get_json::<Automation>(T::Automations, &old_key)? {
                w.delete(T::AutomationTriggers, trigger_key(&old).into_bytes());
                w.delete(T::WebhookAutomations, webhook_key(&old).into_bytes());
            }
            w.delete(T::Automations, old_key);
        }
        w.put_json(T::Automations, new_key, automation)?;
        w.put(
            T::AutomationTriggers,
            trigger_key(automation).into_bytes(),
            Vec::new(),
        );
        w.put_json(
            T::WebhookAutomations,
            webhook_key(automation).into_bytes(),
            &automation.handle(),
        )?;
        w.finish()?;
        Ok(true)
    }

    async fn automation(&self, scope: &Scope, name: &str) -> Result<Option<Automation>> {
        self.get_json(T::Automations, scoped(scope, &[name]).as_ref())
    }

    async fn automations(&self, scope: &Scope) -> Result<Vec<Automation>> {
        self.scan_json(T::Automations, scoped(scope, &[]).as_ref())
    }

    async fn all_automations(&self) -> Result<Vec<Automation>> {
        self.scan_json(T::Automations, &[])
    }

    async fn triggered(&self, scope: &Scope, event: EventType) -> Result<Vec<Automation>> {
        let mut out = Vec::new();
        for (key, _) in self.scan(
            T::AutomationTriggers,
            scoped(scope, &[event.as_str()]).as_ref(),
        )? {
            if let Some(automation) = self.automation(scope, last_segment(&key)).await?
                && automation.state == State::Active
            {
                out.push(automation);
            }
        }
        Ok(out)
    }

    async fn listens(&self, scope: &Scope, event: EventType) -> Result<bool> {
        Ok(!self
            .scan(
                T::AutomationTriggers,
                scoped(scope, &[event.as_str()]).as_ref(),
            )?
            .is_empty())
    }

    async fn automations_using(&self, team: &str, webhook: &str) -> Result<Vec<Handle>> {
        self.scan_json(T::WebhookAutomations, prefix(&[team, webhook]).as_ref())
    }

    async fn delete_automation(&self, scope: &Scope, name: &str) -> Result<bool> {
        let key = scoped(scope, &[name]).into_bytes();
        let w = self.writer().await;
        let Some(old) = w.get_json::<Automation>(T::Automations, &key)? else {
            return Ok(false);
        };
        w.delete(T::Automations, key);
        w.delete(T::AutomationTriggers, trigger_key(&old).into_bytes());
        w.delete(T::WebhookAutomations, webhook_key(&old).into_bytes());
        w.finish()?;
        Ok(true)
    }

    async fn insert_collection(&self, scope: &Scope, collection: &Collection) -> Result<bool> {
        self.insert_new(
            T::Collections,
            scoped(scope, &[&collection.name]),
            collection,
        )
        .await
    }

    async fn collection(&self, scope: &Scope, name: &str) -> Result<Option<Collection>> {
        self.get_json(T::Collections, scoped(scope, &[name]).as_ref())
    }

    async fn collections(&self, scope: &Scope) -> Result<Vec<Collection>> {
        self.scan_json(T::Collections, scoped(scope, &[]).as_ref())
    }

    async fn next_version(&self, scope: &Scope, collection: &str) -> Result<Option<u64>> {
        let key = scoped(scope, &[collection]).into_bytes();
        let w = self.writer().await;
        let Some(mut record) = w.get_json::<Collection>(T::Collections, &key)? else {
            return Ok(None);
        };
        let index = record.versions;
        record.versions += 1;
        w.put_json(T::Collections, key, &record)?;
        w.finish()?;
        Ok(Some(index))
    }

    async fn insert_version(&self, scope: &Scope, version: &Version) -> Result<()> {
        let key = version_key(scope, &version.collection, version.index);
        self.replace(T::Versions, key, version).await
    }

    async fn version(
        &self,
        scope: &Scope,
        collection: &str,
        index: u64,
    ) -> Result<Option<Version>> {
        self.get_json(T::Versions, &version_key(scope, collection, index))
    }

    async fn labelled_version(
        &self,
        scope: &Scope,
        collection: &str,
        index: u64,
    ) -> Result<Option<LabelledVersion>> {
        let version = self.version(scope, collection, index).await?;
        version.map(|v| self.with_labels(scope, v)).transpose()
    }

    async fn versions(&self, scope: &Scope, collection: &str) -> Result<Vec<LabelledVersion>> {
        let versions: Vec<Version> =
            self.scan_json(T::Versions, scoped(scope, &[collection]).as_ref())?;
        versions
            .into_iter()
            .map(|v| self.with_labels(scope, v))
            .collect()
    }

    async fn set_alias(
        &self,
        scope: &Scope,
        collection: &str,
        index: u64,
        alias: &str,
    ) -> Result<Option<u64>> {
        let alias_key = scoped(scope, &[collection, alias]).into_bytes();
        let label = Key::new().text(alias).into_bytes();
        let w = self.writer().await;
        let held = w
            .get(T::Aliases, &alias_key)?
            .and_then(|held| held.as_slice().try_into().ok().map(u64::from_be_bytes));
        if held == Some(index) {
            return Ok(None);
        }
        if let Some(old) = held {
            w.delete(T::VersionAliases, label_key(scope, collection, old, &label));
        }
        w.put(T::Aliases, alias_key, index.to_be_bytes().to_vec());
        let seq = w.next_seq()?;
        w.put(
            T::VersionAliases,
            label_key(scope, collection, index, &label),
            seq,
        );
        w.finish()?;
        Ok(held)
    }

    async fn add_tag(&self, scope: &Scope, collection: &str, index: u64, tag: &str) -> Result<()> {
        let key = label_key(scope, collection, index, &Key::new().text(tag).into_bytes());
        let w = self.writer().await;
        if w.get(T::Tags, &key)?.is_none() {
            let seq = w.next_seq()?;
            w.put(T::Tags, key, seq);
        }
        w.finish()
    }

    async fn insert_run(&self, team: &str, project: &str, run: &Run) -> Result<()> {
        self.replace(T::Runs, prefix(&[team, project, &run.id]), run)
            .await
    }

    async fn run(&self, team: &str, project: &str, id: &str) -> Result<Option<Run>> {
        self.get_json(T::Runs, prefix(&[team, project, id]).as_ref())
    }

    async fn runs(&self, team: &str, project: &str) -> Result<Vec<Run>> {
        self.scan_json(T::Runs, prefix(&[team, project]).as_ref())
    }

    async fn push_metric(
        &self,
        team: &str,
        project: &str,
        run: &str,
        metric: &str,
        value: f64,
        keep: usize,
    ) -> Result<Vec<f64>> {
        let key = prefix(&[team, project, run, metric]).into_bytes();
        let w = self.writer().await;
        let mut values: Vec<f64> = w.get_json(T::Metrics, &key)?.unwrap_or_default();
        values.push(value);
        if values.len() > keep {
            values.drain(..values.len() - keep);
        }
        w.put_json(T::Metrics, key, &values)?;
        w.finish()?;
        Ok(values)
    }

    async fn metrics(
        &self,
        team: &str,
        project: &str,
        run: &str,
    ) -> Result<Vec<(String, Vec<f64>)>> {
        self.scan(T::Metrics, prefix(&[team, project, run]).as_ref())?
            .into_iter()
            .map(|(key, value)| Ok((last_segment(&key).to_string(), decode(T::Metrics, &value)?)))
            .collect()
    }

    async fn run_fires(&self, automation: &Handle) -> Result<Vec<(String, u64)>> {
        let prefix = scoped(&automation.scope, &[&automation.name]);
        Ok(self
            .scan(T::RunFired, prefix.as_ref())?
            .into_iter()
            .filter_map(|(key, value)| {
                let at = u64::from_be_bytes(value.as_slice().try_into().ok()?);
                Some((last_segment(&key).to_string(), at))
            })
            .collect())
    }

    async fn claim_run_fire(
        &self,
        automation: &Handle,
        run: &str,
        now_ms: u64,
        window_ms: u64,
    ) -> Result<bool> {
        let key = scoped(&automation.scope, &[&automation.name, run]).into_bytes();
        let w = self.writer().await;
        let last = w
            .get(T::RunFired, &key)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map(u64::from_be_bytes);
        if last.is_some_and(|at| now_ms.saturating_sub(at) < window_ms) {
            return Ok(false);
        }
        w.put(T::RunFired, key, now_ms.to_be_bytes().to_vec());
        w.finish()?;
        Ok(true)
    }

    async fn insert_events(&self, events: &[Event]) -> Result<()> {
        let w = self.writer().await;
        for event in events {
            w.put_json(T::EventInbox, event.id.as_bytes(), event)?;
        }
        w.finish()
    }

    async fn inbox(&self) -> Result<Vec<Event>> {
        self.scan_readable(T::EventInbox, &[], false, usize::MAX)
            .await
    }

    async fn take_event(&self, id: &str) -> Result<bool> {
        self.remove(T::EventInbox, id.as_bytes()).await
    }

    async fn insert_delivery(&self, delivery: &Delivery) -> Result<()> {
        self.replace(T::Outbox, outbox_key(delivery), delivery)
            .await
    }

    async fn due_deliveries(
        &self,
        now_ms: u64,
        limit: usize,
        skip: &(dyn for<'k> Fn(&'k str) -> bool + Sync),
    ) -> Result<(Vec<Delivery>, Option<u64>)> {
        // Keys start with the due time, so the first one not due ends the scan.
        let mut due = Vec::new();
        let mut unreadable = Vec::new();
        let mut next = None;
        for item in self.tree(T::Outbox).iter() {
            let (key, value) = item.map_err(io)?;
            let due_ms = key
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes);
            if due_ms.is_some_and(|d| d > now_ms) {
                next = due_ms;
                break;
            }
            // `due ms` then `id \0`: an id in flight is left unread.
            let id = key.get(8..key.len().saturating_sub(1)).unwrap_or_default();
            if skip(std::str::from_utf8(id).unwrap_or_default()) {
                continue;
            }
            match serde_json::from_slice::<Delivery>(&value) {
                Err(e) => unreadable.push((key.to_vec(), value.to_vec(), e.to_string())),
                Ok(delivery) if delivery.due_ms > now_ms => {
                    next = Some(delivery.due_ms);
                    break;
                }
                Ok(_) if due.len() == limit => {
                    next = Some(now_ms);
                    break;
                }
                Ok(delivery) => due.push(delivery),
            }
        }
        self.quarantine_all(T::Outbox, unreadable).await?;
        Ok((due, next))
    }

    async fn delivery_waits(&self, delivery: &Delivery) -> Result<bool> {
        Ok(self.get(T::Outbox, &outbox_key(delivery))?.is_some())
    }

    async fn renew_lease(&self, _delivery: &Delivery) -> Result<()> {
        Ok(())
    }

    async fn finish_delivery(&self, delivery: &Delivery, next: Option<&Delivery>) -> Result<()> {
        let w = self.writer().await;
        w.delete(T::Outbox, outbox_key(delivery));
        if let Some(next) = next {
            w.put_json(T::Outbox, outbox_key(next), next)?;
        }
        w.finish()
    }

    async fn pending_deliveries(&self) -> Result<usize> {
        Ok(self.tree(T::Outbox).len())
    }

    async fn first_due(&self) -> Result<Option<u64>> {
        // Keys start with the due time, big-endian.
        let first = self.tree(T::Outbox).first().map_err(io)?;
        Ok(first.and_then(|(key, _)| Some(u64::from_be_bytes(key.get(..8)?.try_into().ok()?))))
    }

    async fn put_execution(&self, execution: &Execution) -> Result<()> {
        let key = execution_key(&execution.automation, &execution.id);
        self.replace(T::Executions, key, execution).await
    }

    async fn execution(&self, automation: &Handle, id: &str) -> Result<Option<Execution>> {
        self.get_json(T::Executions, execution_key(automation, id).as_ref())
    }

    async fn executions(&self, automation: &Handle, limit: usize) -> Result<Vec<Execution>> {
        let prefix = scoped(&automation.scope, &[&automation.name]);
        self.scan_readable(T::Executions, prefix.as_ref(), true, limit)
            .await
    }

    async fn record_attempt(
        &self,
        automation: &Handle,
        id: &str,
        status: Status,
        error: Option<&str>,
        attempt: &Attempt,
    ) -> Result<bool> {
        let key = execution_key(automation, id).into_bytes();
        let w = self.writer().await;
        let Some(bytes) = w.get(T::Executions, &key)? else {
            return Ok(false);
        };
        let mut execution: Execution = match serde_json::from_slice(&bytes) {
            Ok(execution) => execution,
            Err(e) => {
                w.quarantine(T::Executions, &key, &bytes, &e.to_string())?;
                w.finish()?;
                return Ok(false);
            }
        };
        execution.status = status;
        execution.error = error.map(str::to_string);
        execution.attempts.push(attempt.clone());
        execution.updated_at_ms = crate::ids::now_ms();
        w.put_json(T::Executions, key, &execution)?;
        w.finish()?;
        Ok(true)
    }

    async fn add_usage(
        &self,
        scope: &str,
        day: &str,
        model: &str,
        key_id: &str,
        add: &Totals,
    ) -> Result<()> {
        let key = format!("{}{day}\0{model}\0{key_id}", usage_prefix(scope)).into_bytes();
        let w = self.writer().await;
        let mut totals: Totals = w.get_json(T::Usage, &key)?.unwrap_or_default();
        totals.add(add);
        w.put_json(T::Usage, key, &totals)?;
        w.finish()
    }

    async fn usage(&self, scope: &str) -> Result<Vec<UsageRow>> {
        let prefix = usage_prefix(scope);
        let mut rows = Vec::new();
        for (key, value) in self.scan(T::Usage, prefix.as_bytes())? {
            let key = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let mut parts = key.splitn(3, '\0');
            let (Some(day), Some(model), Some(key_id)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            rows.push(UsageRow {
                day: day.into(),
                model: model.into(),
                key_id: key_id.into(),
                totals: decode(T::Usage, &value)?,
            });
        }
        Ok(rows)
    }

    async fn put_plugin(&self, plugin: &StoredPlugin) -> Result<()> {
        self.replace(T::Plugins, plugin.name.as_bytes(), plugin)
            .await
    }

    async fn plugin_digests(&self) -> Result<Vec<(String, String)>> {
        Ok(self
            .scan_json::<StoredPlugin>(T::Plugins, &[])?
            .into_iter()
            .map(|p| (p.name, p.sha256))
            .collect())
    }

    async fn plugin(&self, name: &str) -> Result<Option<StoredPlugin>> {
        self.get_json(T::Plugins, name.as_bytes())
    }

    async fn delete_plugin(&self, name: &str) -> Result<bool> {
        self.remove(T::Plugins, name.as_bytes()).await
    }

    async fn quarantined(&self) -> Result<usize> {
        Ok(self.tree(T::Quarantine).len())
    }
}
